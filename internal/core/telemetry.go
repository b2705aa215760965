package core

import (
	"context"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// Metrics are the pubsub's OpenTelemetry instruments. Attributes have
// bounded cardinality: pubsub, group, and the peer node; never a topic or a
// subscriber. See docs/operations.md for what each means.
type Metrics struct {
	Published, Delivered            metric.Int64Counter
	BatchesSent, BatchesAcked       metric.Int64Counter
	Retries                         metric.Int64Counter
	ExpiredSent, ExpiredReceived    metric.Int64Counter
	RoundTrip                       metric.Float64Histogram
	gauges                          sync.Map // gaugeKey -> *PeerGauge
	registration                    metric.Registration
	groupAttrs                      []metric.MeasurementOption
	pubsubAttr                      attribute.KeyValue
	lagGauge, fillGauge, failsGauge metric.Int64ObservableGauge

	// Back-pressure (delivery to this node's subscribers) and sessions.
	dropped, bpNotices            metric.Int64Counter
	slowActions, sessionPressure  metric.Int64Counter
	sessionRefused                metric.Int64Counter
	reservationsGauge             metric.Int64ObservableGauge
	reservations                  atomic.Pointer[func() int64] // read by the gauge's callback
	pubsubOnly                    metric.MeasurementOption
	dropAttrs, bpAttrs            map[string]metric.MeasurementOption
	actionAttrs, sessPressureAttr map[string]metric.MeasurementOption
}

// Causes of a dropped delivery (attribute "cause" of echopubsub.subscriber.dropped).
const (
	DropBound        = "bound"         // the subscriber's queue was at its bound
	DropAbsent       = "absent"        // a named subscriber: nothing answered to its name
	DropNoticeCopies = "notice_copies" // a copy for the notice subscriber, itself at its bound
)

type gaugeKey struct {
	group uint32
	node  string
}

// PeerGauge is what the producer last saw of one peer, read by the gauges'
// callback (atomics: the producer writes, the exporter reads).
type PeerGauge struct {
	Lag, Fill, Failures atomic.Int64
	Attrs               metric.MeasurementOption
}

// NewMetrics creates the instruments on mp (nil: a no-op provider).
func NewMetrics(mp metric.MeterProvider, pubsub string, poolSize int) (*Metrics, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := &Metrics{pubsubAttr: attribute.String("pubsub", pubsub)}
	meter := mp.Meter("github.com/echopubsub/echopubsub")
	var err error
	counter := func(name, desc string) metric.Int64Counter {
		c, e := meter.Int64Counter(name, metric.WithDescription(desc))
		if e != nil && err == nil {
			err = e
		}
		return c
	}
	m.Published = counter("echopubsub.messages.published", "Messages written to a producer's buffer.")
	m.Delivered = counter("echopubsub.messages.delivered", "Messages handed to this node's subscribers (own writes and received batches).")
	m.BatchesSent = counter("echopubsub.batches.sent", "Batches sent to a peer node (retries included).")
	m.BatchesAcked = counter("echopubsub.batches.acked", "Batches a peer node acknowledged.")
	m.Retries = counter("echopubsub.retries", "Failed calls to a peer node, each retried after RetryInterval.")
	m.ExpiredSent = counter("echopubsub.cursor_expired.sent", "CursorExpired told to a peer node by this node's producers.")
	m.ExpiredReceived = counter("echopubsub.cursor_expired.received", "CursorExpired notices this node's workers gave their subscribers.")
	if m.RoundTrip, err = meter.Float64Histogram("echopubsub.batch.round_trip", metric.WithUnit("s"),
		metric.WithDescription("Time from sending a batch to its acknowledgement.")); err != nil {
		return nil, err
	}
	if m.lagGauge, err = meter.Int64ObservableGauge("echopubsub.peer.lag",
		metric.WithDescription("Messages a peer node has not acknowledged (its lag behind the write cursor).")); err != nil {
		return nil, err
	}
	if m.fillGauge, err = meter.Int64ObservableGauge("echopubsub.peer.buffer_fill", metric.WithUnit("%"),
		metric.WithDescription("A peer's lag as a percentage of BufferSize: 100 means its next message is being overwritten.")); err != nil {
		return nil, err
	}
	if m.failsGauge, err = meter.Int64ObservableGauge("echopubsub.peer.failures",
		metric.WithDescription("Consecutive failed calls to a peer node.")); err != nil {
		return nil, err
	}
	m.dropped = counter("echopubsub.subscriber.dropped", "Deliveries to this node's subscribers dropped, by cause: bound (queue full), absent (named subscriber not running), notice_copies.")
	m.bpNotices = counter("echopubsub.backpressure.notices", "BackPressure notices sent to this node's subscribers, by state (dropping, resumed).")
	m.slowActions = counter("echopubsub.session.slow_consumer_actions", "Sessions closed because a durable delivery found HardQueue pending, by action (disconnect, exit_owner).")
	m.sessionPressure = counter("echopubsub.session.pressure_notices", "SessionPressure notices sent to session owners, by state.")
	m.sessionRefused = counter("echopubsub.session.refused", "Durable session deliveries refused because the node's reservation table was full.")
	if err != nil {
		return nil, err
	}
	if m.reservationsGauge, err = meter.Int64ObservableGauge("echopubsub.session.reservations",
		metric.WithDescription("Durable session deliveries not yet acknowledged on this node (pending reservations), all sessions together.")); err != nil {
		return nil, err
	}
	m.pubsubOnly = metric.WithAttributeSet(attribute.NewSet(m.pubsubAttr))
	with := func(key string, values ...string) map[string]metric.MeasurementOption {
		out := map[string]metric.MeasurementOption{}
		for _, v := range values {
			out[v] = metric.WithAttributeSet(attribute.NewSet(m.pubsubAttr, attribute.String(key, v)))
		}
		return out
	}
	m.dropAttrs = with("cause", DropBound, DropAbsent, DropNoticeCopies)
	m.bpAttrs = with("state", "dropping", "resumed")
	m.actionAttrs = with("action", "disconnect", "exit_owner")
	m.sessPressureAttr = with("state", "soft_queue_exceeded", "soft_queue_relieved", "reservations_full", "reservations_resumed")
	for g := 0; g < poolSize; g++ {
		m.groupAttrs = append(m.groupAttrs, metric.WithAttributeSet(attribute.NewSet(m.pubsubAttr, attribute.Int("group", g))))
	}
	m.registration, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		m.gauges.Range(func(_, v any) bool {
			pg := v.(*PeerGauge)
			o.ObserveInt64(m.lagGauge, pg.Lag.Load(), pg.Attrs)
			o.ObserveInt64(m.fillGauge, pg.Fill.Load(), pg.Attrs)
			o.ObserveInt64(m.failsGauge, pg.Failures.Load(), pg.Attrs)
			return true
		})
		if f := m.reservations.Load(); f != nil {
			o.ObserveInt64(m.reservationsGauge, (*f)(), m.pubsubOnly)
		}
		return nil
	}, m.lagGauge, m.fillGauge, m.failsGauge, m.reservationsGauge)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Close unregisters the gauges' callback. Idempotent.
func (m *Metrics) Close() {
	if m != nil && m.registration != nil {
		_ = m.registration.Unregister()
	}
}

// peer returns the gauges and attributes of one (group, peer node).
func (m *Metrics) Peer(group uint32, node string) *PeerGauge {
	k := gaugeKey{group, node}
	if v, ok := m.gauges.Load(k); ok {
		return v.(*PeerGauge)
	}
	pg := &PeerGauge{Attrs: metric.WithAttributeSet(attribute.NewSet(m.pubsubAttr,
		attribute.Int("group", int(group)), attribute.String("peer", node)))}
	v, _ := m.gauges.LoadOrStore(k, pg)
	return v.(*PeerGauge)
}

// forget drops a peer's gauges (the producer forgot the node).
func (m *Metrics) Forget(group uint32, node string) { m.gauges.Delete(gaugeKey{group, node}) }

func (m *Metrics) Group(g uint32) metric.MeasurementOption {
	if int(g) < len(m.groupAttrs) {
		return m.groupAttrs[g]
	}
	return metric.WithAttributeSet(attribute.NewSet(m.pubsubAttr))
}

// Dropped counts deliveries dropped for cause (DropBound, DropAbsent,
// DropNoticeCopies). Safe on a nil Metrics.
func (m *Metrics) Dropped(cause string) {
	if m != nil {
		m.dropped.Add(context.Background(), 1, m.attr(m.dropAttrs, cause))
	}
}

// BackPressureNotice counts a BackPressure notice (resumed false: DROPPING).
func (m *Metrics) BackPressureNotice(resumed bool) {
	if m == nil {
		return
	}
	state := "dropping"
	if resumed {
		state = "resumed"
	}
	m.bpNotices.Add(context.Background(), 1, m.attr(m.bpAttrs, state))
}

// SlowConsumerAction counts a session closed at HardQueue; exitOwner: its
// owner is stopped too.
func (m *Metrics) SlowConsumerAction(exitOwner bool) {
	if m == nil {
		return
	}
	action := "disconnect"
	if exitOwner {
		action = "exit_owner"
	}
	m.slowActions.Add(context.Background(), 1, m.attr(m.actionAttrs, action))
}

// SessionPressure counts a SessionPressure notice; state is
// soft_queue_exceeded, soft_queue_relieved, reservations_full or
// reservations_resumed.
func (m *Metrics) SessionPressure(state string) {
	if m != nil {
		m.sessionPressure.Add(context.Background(), 1, m.attr(m.sessPressureAttr, state))
	}
}

// SessionRefused counts a durable session delivery refused (reservation
// table full).
func (m *Metrics) SessionRefused() {
	if m != nil {
		m.sessionRefused.Add(context.Background(), 1, m.pubsubOnly)
	}
}

// ObserveReservations makes the reservations gauge read f (the session
// engine's count of pending reservations).
func (m *Metrics) ObserveReservations(f func() int64) {
	if m != nil {
		m.reservations.Store(&f)
	}
}

// attr is the attribute set for value v, or the pubsub's alone for a value
// not listed (never a nil option).
func (m *Metrics) attr(set map[string]metric.MeasurementOption, v string) metric.MeasurementOption {
	if a, ok := set[v]; ok {
		return a
	}
	return m.pubsubOnly
}

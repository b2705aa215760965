package core

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// Metrics are the pubsub's OpenTelemetry instruments. Attributes have
// bounded cardinality: pubsub, group, and the peer node; never a topic or a
// subscriber. Every counter is recorded at 0 as soon as its attributes are
// known (per pubsub and group at start, per peer when the producer first
// lists it), so that a series exists before its first event and
// increase(...[5m]) sees that event. The two counters OpenTelemetry's
// messaging semantic conventions define carry their names and attributes.
// See docs/operations.md for what each means.
type Metrics struct {
	Published, Delivered         ConventionCounter
	BatchesSent, BatchesAcked    metric.Int64Counter
	Retries                      metric.Int64Counter
	ExpiredSent, ExpiredReceived metric.Int64Counter
	EntriesPassedOver            metric.Int64Counter
	RoundTrip                    metric.Float64Histogram
	gauges                       sync.Map // gaugeKey -> *PeerGauge
	registration                 metric.Registration
	groupAttrs                   []metric.MeasurementOption
	pubsubAttr                   attribute.KeyValue
	lagGauge, failsGauge         metric.Int64ObservableGauge
	stalledGauge                 metric.Int64ObservableGauge
	fillGauge                    metric.Float64ObservableGauge

	// Back-pressure (delivery to this node's subscribers) and sessions.
	dropped, bpNotices            metric.Int64Counter
	slowActions, sessionPressure  metric.Int64Counter
	sessionRefused                metric.Int64Counter
	trimmedRows, trimmedBytes     metric.Int64Counter // retention (durable streams)
	reservationsGauge             metric.Int64ObservableGauge
	storeFailingGauge             metric.Int64ObservableGauge
	storeFailing                  atomic.Int64 // 1 while the node-local store's writes fail
	storeUnstored                 metric.Int64Counter
	reservations                  atomic.Pointer[func() int64] // read by the gauge's callback
	stalledSessionsGauge          metric.Int64ObservableGauge
	stalledSessions               atomic.Pointer[func() int64] // read by the gauge's callback
	pubsubOnly                    metric.MeasurementOption
	dropAttrs, bpAttrs            map[string]metric.MeasurementOption
	actionAttrs, sessPressureAttr map[string]metric.MeasurementOption

	// Named consumers (echopubsub.WithConsumer): label is the consumer's
	// name when Config.ConsumerMetrics lists it, else ConsumerOther.
	consumerCommits      metric.Int64Counter
	consumerUnackedGauge metric.Int64ObservableGauge
	consumerUnacked      atomic.Pointer[func(observe func(label string, n int64))]
	consumerAttrs        sync.Map // label -> metric.MeasurementOption
}

// ConsumerOther is the consumer label of every named consumer that
// Config.ConsumerMetrics does not list: they share its series.
const ConsumerOther = "_other"

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
	Lag, Failures atomic.Int64
	fill          atomic.Uint64 // math.Float64bits of lag / BufferSize, at most 1
	// progress is when (Monotonic) the peer's read cursor last moved, or
	// the peer was caught up; stallAfter is Config.StallAfter, in ns.
	progress, stallAfter atomic.Int64
	Attrs                metric.MeasurementOption
}

// Watch starts watching the peer's progress (Stalled) from now.
func (pg *PeerGauge) Watch(now int64, stallAfter time.Duration) {
	pg.stallAfter.Store(int64(stallAfter))
	pg.progress.Store(now)
}

// Progressed records that the peer's read cursor moved, or that the peer
// was caught up, at now.
func (pg *PeerGauge) Progressed(now int64) { pg.progress.Store(now) }

// Stalled applies the stall rule (Stalled) to lag: what the gauge's
// callback reports, and what Stats reports with the lag it computes.
func (pg *PeerGauge) Stalled(lag uint64, now int64) bool {
	return Stalled(lag, now-pg.progress.Load(), time.Duration(pg.stallAfter.Load()))
}

// Stalled is the stall rule, in one place: a peer's stream is stalled when
// the peer is owed messages (lag > 0) and its read cursor has not moved for
// stallAfter (Config.StallAfter), so the lag only grows as writes go on.
// A peer that is slow but takes batches is never stalled; a caught-up one
// never is.
func Stalled(lag uint64, still int64, stallAfter time.Duration) bool {
	return lag > 0 && stallAfter > 0 && still > int64(stallAfter)
}

// SetLag records the peer's lag and its share of the buffer (1: the next
// message it needs is being overwritten; a lag past the buffer is 1 too).
func (pg *PeerGauge) SetLag(lag uint64, bufferSize int) {
	pg.Lag.Store(int64(lag))
	pg.fill.Store(math.Float64bits(min(float64(lag)/float64(bufferSize), 1)))
}

// RoundTripBuckets are the boundaries (seconds) of echopubsub.batch.round_trip:
// from 100 us (a loopback round trip) to 10 s (beyond any CallTimeout one
// would set), three per decade.
var RoundTripBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Attributes of OpenTelemetry's messaging semantic conventions, on the two
// instruments those conventions define.
const (
	SystemKey    = "messaging.system"         // always "echopubsub"
	OperationKey = "messaging.operation.name" // "broadcast" (sent) or "deliver" (consumed)
	TypeKey      = "messaging.operation.type" // "send" or "process"
)

// NewMetrics creates the instruments on mp (nil: a no-op provider).
func NewMetrics(mp metric.MeterProvider, pubsub string, poolSize int) (*Metrics, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := &Metrics{pubsubAttr: attribute.String("pubsub", pubsub)}
	meter := mp.Meter("github.com/echopubsub/echopubsub")
	var err error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, e := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if e != nil && err == nil {
			err = e
		}
		return c
	}
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, e := meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if e != nil && err == nil {
			err = e
		}
		return g
	}
	m.Published = convention(counter("messaging.client.sent.messages", "{message}", "Messages written to a producer's buffer (Broadcast and friends)."), "broadcast", "send")
	m.Delivered = convention(counter("messaging.client.consumed.messages", "{message}", "Messages handed to this node's subscribers (own writes and received batches)."), "deliver", "process")
	m.BatchesSent = counter("echopubsub.batches.sent", "{batch}", "Batches sent to a peer node (retries included).")
	m.BatchesAcked = counter("echopubsub.batches.acked", "{batch}", "Batches a peer node acknowledged.")
	m.Retries = counter("echopubsub.retries", "{call}", "Failed calls to a peer node, each retried after RetryInterval.")
	m.ExpiredSent = counter("echopubsub.cursor_expired.sent", "{notice}", "CursorExpired told to a peer node by this node's producers.")
	m.ExpiredReceived = counter("echopubsub.cursor_expired.received", "{notice}", "CursorExpired notices this node's workers gave their subscribers.")
	m.EntriesPassedOver = counter("echopubsub.worker.entries_passed_over", "{message}", "Received entries whose topic is not valid UTF-8, acknowledged without delivering: no subscriber can hold such a topic (a producer of this build refuses it).")
	m.lagGauge = gauge("echopubsub.peer.lag", "{message}", "Messages a peer node has not acknowledged (its lag behind the write cursor).")
	m.failsGauge = gauge("echopubsub.peer.failures", "{call}", "Consecutive failed calls to a peer node.")
	m.stalledGauge = gauge("echopubsub.peer.stalled", "{stream}", "1 while the stream to a peer node is stalled: messages owed and its read cursor unmoved for StallAfter (2 CallTimeout + BatchInterval); Stats and Health say why.")
	if err != nil {
		return nil, err
	}
	if m.RoundTrip, err = meter.Float64Histogram("echopubsub.batch.round_trip", metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(RoundTripBuckets...),
		metric.WithDescription("Time from sending a batch to its acknowledgement.")); err != nil {
		return nil, err
	}
	if m.fillGauge, err = meter.Float64ObservableGauge("echopubsub.peer.buffer_fill", metric.WithUnit("1"),
		metric.WithDescription("A peer's lag as a share of BufferSize (0 to 1): 1 means its next message is being overwritten.")); err != nil {
		return nil, err
	}
	m.dropped = counter("echopubsub.subscriber.dropped", "{delivery}", "Deliveries to this node's subscribers dropped, by cause: bound (queue full), absent (named subscriber not running), notice_copies.")
	m.bpNotices = counter("echopubsub.backpressure.notices", "{notice}", "BackPressure notices sent to this node's subscribers, by state (dropping, resumed).")
	m.slowActions = counter("echopubsub.session.slow_consumer_actions", "{session}", "Sessions closed because a durable delivery found HardQueue pending, by action (disconnect, exit_owner).")
	m.sessionPressure = counter("echopubsub.session.pressure_notices", "{notice}", "SessionPressure notices sent to session owners, by state.")
	m.sessionRefused = counter("echopubsub.session.refused", "{delivery}", "Durable session deliveries refused because the node's reservation table was full.")
	m.trimmedRows = counter("echopubsub.retention.trimmed_rows", "{row}", "Durable stream rows this node's retention (WithRetention) removed from its store.")
	m.trimmedBytes = counter("echopubsub.retention.trimmed_bytes", "By", "Payload bytes of the durable stream rows this node's retention removed.")
	if err != nil {
		return nil, err
	}
	m.reservationsGauge = gauge("echopubsub.session.reservations", "{reservation}", "Durable session deliveries not yet acknowledged on this node (pending reservations), all sessions together.")
	m.stalledSessionsGauge = gauge("echopubsub.session.stalled", "{session}", "Sessions on this node that hold deliveries and acknowledged none for StallAfter (their owners were told SessionStalled).")
	m.storeFailingGauge = gauge("echopubsub.store.failing", "1", "1 while this node's node-local durable store fails to write (live delivery goes on; what it cannot store becomes gap rows), else 0.")
	m.consumerCommits = counter("echopubsub.consumer.commits", "{commit}", "Committed cursors of named consumers (WithConsumer) written to the store, by consumer (the names Config.ConsumerMetrics lists; the others as _other).")
	m.consumerUnackedGauge = gauge("echopubsub.consumer.unacked", "{row}", "Rows handed to the sessions of named consumers on this node and not yet committed, by consumer (the names Config.ConsumerMetrics lists; the others summed as _other).")
	m.storeUnstored = counter("echopubsub.store.unstored_rows", "{row}", "Durable rows this node received and delivered but its failing store could not write: each is counted in a gap row once the store recovers.")
	if err != nil {
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
	m.recordZeros()
	m.registration, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		m.gauges.Range(func(_, v any) bool {
			pg := v.(*PeerGauge)
			o.ObserveInt64(m.lagGauge, pg.Lag.Load(), pg.Attrs)
			o.ObserveFloat64(m.fillGauge, math.Float64frombits(pg.fill.Load()), pg.Attrs)
			o.ObserveInt64(m.failsGauge, pg.Failures.Load(), pg.Attrs)
			var stalled int64
			if pg.Stalled(uint64(max(pg.Lag.Load(), 0)), Monotonic()) {
				stalled = 1
			}
			o.ObserveInt64(m.stalledGauge, stalled, pg.Attrs)
			return true
		})
		if f := m.reservations.Load(); f != nil {
			o.ObserveInt64(m.reservationsGauge, (*f)(), m.pubsubOnly)
		}
		if f := m.stalledSessions.Load(); f != nil {
			o.ObserveInt64(m.stalledSessionsGauge, (*f)(), m.pubsubOnly)
		}
		o.ObserveInt64(m.storeFailingGauge, m.storeFailing.Load(), m.pubsubOnly)
		if f := m.consumerUnacked.Load(); f != nil {
			sums := map[string]int64{}
			(*f)(func(label string, n int64) { sums[label] += n })
			for label, n := range sums {
				o.ObserveInt64(m.consumerUnackedGauge, n, m.consumerAttr(label))
			}
		}
		return nil
	}, m.lagGauge, m.fillGauge, m.failsGauge, m.stalledGauge, m.reservationsGauge, m.stalledSessionsGauge, m.storeFailingGauge,
		m.consumerUnackedGauge)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// ConventionCounter is a counter named by OpenTelemetry's messaging semantic
// conventions: each measurement carries messaging.system and the operation's
// name and type besides the attributes it is given.
type ConventionCounter struct {
	c     metric.Int64Counter
	fixed metric.AddOption
}

func convention(c metric.Int64Counter, operation, kind string) ConventionCounter {
	return ConventionCounter{c: c, fixed: metric.WithAttributeSet(attribute.NewSet(attribute.String(SystemKey, "echopubsub"),
		attribute.String(OperationKey, operation), attribute.String(TypeKey, kind)))}
}

// Add adds n with the attributes of opts and the conventions' own.
func (c ConventionCounter) Add(ctx context.Context, n int64, opts ...metric.AddOption) {
	c.c.Add(ctx, n, append(opts, c.fixed)...)
}

// recordZeros records every counter whose attributes are known at start
// at 0: per pool group, and per pubsub with each cause, state or action.
func (m *Metrics) recordZeros() {
	ctx := context.Background()
	for _, g := range m.groupAttrs {
		m.Published.Add(ctx, 0, g)
		m.Delivered.Add(ctx, 0, g)
		m.ExpiredReceived.Add(ctx, 0, g)
		m.EntriesPassedOver.Add(ctx, 0, g)
	}
	for _, c := range []struct {
		c   metric.Int64Counter
		set map[string]metric.MeasurementOption
	}{{m.dropped, m.dropAttrs}, {m.bpNotices, m.bpAttrs}, {m.slowActions, m.actionAttrs}, {m.sessionPressure, m.sessPressureAttr}} {
		for _, a := range c.set {
			c.c.Add(ctx, 0, a)
		}
	}
	m.sessionRefused.Add(ctx, 0, m.pubsubOnly)
	m.trimmedRows.Add(ctx, 0, m.pubsubOnly)
	m.trimmedBytes.Add(ctx, 0, m.pubsubOnly)
	m.storeUnstored.Add(ctx, 0, m.pubsubOnly)
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
	v, loaded := m.gauges.LoadOrStore(k, pg)
	if !loaded { // the peer's series exist from now on, at 0 until something happens
		for _, c := range []metric.Int64Counter{m.BatchesSent, m.BatchesAcked, m.Retries, m.ExpiredSent} {
			c.Add(context.Background(), 0, pg.Attrs)
		}
	}
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

// consumerAttr is the attribute set of a consumer label (a bounded set:
// the names Config.ConsumerMetrics lists and ConsumerOther).
func (m *Metrics) consumerAttr(label string) metric.MeasurementOption {
	if a, ok := m.consumerAttrs.Load(label); ok {
		return a.(metric.MeasurementOption)
	}
	a := metric.WithAttributeSet(attribute.NewSet(m.pubsubAttr, attribute.String("consumer", label)))
	m.consumerAttrs.Store(label, a)
	return a
}

// ConsumerCommitted counts one committed cursor of a consumer (label)
// written to the store. Safe on a nil Metrics.
func (m *Metrics) ConsumerCommitted(label string) {
	if m != nil {
		m.consumerCommits.Add(context.Background(), 1, m.consumerAttr(label))
	}
}

// SetConsumerUnacked gives the echopubsub.consumer.unacked gauge its
// source: f calls observe once per consumer (labels repeat: summed).
// Safe on a nil Metrics.
func (m *Metrics) SetConsumerUnacked(f func(observe func(label string, n int64))) {
	if m != nil {
		m.consumerUnacked.Store(&f)
	}
}

// RetentionTrimmed counts rows (and their payload bytes) that retention
// removed from the store. Safe on a nil Metrics.
func (m *Metrics) RetentionTrimmed(rows, bytes uint64) {
	if m != nil {
		m.trimmedRows.Add(context.Background(), int64(rows), m.pubsubOnly)
		m.trimmedBytes.Add(context.Background(), int64(bytes), m.pubsubOnly)
	}
}

// StoreFailing sets the echopubsub.store.failing gauge. Safe on a nil
// Metrics.
func (m *Metrics) StoreFailing(failing bool) {
	if m == nil {
		return
	}
	v := int64(0)
	if failing {
		v = 1
	}
	m.storeFailing.Store(v)
}

// StoreUnstored counts n durable rows a failing store could not write.
// Safe on a nil Metrics.
func (m *Metrics) StoreUnstored(n int) {
	if m != nil && n > 0 {
		m.storeUnstored.Add(context.Background(), int64(n), m.pubsubOnly)
	}
}

// ObserveReservations makes the reservations gauge read f (the session
// engine's count of pending reservations).
func (m *Metrics) ObserveReservations(f func() int64) {
	if m != nil {
		m.reservations.Store(&f)
	}
}

// ObserveStalledSessions makes the echopubsub.session.stalled gauge read f
// (the session engine's count of stalled sessions).
func (m *Metrics) ObserveStalledSessions(f func() int64) {
	if m != nil {
		m.stalledSessions.Store(&f)
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

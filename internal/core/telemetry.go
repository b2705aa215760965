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
}

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
	if err != nil {
		return nil, err
	}
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
		return nil
	}, m.lagGauge, m.fillGauge, m.failsGauge)
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

package echopubsub_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
)

// valueWith sums the named metric's data points whose attribute key is val
// (val "": every point). Counters and gauges.
func (m *meter) valueWith(t *testing.T, name, key, val string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect: %v", err)
	}
	var v int64
	match := func(set attribute.Set) bool {
		if val == "" {
			return true
		}
		got, ok := set.Value(attribute.Key(key))
		return ok && got.AsString() == val
	}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if mt.Name != name {
				continue
			}
			switch d := mt.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if match(p.Attributes) {
						v += p.Value
					}
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					if match(p.Attributes) {
						v += p.Value
					}
				}
			}
		}
	}
	return v
}

func (m *meter) eventuallyWith(t *testing.T, name, key, val string, want int64) {
	t.Helper()
	var last int64
	test.Eventually(t, 10*time.Second, func() bool { last = m.valueWith(t, name, key, val); return last == want },
		func() string { return fmt.Sprintf("%s{%s=%q} = %d, want %d", name, key, val, last, want) })
}

// A slow subscriber raises the drop counter by exactly what it did not get,
// and the notice counter once per transition.
func TestBackPressureMetricsMove(t *testing.T) {
	cfg := fastConfig()
	cfg.MaxQueueLen = 5
	m := newMeter(t)
	nd := test.StartCluster(t, 1, cfg, echopubsub.WithMeterProvider(m.mp))[0]
	healthy := nd.Subscribe(t, "feed", echopubsub.WithMaxQueueLen(1000))
	stalled := test.SpawnStalledCollector(nd.System)
	if err := nd.PS.Subscribe(stalled.PID, "feed"); err != nil {
		t.Fatal(err)
	}
	const n = 50
	for i := uint64(1); i <= n; i++ {
		nd.Broadcast(t, "feed", stamp(i))
	}
	wantUpTo(t, healthy, n)
	m.eventuallyWith(t, "echopubsub.backpressure.notices", "state", "dropping", 1)
	stalled.Release()
	// The DROPPING notice was queued behind everything the stalled
	// subscriber took: once it has it, its queue is empty.
	test.Eventually(t, 5*time.Second, func() bool { return test.Count[*messages.BackPressure](stalled) == 1 }, stalled.Describe)
	nd.Broadcast(t, "feed", stamp(n+1)) // delivered: RESUMED
	test.Eventually(t, 5*time.Second, func() bool { s := stalled.Stamps(); return len(s) > 0 && s[len(s)-1] == n+1 }, stalled.Describe)
	got := int64(len(stalled.Stamps()))
	m.eventuallyWith(t, "echopubsub.subscriber.dropped", "cause", "bound", n+1-got)
	m.eventuallyWith(t, "echopubsub.backpressure.notices", "state", "resumed", 1)
	m.eventuallyWith(t, "echopubsub.backpressure.notices", "state", "dropping", 1)
	if test.Count[*messages.BackPressure](healthy) != 0 {
		t.Fatalf("healthy subscriber told back-pressure: %s", healthy.Describe())
	}
}

// A session that never acks raises the pending-reservations gauge, a
// SessionPressure notice past SoftQueue, and the slow-consumer action past
// HardQueue, counted by action; its reservations are released with it.
func TestSessionMetricsMove(t *testing.T) {
	for _, action := range []echopubsub.SlowConsumerAction{echopubsub.SlowConsumerDisconnect, echopubsub.SlowConsumerExitOwner} {
		t.Run(action.String(), func(t *testing.T) {
			cfg := sessionConfig(2, 4)
			cfg.SlowConsumerAction = action
			m := newMeter(t)
			nd := test.StartCluster(t, 1, cfg, echopubsub.WithMeterProvider(m.mp))[0]
			o := spawnOwner(t, nd, nil) // never acks
			openSession(t, nd, o, []string{"match"})
			for i := uint64(1); i <= 3; i++ {
				nd.Broadcast(t, "match", stamp(i))
			}
			waitEnvelopes(t, o, 3)
			m.eventuallyWith(t, "echopubsub.session.reservations", "", "", 3)
			m.eventuallyWith(t, "echopubsub.session.pressure_notices", "state", "soft_queue_exceeded", 1)
			for i := uint64(4); i <= 5; i++ { // the fifth would exceed HardQueue 4
				nd.Broadcast(t, "match", stamp(i))
			}
			test.Eventually(t, 5*time.Second, func() bool { return countOf[*messages.SessionClosed](o) == 1 }, o.describe)
			want := map[echopubsub.SlowConsumerAction]string{echopubsub.SlowConsumerDisconnect: "disconnect", echopubsub.SlowConsumerExitOwner: "exit_owner"}
			m.eventuallyWith(t, "echopubsub.session.slow_consumer_actions", "action", want[action], 1)
			m.eventuallyWith(t, "echopubsub.session.slow_consumer_actions", "", "", 1)
			m.eventuallyWith(t, "echopubsub.session.reservations", "", "", 0)
		})
	}
}

// A full reservation table refuses durable deliveries, counted, with a
// RESERVATIONS_FULL notice per session, counted by state.
func TestSessionRefusalMetricsMove(t *testing.T) {
	cfg := sessionConfig(3, 4)
	cfg.MaxDeliveryReservations = 4
	m := newMeter(t)
	nd := test.StartCluster(t, 1, cfg, echopubsub.WithMeterProvider(m.mp))[0]
	a, b := spawnOwner(t, nd, nil), spawnOwner(t, nd, nil) // neither acks
	openSession(t, nd, a, []string{"match"})
	openSession(t, nd, b, []string{"match"})
	for i := uint64(1); i <= 3; i++ { // 3 x 2 durable deliveries, 4 reserved, 2 refused
		nd.Broadcast(t, "match", stamp(i))
	}
	m.eventuallyWith(t, "echopubsub.session.reservations", "", "", 4)
	m.eventuallyWith(t, "echopubsub.session.refused", "", "", 6-4)
	// Sessions take deliveries concurrently: which one was refused what
	// varies, the notices counted are the notices sent.
	told := func() int64 {
		return int64(countOf[*messages.SessionPressure](a) + countOf[*messages.SessionPressure](b))
	}
	test.Eventually(t, 5*time.Second, func() bool { return told() >= 1 }, a.describe)
	m.eventuallyWith(t, "echopubsub.session.pressure_notices", "state", "reservations_full", told())
}

package echopubsub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
)

// meter reads one node's metrics, the way an exporter would.
type meter struct {
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newMeter(t *testing.T) *meter {
	r := sdkmetric.NewManualReader()
	m := &meter{reader: r, mp: sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))}
	t.Cleanup(func() { _ = m.mp.Shutdown(context.Background()) })
	return m
}

// value sums the named metric's data points (counter or gauge values,
// histogram counts).
func (m *meter) value(t *testing.T, name string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect: %v", err)
	}
	var v int64
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if mt.Name != name {
				continue
			}
			switch d := mt.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					v += p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					v += p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					v += int64(p.Count)
				}
			}
		}
	}
	return v
}

func (m *meter) eventually(t *testing.T, name string, cond func(int64) bool, want string) {
	t.Helper()
	var last int64
	test.Eventually(t, 10*time.Second, func() bool { last = m.value(t, name); return cond(last) },
		func() string { return fmt.Sprintf("%s = %d, want %s", name, last, want) })
}

// events collects the telemetry events published on a node's event stream.
type events struct {
	mu   sync.Mutex
	seen map[string]int
}

func watchEvents(t *testing.T, nd *test.Node) *events {
	e := &events{seen: map[string]int{}}
	sub := nd.System.EventStream.Subscribe(func(ev interface{}) {
		var kind string
		switch ev.(type) {
		case *messages.Flushed:
			kind = "flushed"
		case *messages.Expired:
			kind = "expired"
		case *messages.SyncFailed:
			kind = "sync_failed"
		case *messages.RetryScheduled:
			kind = "retry_scheduled"
		case *messages.CapacityWarning:
			kind = "capacity_warning"
		default:
			return
		}
		e.mu.Lock()
		e.seen[kind]++
		e.mu.Unlock()
	})
	t.Cleanup(func() { nd.System.EventStream.Unsubscribe(sub) })
	return e
}

func (e *events) count(kind string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.seen[kind]
}

// Every metric and telemetry event moves when what it measures happens: a
// flush, a cut peer (retries, failures, lag), a peer that fell behind the
// buffer (expirations on both sides).
func TestMetricsAndEventsMove(t *testing.T) {
	cfg := fastConfig()
	cfg.BufferSize = 10
	cfg.CapacityWarningThreshold = 0.5
	log := test.Logger(t, zerolog.InfoLevel)
	m0, m1 := newMeter(t), newMeter(t)
	nodes, addrs := test.NewNodes(t, 2, log)
	ev := watchEvents(t, nodes[0])
	for i, m := range []*meter{m0, m1} {
		nodes[i].Start(t, cfg, staticOf(addrs), echopubsub.WithMeterProvider(m.mp))
	}
	c := nodes[1].Subscribe(t, "match")

	// Flushes: published, delivered on both nodes, batches and round trips.
	for i := uint64(1); i <= 5; i++ {
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	wantStamps(t, c, 1, 2, 3, 4, 5)
	m0.eventually(t, "echopubsub.messages.published", func(v int64) bool { return v == 5 }, "5")
	m0.eventually(t, "echopubsub.messages.delivered", func(v int64) bool { return v == 5 }, "5 (own node, at write time)")
	m1.eventually(t, "echopubsub.messages.delivered", func(v int64) bool { return v == 5 }, "5 (received)")
	m0.eventually(t, "echopubsub.batches.sent", func(v int64) bool { return v >= 1 }, ">= 1")
	m0.eventually(t, "echopubsub.batches.acked", func(v int64) bool { return v >= 1 }, ">= 1")
	m0.eventually(t, "echopubsub.batch.round_trip", func(v int64) bool { return v >= 1 }, ">= 1 recorded")
	test.Eventually(t, 5*time.Second, func() bool { return ev.count("flushed") >= 1 }, test.Sprintf("no Flushed event"))

	// A cut peer: retries, failures and lag grow.
	test.Partition(nodes, 1)
	for i := uint64(6); i <= 12; i++ { // 7 held of 10: lag 7, fill 70 %, a capacity warning
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	m0.eventually(t, "echopubsub.retries", func(v int64) bool { return v >= 2 }, ">= 2")
	m0.eventually(t, "echopubsub.peer.failures", func(v int64) bool { return v >= 2 }, ">= 2")
	m0.eventually(t, "echopubsub.peer.lag", func(v int64) bool { return v == 7 }, "7")
	m0.eventually(t, "echopubsub.peer.buffer_fill", func(v int64) bool { return v == 70 }, "70 (%)")
	for _, kind := range []string{"sync_failed", "retry_scheduled", "capacity_warning"} {
		test.Eventually(t, 5*time.Second, func() bool { return ev.count(kind) >= 1 }, test.Sprintf("no %s event", kind))
	}

	// Past the buffer: the peer is told, on both sides.
	for i := uint64(13); i <= 20; i++ {
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	test.Heal(nodes)
	test.Eventually(t, 10*time.Second, func() bool { return test.Count[*messages.CursorExpired](c) == 1 }, c.Describe)
	m0.eventually(t, "echopubsub.cursor_expired.sent", func(v int64) bool { return v == 1 }, "1")
	m1.eventually(t, "echopubsub.cursor_expired.received", func(v int64) bool { return v == 1 }, "1")
	m0.eventually(t, "echopubsub.peer.failures", func(v int64) bool { return v == 0 }, "0 once healed")
	m0.eventually(t, "echopubsub.peer.lag", func(v int64) bool { return v == 0 }, "0 once caught up")
	test.Eventually(t, 5*time.Second, func() bool { return ev.count("expired") == 1 }, test.Sprintf("no Expired event"))
}

// Health is ready once start-up is done, a listed node that is not running
// included (reported in Peers, not by readiness), and HealthHandler answers
// 200 or 503 accordingly; LivenessHandler answers 200 while the pubsub runs
// and 503 once it stopped.
func TestHealthAndReadiness(t *testing.T) {
	cfg := fastConfig()
	log := test.Logger(t, zerolog.InfoLevel)
	nodes, addrs := test.NewNodes(t, 2, log)
	nodes[0].Start(t, cfg, staticOf(addrs)) // node 1 listed, not started yet
	srv := httptest.NewServer(echopubsub.HealthHandler(nodes[0].PS))
	t.Cleanup(srv.Close)
	live := httptest.NewServer(echopubsub.LivenessHandler(nodes[0].PS))
	t.Cleanup(live.Close)
	probe := func() (int, echopubsub.Health) {
		res, err := http.Get(srv.URL)
		if err != nil {
			t.Fatalf("probe: %v", err)
		}
		defer res.Body.Close()
		var h echopubsub.Health
		if err := json.NewDecoder(res.Body).Decode(&h); err != nil {
			t.Fatalf("probe body: %v", err)
		}
		return res.StatusCode, h
	}
	var h echopubsub.Health
	test.Eventually(t, 10*time.Second, func() bool { var code int; code, h = probe(); return code == http.StatusOK && h.Ready },
		func() string { return fmt.Sprintf("not ready with a listed node down: %+v", h) })
	if len(h.Peers) != 1 || h.Peers[0].Node != nodes[1].Addr || h.Peers[0].Registered || h.Peers[0].LastAckAge != -1 || h.Peers[0].Failures == 0 {
		t.Fatalf("ready health %+v does not report the down node", h)
	}
	nodes[1].Start(t, cfg, staticOf(addrs))
	test.Eventually(t, 10*time.Second, func() bool {
		var code int
		code, h = probe()
		return code == http.StatusOK && h.Ready && len(h.Peers) == 1 && h.Peers[0].Registered
	}, func() string { return fmt.Sprintf("node 1 never registered: %+v", h) })
	if p := h.Peers[0]; p.Node != nodes[1].Addr || p.LastAckAge < 0 || p.Failures != 0 {
		t.Fatalf("ready health peer %+v", p)
	}
	liveCode := func() int {
		res, err := http.Get(live.URL)
		if err != nil {
			t.Fatalf("liveness probe: %v", err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if code := liveCode(); code != http.StatusOK {
		t.Fatalf("liveness %d while running", code)
	}
	nodes[0].StopPubSub(t)
	if code := liveCode(); code != http.StatusServiceUnavailable {
		t.Fatalf("liveness %d after Stop, want 503", code)
	}
	if code, h := probe(); code != http.StatusServiceUnavailable || h.Ready || h.Live {
		t.Fatalf("readiness %d %+v after Stop, want 503, not ready, not live", code, h)
	}
}

package echopubsub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
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

// ratio is the named float gauge's value (its one data point).
func (m *meter) ratio(t *testing.T, name string) float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect: %v", err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if d, ok := mt.Data.(metricdata.Gauge[float64]); ok && mt.Name == name && len(d.DataPoints) == 1 {
				return d.DataPoints[0].Value
			}
		}
	}
	return -1
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
	m0.eventually(t, "messaging.client.sent.messages", func(v int64) bool { return v == 5 }, "5")
	m0.eventually(t, "messaging.client.consumed.messages", func(v int64) bool { return v == 5 }, "5 (own node, at write time)")
	m1.eventually(t, "messaging.client.consumed.messages", func(v int64) bool { return v == 5 }, "5 (received)")
	m0.eventually(t, "echopubsub.batches.sent", func(v int64) bool { return v >= 1 }, ">= 1")
	m0.eventually(t, "echopubsub.batches.acked", func(v int64) bool { return v >= 1 }, ">= 1")
	m0.eventually(t, "echopubsub.batch.round_trip", func(v int64) bool { return v >= 1 }, ">= 1 recorded")
	test.Eventually(t, 5*time.Second, func() bool { return ev.count("flushed") >= 1 }, test.Sprintf("no Flushed event"))

	// A cut peer: retries, failures and lag grow.
	test.Partition(nodes, 1)
	for i := uint64(6); i <= 12; i++ { // 7 held of 10: lag 7, fill 0.7, a capacity warning
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	m0.eventually(t, "echopubsub.retries", func(v int64) bool { return v >= 2 }, ">= 2")
	m0.eventually(t, "echopubsub.peer.failures", func(v int64) bool { return v >= 2 }, ">= 2")
	m0.eventually(t, "echopubsub.peer.lag", func(v int64) bool { return v == 7 }, "7")
	var fill float64
	test.Eventually(t, 10*time.Second, func() bool { fill = m0.ratio(t, "echopubsub.peer.buffer_fill"); return fill == 0.7 },
		func() string { return fmt.Sprintf("echopubsub.peer.buffer_fill = %v, want 0.7 (7 of 10)", fill) })
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

// scrape is one node's metrics as a Prometheus server reads them: the
// OpenTelemetry SDK behind the Prometheus exporter, as cmd/demo serves them.
type scrape struct{ reg *prometheus.Registry }

func newScrape(t *testing.T) (*scrape, echopubsub.Option) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return &scrape{reg: reg}, echopubsub.WithMeterProvider(mp)
}

func (s *scrape) families(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	fs, err := s.reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fs {
		out[f.GetName()] = f
	}
	return out
}

// label is the value of a series' label (empty: none).
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// What the documented alerts and dashboards read is there as Prometheus
// names it: every counter has its series at 0 before its first event (per
// group, per peer, per cause or state), so increase(x_total[5m]) > 0 sees
// the first one; the round-trip histogram is in seconds with buckets from
// 100 us to 10 s; the buffer fill is a 0..1 ratio; the two counters of the
// messaging semantic conventions carry its attributes.
func TestMetricsAsPrometheusReadsThem(t *testing.T) {
	cfg := fastConfig()
	cfg.BufferSize = 10
	log := test.Logger(t, zerolog.InfoLevel)
	nodes, addrs := test.NewNodes(t, 2, log)
	s0, opt0 := newScrape(t)
	_, opt1 := newScrape(t)
	nodes[0].Start(t, cfg, staticOf(addrs), opt0)
	nodes[1].Start(t, cfg, staticOf(addrs), opt1)

	// Before anything was broadcast: node 0's producer lists node 1.
	var fs map[string]*dto.MetricFamily
	test.Eventually(t, 10*time.Second, func() bool {
		fs = s0.families(t)
		return len(fs["echopubsub_cursor_expired_sent_total"].GetMetric()) == 1
	}, test.Sprintf("no echopubsub_cursor_expired_sent_total series for the peer"))
	for name, series := range map[string]int{ // counter -> series it has from the start
		"messaging_client_sent_messages_total":           1, // per group (PoolSize 1)
		"messaging_client_consumed_messages_total":       1,
		"echopubsub_cursor_expired_received_total":       1,
		"echopubsub_worker_entries_passed_over_total":    1,
		"echopubsub_batches_sent_total":                  1, // per peer
		"echopubsub_batches_acked_total":                 1,
		"echopubsub_retries_total":                       1,
		"echopubsub_cursor_expired_sent_total":           1,
		"echopubsub_subscriber_dropped_total":            3, // per cause
		"echopubsub_backpressure_notices_total":          2, // per state
		"echopubsub_session_slow_consumer_actions_total": 2,
		"echopubsub_session_pressure_notices_total":      4,
		"echopubsub_session_refused_total":               1,
		"echopubsub_retention_trimmed_rows_total":        1,
		"echopubsub_retention_trimmed_bytes_total":       1,
	} {
		f := fs[name]
		if f == nil {
			t.Errorf("%s: no series before its first event, want %d at 0", name, series)
			continue
		}
		if f.GetType() != dto.MetricType_COUNTER || len(f.GetMetric()) != series {
			t.Errorf("%s: %v with %d series before any event, want a counter with %d", name, f.GetType(), len(f.GetMetric()), series)
			continue
		}
		for _, m := range f.GetMetric() {
			if name != "messaging_client_sent_messages_total" && name != "echopubsub_retries_total" && m.GetCounter().GetValue() != 0 {
				t.Errorf("%s%v = %v before any event, want 0", name, m.GetLabel(), m.GetCounter().GetValue())
			}
		}
	}
	if m := fs["echopubsub_cursor_expired_sent_total"].GetMetric()[0]; label(m, "peer") != nodes[1].Addr || label(m, "group") != "0" {
		t.Errorf("cursor_expired_sent series labels %v, want peer %s and group 0", m.GetLabel(), nodes[1].Addr)
	}
	for _, name := range []string{"messaging_client_sent_messages_total", "messaging_client_consumed_messages_total"} {
		ms := fs[name].GetMetric()
		if len(ms) == 0 {
			continue // reported above
		}
		m := ms[0]
		if label(m, "messaging_system") != "echopubsub" || label(m, "messaging_operation_name") == "" ||
			label(m, "messaging_operation_type") == "" || label(m, "pubsub") != cfg.Name {
			t.Errorf("%s labels %v, want messaging_system, messaging_operation_name and _type, pubsub", name, m.GetLabel())
		}
	}

	c := nodes[1].Subscribe(t, "match")
	nodes[0].Broadcast(t, "match", stamp(1))
	wantStamps(t, c, 1)
	test.Eventually(t, 10*time.Second, func() bool {
		fs = s0.families(t)
		return len(fs["echopubsub_batch_round_trip_seconds"].GetMetric()) == 1
	}, test.Sprintf("no echopubsub_batch_round_trip_seconds series after a delivered batch"))
	h := fs["echopubsub_batch_round_trip_seconds"].GetMetric()[0].GetHistogram()
	want := []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	var got []float64
	for _, b := range h.GetBucket() {
		got = append(got, b.GetUpperBound())
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("round-trip buckets %v, want %v (seconds)", got, want)
	}
	if h.GetSampleCount() < 1 || h.GetSampleSum() <= 0 || h.GetSampleSum() > 10*float64(h.GetSampleCount()) {
		t.Errorf("round trips: %d samples summing to %v s, want a few ms each", h.GetSampleCount(), h.GetSampleSum())
	}
	fill := fs["echopubsub_peer_buffer_fill_ratio"]
	if fill.GetType() != dto.MetricType_GAUGE || len(fill.GetMetric()) != 1 {
		t.Fatalf("echopubsub_peer_buffer_fill_ratio: %v, want a gauge per peer", fill)
	}
	for name := range fs {
		if strings.HasSuffix(name, "_percent") {
			t.Errorf("%s: want ratios 0..1, not percentages", name)
		}
	}

	// A cut peer 7 of 10 behind: fill 0.7.
	test.Partition(nodes, 1)
	for i := uint64(2); i <= 8; i++ {
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	var v float64
	test.Eventually(t, 10*time.Second, func() bool {
		v = s0.families(t)["echopubsub_peer_buffer_fill_ratio"].GetMetric()[0].GetGauge().GetValue()
		return v == 0.7
	}, func() string { return fmt.Sprintf("echopubsub_peer_buffer_fill_ratio = %v, want 0.7", v) })
}

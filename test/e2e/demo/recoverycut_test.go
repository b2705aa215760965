//go:build unix

package demo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store/seglog"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// TestNoSeriesUntilEventFamiliesAsPrometheusNamesThem makes the event
// behind each family of noSeriesUntilEvent happen, exported as the demo's
// nodes export (the OpenTelemetry SDK and its Prometheus exporter), so the
// names the dashboard and the rules use for them are checked against a
// real export too: store/seglog's recovery_cut, by opening a log whose
// last commit was torn (bytes after its last frame); the named consumers'
// commits and unacked, by a session that subscribes WithConsumer and acks
// a row.
func TestNoSeriesUntilEventFamiliesAsPrometheusNamesThem(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	log := test.Logger(t, zerolog.WarnLevel)
	s, err := seglog.Open(dir, seglog.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	rec := echopubsub.Record{Stream: "a", Kind: echopubsub.RecordMessage, Origin: "n1", PayloadType: "x.Y", Payload: []byte("x")}
	if err := s.Append(context.Background(), []echopubsub.Record{rec}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(dir, fmt.Sprintf("%08d.seg", 1))
	f, err := os.OpenFile(seg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte{0x40, 0, 0, 0, 1, 2, 3}); err != nil { // a frame's header, then nothing
		t.Fatal(err)
	}
	_ = f.Close()

	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	s, err = seglog.Open(dir, seglog.WithLogger(log), seglog.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// A named consumer's row, acked: its commit is written to the store
	// by the pubsub's own writer, so the export is polled for it, as a
	// scraper would see it come.
	nd := test.StartCluster(t, 1, test.FastConfig(), test.WithMemStore(),
		echopubsub.WithDurableTopics("room"), echopubsub.WithMeterProvider(mp))[0]
	owner := test.SpawnFollowOwner(nd)
	session, err := nd.PS.OpenSession(owner.PID)
	if err != nil {
		t.Fatal(err)
	}
	if err := nd.PS.SessionSubscribe(session.ID(), "room", echopubsub.WithConsumer("billing")); err != nil {
		t.Fatal(err)
	}
	nd.Broadcast(t, "room", &testpb.Stamp{Publisher: "p", Seq: 1})

	got := map[string]string{}
	exported := func() bool {
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got = map[string]string{}
		for _, f := range families {
			got[f.GetName()] = f.GetType().String()
		}
		for name, typ := range noSeriesUntilEvent {
			if got[name] != typ {
				return false
			}
		}
		return true
	}
	test.Eventually(t, 10*time.Second, exported, func() string {
		var wrong []string
		for name, typ := range noSeriesUntilEvent {
			if got[name] != typ {
				wrong = append(wrong, fmt.Sprintf("%s is %q, want %q", name, got[name], typ))
			}
		}
		return fmt.Sprintf("after their events, in the export: %s (exported: %v)", strings.Join(wrong, "; "), got)
	})
}

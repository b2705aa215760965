//go:build unix

package demo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store/seglog"
	"github.com/echopubsub/echopubsub/test"
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
// last commit was torn (bytes after its last frame).
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
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range families {
		got[f.GetName()] = f.GetType().String()
	}
	for name, typ := range noSeriesUntilEvent {
		if got[name] != typ {
			t.Errorf("after its event, %s is %q in the export, want %q (exported: %v)", name, got[name], typ, got)
		}
	}
}

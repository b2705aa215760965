//go:build unix

package demo

import (
	"bytes"
	"fmt"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub/internal/proc"
)

// TestDemoMetricsAndLogsReadByTools reads a running demo with the tools an
// operator points at it: every node's /metrics passes `promtool check
// metrics` (Prometheus's own lint) with nothing to say, shows the series
// the documented alerts use before anything happened (every counter at 0,
// per peer), a round-trip histogram in seconds that resolves a loopback
// round trip, and the buffer fill as a 0..1 ratio; the logs of the demo
// and its nodes, written to a file, carry no ANSI colour codes, and no
// warning or error from a healthy start and a normal stop.
func TestDemoMetricsAndLogsReadByTools(t *testing.T) {
	promtool := findPromtool(t)
	logs := &syncBuffer{}
	url, demo := runDemoTo(t, buildDemo(t), logs, "-log", "info")

	// Every node lists its two peers at start; the node the demo publishes
	// through sends batches, so its /metrics has round trips too.
	pages := make([]string, 3)
	ready := proc.Until(60*time.Second, 200*time.Millisecond, func() bool {
		trips := false
		for i := range pages {
			pages[i] = tryGet(url + fmt.Sprintf("api/nodes/%d/metrics", i+1))
			if strings.Count(pages[i], "\nechopubsub_cursor_expired_sent_total{") != 2 { // one series per peer
				return false
			}
			trips = trips || strings.Contains(pages[i], "echopubsub_batch_round_trip_seconds_count")
		}
		return trips
	})
	if !ready {
		t.Fatalf("want a cursor_expired series per peer on every node and a round trip on one:\n%.3000s", strings.Join(pages, "\n"))
	}
	every := []*regexp.Regexp{
		// Counters exist at 0 before their first event: no node was told CursorExpired.
		regexp.MustCompile(`(?m)^echopubsub_cursor_expired_sent_total\{[^}]*peer="[^"]+"[^}]*\} 0$`),
		regexp.MustCompile(`(?m)^echopubsub_cursor_expired_received_total\{[^}]*group="0"[^}]*\} 0$`),
		regexp.MustCompile(`(?m)^echopubsub_retries_total\{[^}]*peer="[^"]+"[^}]*\} \d+$`),
		regexp.MustCompile(`(?m)^echopubsub_subscriber_dropped_total\{[^}]*cause="bound"[^}]*\} 0$`),
		regexp.MustCompile(`(?m)^echopubsub_peer_buffer_fill_ratio\{[^}]*\} (0|0\.\d+|1)$`),
		// The messaging semantic conventions' counters and attributes.
		regexp.MustCompile(`(?m)^messaging_client_sent_messages_total\{[^}]*messaging_operation_name="broadcast"[^}]*messaging_system="echopubsub"`),
		regexp.MustCompile(`(?m)^messaging_client_consumed_messages_total\{[^}]*messaging_operation_name="deliver"[^}]*messaging_system="echopubsub"`),
	}
	trips := []*regexp.Regexp{ // seconds, from 100 us to 10 s
		regexp.MustCompile(`(?m)^echopubsub_batch_round_trip_seconds_bucket\{[^}]*le="0\.0001"[^}]*\} `),
		regexp.MustCompile(`(?m)^echopubsub_batch_round_trip_seconds_bucket\{[^}]*le="10"[^}]*\} `),
	}
	for i, page := range pages {
		want := every
		if strings.Contains(page, "echopubsub_batch_round_trip_seconds_count") {
			want = append(want, trips...)
		}
		for _, re := range want {
			if !re.MatchString(page) {
				t.Errorf("node %d's /metrics has no line matching %s:\n%.3000s", i+1, re, page)
			}
		}
		if strings.Contains(page, "_percent") {
			t.Errorf("node %d's /metrics has a _percent metric (want 0..1 ratios):\n%.3000s", i+1, page)
		}
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(page)
		if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("promtool check metrics on node %d's /metrics: %v\n%s", i+1, err, out)
		}
	}

	stopDemo(t, demo)
	out := logs.String()
	if !strings.Contains(out, "registered with node") {
		t.Fatalf("the nodes logged nothing at info level (want their registrations):\n%.2000s", out)
	}
	if i := strings.Index(out, "\x1b["); i >= 0 {
		t.Fatalf("logs written to a file carry ANSI escape codes: %q", out[max(0, i-100):min(len(out), i+100)])
	}
	// A healthy start and a normal stop: no warning, no error, from any node.
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, " WRN ") || strings.Contains(line, " ERR ") {
			t.Errorf("the demo's healthy start and normal stop logged: %s", line)
		}
	}
}

// findPromtool is Prometheus's promtool, which `make test` installs
// (.ci/deps: Debian package prometheus). Missing is a failure, never a skip.
func findPromtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not installed: run `make test`, whose setup (.ci/deps) installs it (Debian package prometheus)")
	}
	return p
}

// tryGet is the body of a 200 answer to GET url, or "".
func tryGet(url string) string {
	res, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return ""
	}
	defer res.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(res.Body); err != nil || res.StatusCode != http.StatusOK {
		return ""
	}
	return b.String()
}

// syncBuffer is a bytes.Buffer the demo's stderr copier writes while the
// test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

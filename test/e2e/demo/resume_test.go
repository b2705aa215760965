//go:build unix

package demo

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestChatClientResumesInBrowser: the gateway's JavaScript client
// (gateway/client/echopubsub.js, served by the chat demo) reconnects after
// its socket is cut and resumes from its last acked cursor, in Chromium.
// Ada's page (node 1) goes through a proxy that the test can cut like a
// network: it closes every WebSocket it carries and refuses new ones until
// healed. Bob's page (node 2, not proxied) publishes numbered series into
// the room while ada's page is handling, cut, retrying and back:
//
//  1. series a (40 messages) arrives; ada's page is cut while messages it
//     received still wait for its handler (they were not acked);
//  2. the client retries with back-off and is refused at least twice;
//     meanwhile bob publishes series b (20);
//  3. healed: the client opens a new session and resubscribes from its last
//     acked cursor + 1 while bob publishes series c (20).
//
// Ada's handler must have run for every message exactly once, in cursor
// order with no cursor skipped or repeated, the ones published while it
// was away replayed from node 1's store, and with no notice of loss (a
// false alarm) and no error.
func TestChatClientResumesInBrowser(t *testing.T) {
	chromium := findChromium(t)
	u, _ := runDemo(t, buildDemo(t), "-chat")
	base := u[:strings.Index(u, "/chat")]
	proxy := startCutProxy(t, base)
	browser := startChromium(t, chromium)
	ada := openTab(t, browser, "ada", proxy.url+"/chat?node=1&user=ada")
	bob := openTab(t, browser, "bob", base+"/chat?node=2&user=bob")
	for _, p := range []*chatTab{ada, bob} {
		p.until("online, subscribed", func(s chatState) bool { return s.Online && s.Subscribed })
	}

	// 1. Series a; cut while some of it waits for ada's handler.
	bob.series("a", 40)
	s := ada.until("series a arriving faster than it is handled", func(s chatState) bool { return s.Backlog >= 5 })
	proxy.cut()
	t.Logf("cut: ada handled %d, %d waiting for the handler, acked cursor %d", len(s.Handled), s.Backlog, s.Cursor)

	// 2. Refused reconnects, with back-off; series b meanwhile.
	ada.until("reconnecting, refused at least twice", func(s chatState) bool { return s.Status == "reconnecting" && s.Attempt >= 3 })
	bob.series("b", 20)
	bob.until("series a and b published", func(s chatState) bool { return len(s.Published) == 60 })
	if s := ada.read(); s.Sessions != 1 {
		t.Fatalf("ada's page opened session %d through a cut proxy", s.Sessions)
	}

	// 3. Healed; series c while the client resumes.
	proxy.heal()
	bob.series("c", 20)
	want := map[string]bool{}
	for _, series := range []struct {
		p string
		n int
	}{{"a", 40}, {"b", 20}, {"c", 20}} {
		for i := 1; i <= series.n; i++ {
			want[fmt.Sprintf("%s%d", series.p, i)] = true
		}
	}
	// c20 is the last message published: once it is handled, in cursor
	// order, so is everything before it that is coming.
	s = ada.until("c20 handled and acked on a new session", func(s chatState) bool {
		last := len(s.Handled) > 0 && s.Handled[len(s.Handled)-1].Text == "c20"
		return last && s.Sessions == 2 && s.Pending == 0 && s.Backlog == 0
	})
	ada.shot("resumed-ada")

	seen := map[string]int{}
	var prev uint64
	replayedB := 0
	for i, h := range s.Handled {
		seen[h.Text]++
		if i > 0 && h.Cursor != prev+1 {
			t.Errorf("handled #%d (%s) has cursor %d after %d: want each cursor once, in order", i, h.Text, h.Cursor, prev)
		}
		prev = h.Cursor
		if strings.HasPrefix(h.Text, "b") && h.Session == 2 && h.Replayed {
			replayedB++
		}
	}
	for text := range want {
		if seen[text] != 1 {
			t.Errorf("%s handled %d times, want once", text, seen[text])
		}
	}
	if replayedB != 20 {
		t.Errorf("%d of series b (published while ada was cut off) came from node 1's store, want 20", replayedB)
	}
	for _, n := range s.Notices {
		switch n {
		case "stream_gap", "stream_truncated", "cursor_expired", "back_pressure", "live_resume", "node_changed":
			t.Errorf("ada's page was told %s: a false alarm (nothing was lost)", n)
		}
	}
	if len(s.Errors) > 0 {
		t.Errorf("ada's page got errors: %v", s.Errors)
	}
	if t.Failed() {
		var lines []string
		for _, h := range s.Handled {
			lines = append(lines, fmt.Sprintf("%d:%s:s%d:%v", h.Cursor, h.Text, h.Session, h.Replayed))
		}
		t.Logf("ada handled (cursor:text:session:replayed): %s; notices %v", strings.Join(lines, " "), s.Notices)
	}
	// The tabs close first (t.Cleanup), then the proxy, then the demo.
}

// series makes the page publish prefix1..prefixN as a burst, in order (the
// page records each once the gateway took it); it does not wait.
func (p *chatTab) series(prefix string, n int) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`(window.chatSeries(%q, %d), true)`, prefix, n))); err != nil {
		p.t.Fatalf("%s: publish series %s: %v", p.name, prefix, err)
	}
}

// cutProxy is a reverse proxy in front of the demo that the test can cut
// like a network: cut closes every WebSocket it carries (the browser and
// the gateway each see their connection drop) and refuses new ones until
// heal.
type cutProxy struct {
	url string

	mu      sync.Mutex
	conns   map[net.Conn]struct{} // hijacked: the WebSockets it carries
	refused bool

	log testWriter
}

// testWriter writes to the test's log until stop (after it, t.Log would
// panic).
type testWriter struct {
	mu      sync.Mutex
	t       *testing.T
	stopped bool
}

func (w *testWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.t.Log(strings.TrimSuffix(string(b), "\n"))
	}
	return len(b), nil
}

func (w *testWriter) stop() {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	to, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{conns: map[net.Conn]struct{}{}}
	rp := httputil.NewSingleHostReverseProxy(to) // keeps the page's Host: the gateway sees its own origin
	rp.ErrorLog = log.New(&p.log, "cut proxy: ", 0)
	p.log.t = t
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		refused := p.refused
		p.mu.Unlock()
		if refused && r.Header.Get("Upgrade") != "" {
			http.Error(w, "cut", http.StatusServiceUnavailable)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	srv.Config.ConnState = func(c net.Conn, st http.ConnState) {
		p.mu.Lock()
		defer p.mu.Unlock()
		switch st {
		case http.StateHijacked:
			p.conns[c] = struct{}{}
		case http.StateClosed:
			delete(p.conns, c)
		}
	}
	srv.Start()
	p.url = srv.URL
	t.Cleanup(func() {
		p.cut() // the server does not close what it handed over
		srv.Close()
		p.log.stop()
	})
	return p
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refused = true
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

func (p *cutProxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refused = false
}

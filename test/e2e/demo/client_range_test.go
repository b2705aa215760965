package demo

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// rangePage runs the gateway's JavaScript client in the browser against a
// stand-in WebSocket (the client's WebSocket option) that hands it the
// gateway's notice frames as docs/gateway.md shows them, and records what
// onNotice gets.
const rangePage = `<!doctype html><script type="module">
import { GatewayClient } from "/echopubsub.js";
const frames = [
  {type: "hello", session_id: "s.1", node: "n1"},
  {type: "notice", kind: "cursor_expired", notice: {node: "n0", group: 0, missed: "30", reason: "fell behind the buffer",
    producer_incarnation: "1796566518488985545", from: "3", to: "33"}},
  {type: "notice", kind: "cursor_expired", notice: {node: "n0", group: 0, missed: "0", reason: "producer restarted",
    producer_incarnation: "1796566518488985545", from: "40", to: "0"}},
  {type: "notice", kind: "stream_gap", notice: {session_id: "s.1", stream: "room", cursor: 9, node: "n0", missed: 30,
    reason: "fell behind the buffer", producer_incarnation: "1796566518488985545", from: 3, to: 33}},
  {type: "notice", kind: "back_pressure", notice: {state: "BACK_PRESSURE_STATE_DROPPING"}},
];
class StandIn {
  constructor() { setTimeout(() => { for (const f of frames) this.onmessage({data: JSON.stringify(f)}); }, 0); }
  send() {}
  close() {}
}
window.notices = [];
new GatewayClient("ws://stand-in/ws", {WebSocket: StandIn, onStatus() {},
  onNotice: (n) => window.notices.push({kind: n.kind, range: n.range, hasRange: "range" in n}),
  onError: (e) => window.notices.push({kind: "error: " + e.message})}).connect();
</script>`

// TestClientNoticeRangeInBrowser: the client's onNotice gives a
// cursor_expired's and a stream_gap's range as {incarnation, from, to}
// (the incarnation a string, exact; the cursors numbers, whichever JSON
// form the frame used), null when the notice does not know it, and no
// range for other kinds.
func TestClientNoticeRangeInBrowser(t *testing.T) {
	chromium := findChromium(t)
	mux := http.NewServeMux()
	mux.HandleFunc("/echopubsub.js", func(w http.ResponseWriter, r *http.Request) { // the file gateway.ClientHandler serves
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		http.ServeFile(w, r, filepath.Join(repoRoot, "gateway", "client", "echopubsub.js"))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, rangePage)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	tab := openTab(t, startChromium(t, chromium), "client", srv.URL+"/")
	type got struct {
		Kind     string          `json:"kind"`
		Range    json.RawMessage `json:"range"`
		HasRange bool            `json:"hasRange"`
	}
	var notices []got
	deadline := time.Now().Add(30 * time.Second)
	for len(notices) < 4 {
		ctx, cancel := context.WithTimeout(tab.ctx, 5*time.Second)
		raw, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify(window.notices || [])`))
		cancel()
		if err == nil {
			err = json.Unmarshal([]byte(raw), &notices)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the client reported %+v (read error %v), want 4 notices", notices, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	want := []got{
		{"cursor_expired", json.RawMessage(`{"incarnation":"1796566518488985545","from":3,"to":33}`), true},
		{"cursor_expired", json.RawMessage(`null`), true},
		{"stream_gap", json.RawMessage(`{"incarnation":"1796566518488985545","from":3,"to":33}`), true},
		{"back_pressure", nil, false},
	}
	for i, w := range want {
		g := notices[i]
		if g.Kind != w.Kind || string(g.Range) != string(w.Range) || g.HasRange != w.HasRange {
			t.Errorf("notice %d: kind %s range %s (has %v), want %s %s (has %v)", i, g.Kind, g.Range, g.HasRange, w.Kind, w.Range, w.HasRange)
		}
	}
}

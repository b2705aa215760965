//go:build unix

package demo

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/gateway"
	"github.com/echopubsub/echopubsub/internal/proc"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// tracePage subscribes to "room" through the gateway's JavaScript client
// and keeps what each handler call got as msg.traceparent and
// msg.tracestate, for the test to read (window.traced()).
const tracePage = `<!doctype html><meta charset="utf-8"><title>trace</title>
<script type="module">
import { GatewayClient } from "/echopubsub.js";
const got = [];
window.traced = () => JSON.stringify({ subscribed: window.subscribed === true, got });
const client = new GatewayClient("ws://" + location.host + "/ws", { onNotice: () => {}, onError: (e) => got.push({ error: String(e) }) });
window.publishTraced = (traceparent) => client.publish("room", "echopubsub.test.v1.Stamp", { seq: "3" }, { traceparent })
  .then(() => true, (e) => { got.push({ error: String(e) }); return false; });
client.subscribe("room", async (msg) => { got.push({ seq: msg.payload.seq, traceparent: msg.traceparent, tracestate: msg.tracestate }); })
  .then(() => { window.subscribed = true; });
client.connect();
</script>`

// TestJSClientTraceparent: the gateway's JavaScript client, in Chromium,
// hands its handler the W3C trace context a message was published in
// (msg.traceparent: the publishing node's broadcast span, as the SDK's
// in-memory exporter recorded it): the span under the application's span
// for BroadcastContext, the root of a new trace for Broadcast; and a
// client.publish with the page's traceparent continues the page's trace.
func TestJSClientTraceparent(t *testing.T) {
	chromium := findChromium(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	nd := test.StartCluster(t, 1, test.FastConfig(), echopubsub.WithTracerProvider(tp))[0]
	gcfg := gateway.DefaultConfig()
	gcfg.Publish = true
	gw, err := gateway.New(nd.PS, gateway.AnyIdentity, gcfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /echopubsub.js", gateway.ClientHandler())
	mux.Handle("/ws", gw)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, tracePage)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := gw.Close(ctx); err != nil {
			t.Errorf("gateway close: %v", err)
		}
		srv.Close()
	})
	tab := openTab(t, startChromium(t, chromium), "trace", srv.URL+"/")
	read := func() string {
		ctx, cancel := context.WithTimeout(tab.ctx, 5*time.Second)
		defer cancel()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.traced ? window.traced() : "{}"`))
		if err != nil {
			return err.Error()
		}
		return s
	}
	var last string
	if !proc.Until(20*time.Second, 50*time.Millisecond, func() bool { last = read(); return strings.Contains(last, `"subscribed":true`) }) {
		t.Fatalf("the page did not subscribe within 20 s: %s", last)
	}

	ctx, app := tp.Tracer("app").Start(context.Background(), "app")
	if err := nd.PS.BroadcastContext(ctx, nil, "room", &testpb.Stamp{Seq: 1}); err != nil {
		t.Fatal(err)
	}
	app.End()
	nd.Broadcast(t, "room", &testpb.Stamp{Seq: 2})
	// The broadcast spans: seq 1's under the app span, seq 2's the root
	// of a trace of its own (Broadcast has no context to continue).
	var want1, want2 string
	for _, s := range exp.GetSpans() {
		if s.Name != "broadcast room" {
			continue
		}
		tp := fmt.Sprintf("00-%s-%s-01", s.SpanContext.TraceID(), s.SpanContext.SpanID())
		switch {
		case s.Parent.SpanID() == app.SpanContext().SpanID() && s.Parent.TraceID() == app.SpanContext().TraceID():
			want1 = tp
		case !s.Parent.IsValid():
			want2 = tp
		}
	}
	if want1 == "" || want2 == "" {
		t.Fatalf("want a broadcast span under the app span and one without a parent: %v", exp.GetSpans())
	}
	wantGot := fmt.Sprintf(`"got":[{"seq":"1","traceparent":%q,"tracestate":""},{"seq":"2","traceparent":%q,"tracestate":""}]`, want1, want2)
	if !proc.Until(20*time.Second, 50*time.Millisecond, func() bool { last = read(); return strings.Contains(last, wantGot) }) {
		t.Fatalf("the page's handler got %s, want %s", last, wantGot)
	}

	// The page publishes in its own trace (client.publish's traceparent):
	// the node's broadcast span continues it, and the handler sees that span.
	const pageTrace, pageSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	pctx, cancel := context.WithTimeout(tab.ctx, 10*time.Second)
	defer cancel()
	ok, err := chromedp.Run(pctx, chromedp.Evaluate[bool](`window.publishTraced("00-`+pageTrace+`-`+pageSpan+`-01")`, chromedp.EvalAwaitPromise))
	if err != nil || !ok {
		t.Fatalf("the page's traced publish: %v %v (%s)", ok, err, read())
	}
	var want3 string
	for _, s := range exp.GetSpans() {
		if s.Name == "broadcast room" && s.Parent.SpanID().String() == pageSpan && s.SpanContext.TraceID().String() == pageTrace {
			want3 = fmt.Sprintf("00-%s-%s-01", pageTrace, s.SpanContext.SpanID())
		}
	}
	if want3 == "" {
		t.Fatalf("no broadcast span continues the page's trace: %v", exp.GetSpans())
	}
	want3Got := fmt.Sprintf(`{"seq":"3","traceparent":%q,"tracestate":""}]`, want3)
	if !proc.Until(20*time.Second, 50*time.Millisecond, func() bool { last = read(); return strings.Contains(last, want3Got) }) {
		t.Fatalf("the page's handler got %s, want it to end with %s", last, want3Got)
	}
	t.Logf("the page's handler got %s", last)
}

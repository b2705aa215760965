package gateway_test

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/gateway"
	"github.com/echopubsub/echopubsub/test"
)

// An envelope frame carries the W3C trace context the message was published
// in ("traceparent", "tracestate"), and none for a message published
// outside a trace. The pubsub traces with the API's no-op provider, which
// records nothing but keeps the caller's span context: the publish carries
// that context unchanged (the SDK's spans are tested in test/e2e/tracing).
func TestGatewayEnvelopeTraceparent(t *testing.T) {
	nodes := test.StartCluster(t, 1, gatewayConfig(t), echopubsub.WithTracerProvider(noop.NewTracerProvider()))
	nd := nodes[0]
	_, url := serveGateway(t, nd, nil, smallGatewayConfig())
	c := dialGateway(t, url)
	c.ok(map[string]interface{}{"op": "subscribe", "topic": "room"})

	ts, err := trace.ParseTraceState("vendor=abc")
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID: trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}, TraceFlags: trace.FlagsSampled, TraceState: ts})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	if err := nd.PS.BroadcastContext(ctx, nil, "room", stamp(1)); err != nil {
		t.Fatal(err)
	}
	nd.Broadcast(t, "room", stamp(2)) // no context: no trace
	e := c.envelope()
	if _, seq := stampPayload(e); seq != "1" || e.str("traceparent") != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" ||
		e.str("tracestate") != "vendor=abc" {
		t.Fatalf("envelope of the traced publish: %v, want its traceparent and tracestate", e)
	}
	e = c.envelope()
	if _, seq := stampPayload(e); seq != "2" {
		t.Fatalf("second envelope %v", e)
	}
	if _, ok := e["traceparent"]; ok {
		t.Fatalf("envelope of a publish outside a trace has a traceparent: %v", e)
	}
}

// A publish frame may carry the client's W3C trace context: the broadcast
// continues it (with the no-op provider the message carries exactly that
// context, which the envelope shows). A malformed one, a tracestate alone
// and a trace context on another op are refused, naming what was wrong.
func TestGatewayPublishTraceparent(t *testing.T) {
	nd := test.StartCluster(t, 1, gatewayConfig(t), echopubsub.WithTracerProvider(noop.NewTracerProvider()))[0]
	cfg := smallGatewayConfig()
	cfg.Publish = true
	_, url := serveGateway(t, nd, nil, cfg)
	c := dialGateway(t, url)
	c.ok(map[string]interface{}{"op": "subscribe", "topic": "room"})
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	pub := func(extra map[string]interface{}) map[string]interface{} {
		f := map[string]interface{}{"op": "publish", "topic": "room", "type": "echopubsub.test.v1.Stamp", "payload": map[string]string{"seq": "1"}}
		for k, v := range extra {
			f[k] = v
		}
		return f
	}
	for _, bad := range []struct {
		frame map[string]interface{}
		says  string
	}{
		{pub(map[string]interface{}{"traceparent": "00-xyz"}), `got "00-xyz"`},
		{pub(map[string]interface{}{"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}), "W3C traceparent"},
		{pub(map[string]interface{}{"tracestate": "vendor=abc"}), "tracestate needs a traceparent"},
		{map[string]interface{}{"op": "subscribe", "topic": "other", "traceparent": tp}, "op subscribe takes no traceparent"},
	} {
		if f := c.refused(bad.frame, gateway.CodeInvalidArgument); !strings.Contains(f.str("message"), bad.says) {
			t.Errorf("refusal of %v: %v, want it to say %q", bad.frame, f, bad.says)
		}
	}
	c.ok(pub(map[string]interface{}{"traceparent": tp, "tracestate": "vendor=abc"}))
	if e := c.envelope(); e.str("traceparent") != tp || e.str("tracestate") != "vendor=abc" {
		t.Fatalf("envelope of a publish in the client's trace: %v, want traceparent %s", e, tp)
	}
}

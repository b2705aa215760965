package echopubsub_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// traced is a span context as an application's span would have it.
func traced(t *testing.T) (context.Context, string) {
	t.Helper()
	ts, err := trace.ParseTraceState("vendor=abc")
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled, TraceState: ts})
	return trace.ContextWithSpanContext(context.Background(), sc), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
}

// TestTraceContextReachesSubscribers: node 0 traces, with the API's no-op
// provider (it records nothing but keeps the caller's span context, so the
// message carries exactly that context; test/e2e/tracing records real
// spans across processes); node 1 does not trace. A BroadcastContext in a
// span reaches node 0's and node 1's metadata subscribers and node 1's
// session with that span's traceparent and tracestate, over the wire to
// node 1; a Broadcast outside a trace carries none.
func TestTraceContextReachesSubscribers(t *testing.T) {
	log := test.Logger(t, zerolog.InfoLevel)
	var nodes []*test.Node
	var addrs []string
	for i := 0; i < 2; i++ {
		system, r := test.StartRemote(t, log)
		nd := &test.Node{System: system, Remote: r, Addr: system.Address(), Faults: test.NewFaults()}
		nd.Log = log.With().Str("test_node", nd.Addr).Logger()
		nodes, addrs = append(nodes, nd), append(addrs, nd.Addr)
	}
	nodes[0].Start(t, sessionConfig(20, 100), echopubsub.WithMembership(cluster.NewStatic(addrs...)),
		echopubsub.WithTracerProvider(noop.NewTracerProvider()))
	nodes[1].Start(t, sessionConfig(20, 100), echopubsub.WithMembership(cluster.NewStatic(addrs...)))
	test.WaitJoined(t, nodes)
	subs := []*test.Collector{nodes[0].Subscribe(t, "room", echopubsub.WithMetadata()), nodes[1].Subscribe(t, "room", echopubsub.WithMetadata())}
	o := spawnOwner(t, nodes[1], nil)
	openSession(t, nodes[1], o, []string{"room"})

	ctx, want := traced(t)
	if err := nodes[0].PS.BroadcastContext(ctx, nil, "room", &testpb.Stamp{Seq: 1}); err != nil {
		t.Fatal(err)
	}
	nodes[0].Broadcast(t, "room", &testpb.Stamp{Seq: 2})
	for i, c := range subs {
		test.Eventually(t, 10*time.Second, func() bool { return c.Len() >= 2 }, test.Sprintf("node %d's subscriber got both", i))
		for j, m := range c.All()[:2] {
			d := m.(*messages.Delivery)
			if j == 0 && (d.Traceparent != want || d.Tracestate != "vendor=abc") {
				t.Errorf("node %d: traced delivery has (%q, %q), want (%q, vendor=abc)", i, d.Traceparent, d.Tracestate, want)
			}
			if j == 1 && (d.Traceparent != "" || d.Tracestate != "") {
				t.Errorf("node %d: a delivery published outside a trace has (%q, %q)", i, d.Traceparent, d.Tracestate)
			}
		}
	}
	waitEnvelopes(t, o, 2)
	envs := o.envelopes()
	if envs[0].Traceparent != want || envs[0].Tracestate != "vendor=abc" || envs[1].Traceparent != "" {
		t.Errorf("session envelopes carry (%q, %q) and %q, want (%q, vendor=abc) and none", envs[0].Traceparent, envs[0].Tracestate, envs[1].Traceparent, want)
	}
	// A subscriber continues the trace from it.
	if sc := trace.SpanContextFromContext(echopubsub.ContextWithTrace(context.Background(), envs[0].Traceparent, envs[0].Tracestate)); !sc.IsRemote() ||
		fmt.Sprint(sc.TraceID()) != "4bf92f3577b34da6a3ce929d0e0e4736" || fmt.Sprint(sc.SpanID()) != "00f067aa0ba902b7" {
		t.Errorf("ContextWithTrace gave span context %v", sc)
	}
}

// ContextWithTrace leaves ctx as it is for no or a malformed traceparent;
// Start refuses WithTracerProvider(nil), naming the option.
func TestTracingBadInput(t *testing.T) {
	ctx := context.Background()
	for _, tp := range []string{"", "00-xyz", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"} {
		if got := echopubsub.ContextWithTrace(ctx, tp, ""); got != ctx {
			t.Errorf("ContextWithTrace(%q) changed the context", tp)
		}
	}
	system, r := test.StartRemote(t, test.Logger(t, zerolog.WarnLevel))
	t.Cleanup(func() { r.Shutdown(false); system.Shutdown() })
	err := call(func() error {
		_, err := echopubsub.Start(system, fastConfig(), echopubsub.WithTracerProvider(nil))
		return err
	})
	wantErr(t, "nil tracer provider", err, "WithTracerProvider", "nil")
}

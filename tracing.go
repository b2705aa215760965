package echopubsub

import (
	"context"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/internal/core"
)

// tracerName is the instrumentation scope of the pubsub's spans.
const tracerName = "github.com/echopubsub/echopubsub"

// WithTracerProvider turns tracing on: the pubsub records OpenTelemetry
// spans on tp's tracer, and every message it publishes carries its W3C
// trace context (traceparent, tracestate) to the nodes that deliver it.
// Defaults to off: no spans, nothing carried, and a publish costs what it
// does without tracing. See "Tracing" in docs/operations.md.
//
//   - A publish (Broadcast and every variant, a session's request or reply)
//     records a "broadcast <topic>" span (kind producer) from the call to
//     the message being queued. BroadcastContext continues the span in its
//     ctx (the publish span is its child); Reply continues the request's
//     trace; the other calls, which take no context, start a new trace.
//   - Each node that hands the message to a subscriber (the publishing
//     node at write time, every other node when its batch arrives) records
//     a "deliver <topic>" span (kind consumer), a child of the publish
//     span, when that node traces too.
//   - Every subscriber's metadata carries the publish span's context
//     (messages.Delivery and Envelope: Traceparent, Tracestate; the
//     gateway's "msg" frame: "traceparent"), also on a node that does not
//     trace: continue the trace from it with ContextWithTrace. Messages
//     replayed from a durable store carry none (the store keeps no trace
//     context).
//
// Only the W3C trace context crosses the wire, whatever the application's
// global propagator adds (no baggage). A node of an earlier build ignores
// it. Start fails when tp is nil.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracing = tracingOption{set: true, provider: tp} }
}

// tracingOption is what WithTracerProvider set.
type tracingOption struct {
	set      bool
	provider trace.TracerProvider
}

func (t tracingOption) check() error {
	if t.set && t.provider == nil {
		return fmt.Errorf("echopubsub: WithTracerProvider: the tracer provider is nil (leave the option out to trace nothing)")
	}
	return nil
}

// tracer is the pubsub's tracer, nil when tracing is off.
func (t tracingOption) tracer() trace.Tracer {
	if !t.set {
		return nil
	}
	return t.provider.Tracer(tracerName)
}

// tracedWrite is write inside the message's publish span: the message
// carries the span's context.
func (ps *PubSub) tracedWrite(wait core.Wait, from *actor.PID, topic string, msg proto.Message, to audience) error {
	ctx := to.parent
	if ctx == nil {
		ctx = wait.Ctx
	}
	if ctx == nil {
		ctx = context.Background()
	}
	attrs := []attribute.KeyValue{core.AttrSystem, core.AttrDestination(topic),
		attribute.String("messaging.operation.name", "broadcast"),
		attribute.String("messaging.operation.type", "send"),
		attribute.String("echopubsub.node", ps.rt.Node)}
	if to.onlyNode != "" {
		attrs = append(attrs, attribute.String("echopubsub.direct.node", to.onlyNode))
	}
	if to.thisNode {
		attrs = append(attrs, attribute.Bool("echopubsub.local", true))
	}
	ctx, span := ps.tracer.Start(ctx, "broadcast "+topic, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	err := ps.writeIn(wait, from, topic, msg, to, core.TraceOf(ctx))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	return err
}

// ContextWithTrace returns ctx carrying the remote span context that
// traceparent and tracestate name (a delivery's, as in
// messages.Delivery.Traceparent and Envelope.Traceparent), so that a span
// started from it continues the publisher's trace. It returns ctx as it is
// when traceparent is "" or not a W3C traceparent.
func ContextWithTrace(ctx context.Context, traceparent, tracestate string) context.Context {
	sc := core.SpanContext(traceparent, tracestate)
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

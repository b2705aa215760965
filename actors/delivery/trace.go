package delivery

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/echopubsub/echopubsub/internal/core"
)

// SetTracer makes d record a span for each delivery of a message published
// in a trace (Item.Traceparent). Call it before anything is delivered; nil
// (the default): no spans.
func (d *Dispatcher) SetTracer(t trace.Tracer) { d.tracer = t }

// deliverTraced is deliver inside a "deliver <topic>" span (kind
// consumer), a child of the message's publish span: one per message and
// node that has a subscriber of its topic, from when the node hands it out
// to when every local subscriber's mailbox has it (or its bound dropped
// it). A subscriber continues the trace from the message's metadata
// (messages.Delivery.Traceparent).
func (d *Dispatcher) deliverTraced(it *Item, t *topicSubs) {
	parent := core.SpanContext(it.Traceparent, it.Tracestate)
	if !parent.IsValid() { // checked where it entered: not expected
		d.deliver(it, t)
		return
	}
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), parent)
	_, span := d.tracer.Start(ctx, "deliver "+it.Topic, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(core.AttrSystem, core.AttrDestination(it.Topic),
			attribute.String("messaging.operation.name", "deliver"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("echopubsub.node", d.node),
			attribute.String("echopubsub.producer", it.Node),
			attribute.Int64("echopubsub.cursor", int64(it.Cursor)),
			attribute.Bool("echopubsub.local", it.Local),
			attribute.Int64("echopubsub.subscriptions", t.live.Load())))
	d.deliver(it, t)
	span.End()
}

package core

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Trace is the W3C trace context a message was published in: the
// `traceparent` and `tracestate` headers of its publish span (see
// WithTracerProvider in the root package). It travels with the message
// (messages.EntryOption) and reaches every subscriber's metadata. A write
// of a pubsub that does not trace has none (nil): tracing off costs the
// hot path nothing but that nil. Never modified once made: the writes,
// the buffer and the store share it.
type Trace struct {
	Parent, State string
}

// Headers is t's traceparent and tracestate ("", "" for nil).
func (t *Trace) Headers() (traceparent, tracestate string) {
	if t == nil {
		return "", ""
	}
	return t.Parent, t.State
}

// Size is what the trace context adds to a message's batch bytes (0 for
// none: nil or empty).
func (t *Trace) Size() int {
	if t == nil || t.Parent == "" {
		return 0
	}
	return len(t.Parent) + len(t.State) + 4
}

// traceContext is the one propagator the wire speaks: W3C trace context
// only (traceparent, tracestate), whatever the application's global
// propagator adds (baggage travels in the message, if at all).
var traceContext propagation.TraceContext

// headers is a text-map carrier over the two headers a Trace holds.
type headers struct{ parent, state string }

const (
	parentHeader = "traceparent"
	stateHeader  = "tracestate"
)

func (h *headers) Get(key string) string {
	switch key {
	case parentHeader:
		return h.parent
	case stateHeader:
		return h.state
	}
	return ""
}

func (h *headers) Set(key, value string) {
	switch key {
	case parentHeader:
		h.parent = value
	case stateHeader:
		h.state = value
	}
}

func (h *headers) Keys() []string { return []string{parentHeader, stateHeader} }

// TraceOf is the trace context of ctx's span, nil when ctx holds no valid
// span context.
func TraceOf(ctx context.Context) *Trace {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	var h headers
	traceContext.Inject(ctx, &h)
	return &Trace{Parent: h.parent, State: h.state}
}

// SpanContext is the span context traceparent and tracestate name; not
// valid when traceparent is not a W3C traceparent (an invalid tracestate
// is dropped, as the W3C recommendation says).
func SpanContext(traceparent, tracestate string) trace.SpanContext {
	ctx := traceContext.Extract(context.Background(), &headers{traceparent, tracestate})
	return trace.SpanContextFromContext(ctx)
}

// CheckTrace is the trace context a peer sent (messages.Cursor.Trace),
// checked and in canonical form: "" when traceparent is absent or not a
// W3C traceparent, so that a subscriber never sees a malformed one. It
// allocates only for an entry that carries one.
func CheckTrace(traceparent, tracestate []byte) (parent, state string) {
	if len(traceparent) == 0 {
		return "", ""
	}
	sc := SpanContext(string(traceparent), string(tracestate))
	if !sc.IsValid() {
		return "", ""
	}
	var h headers
	traceContext.Inject(trace.ContextWithRemoteSpanContext(context.Background(), sc), &h)
	return h.parent, h.state
}

// Messaging attributes of the spans (OpenTelemetry's messaging semantic
// conventions).
var (
	AttrSystem = attribute.String("messaging.system", "echopubsub")
)

// AttrDestination is a span's topic attribute.
func AttrDestination(topic string) attribute.KeyValue {
	return attribute.String("messaging.destination.name", topic)
}

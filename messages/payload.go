package messages

import (
	"errors"
	"fmt"
	"reflect"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// ErrUnknownType is returned by Decode for a payload type that is not linked
// into this binary.
var ErrUnknownType = errors.New("messages: unknown payload type")

// ErrNilMessage is returned by Encode for a nil message.
var ErrNilMessage = errors.New("messages: nil message")

// Encode marshals msg once and returns its type name and bytes. The result
// is what an Entry carries to every node.
func Encode(msg proto.Message) (typeName string, payload []byte, err error) {
	if msg == nil {
		return "", nil, ErrNilMessage
	}
	m := msg.ProtoReflect()
	if !m.IsValid() {
		return "", nil, ErrNilMessage
	}
	payload, err = proto.Marshal(msg)
	if err != nil {
		return "", nil, fmt.Errorf("messages: encode %s: %w", m.Descriptor().FullName(), err)
	}
	return string(m.Descriptor().FullName()), payload, nil
}

// Decode turns a payload back into its message. An unknown type or bad bytes
// give an error, never a panic.
func Decode(typeName string, payload []byte) (proto.Message, error) {
	t, err := LookupType(typeName)
	if err != nil {
		return nil, err
	}
	return t.Decode(payload)
}

// LookupType resolves a payload type name among the types linked into this
// binary (ErrUnknownType if it is not).
func LookupType(typeName string) (Type, error) {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(typeName))
	if err != nil {
		return Type{}, fmt.Errorf("%w %q", ErrUnknownType, typeName)
	}
	return TypeOf(mt), nil
}

// Type is a payload type resolved once, to decode many payloads of it (a
// receiving node resolves each type of a batch once). The zero Type is
// unresolved.
type Type struct {
	mt protoreflect.MessageType
	// goType is the struct type of a generated message: Decode allocates it
	// directly, which skips protobuf's reflective constructor (a third of a
	// small message's decode). nil for other types (dynamicpb), which are
	// made through mt.
	goType reflect.Type
}

// TypeOf resolves mt for Decode.
func TypeOf(mt protoreflect.MessageType) Type {
	t := Type{mt: mt}
	if mt == nil {
		return t
	}
	// A generated type's zero message is a nil pointer to its struct (which
	// is a proto.Message of type mt). Checked without allocating: a
	// receiving node resolves its types once per batch.
	z := mt.Zero().Interface()
	v := reflect.ValueOf(z)
	if v.Kind() == reflect.Pointer && v.IsNil() && v.Type().Elem().Kind() == reflect.Struct && z.ProtoReflect().Type() == mt {
		t.goType = v.Type().Elem()
	}
	return t
}

// Resolved reports whether t names a type (is not the zero Type).
func (t Type) Resolved() bool { return t.mt != nil }

// Decode unmarshals payload as a new message of type t. Bad bytes give an
// error, never a panic.
func (t Type) Decode(payload []byte) (proto.Message, error) {
	var msg proto.Message
	if t.goType != nil {
		msg = reflect.New(t.goType).Interface().(proto.Message) // checked in TypeOf
	} else {
		msg = t.mt.New().Interface()
	}
	// Merge: the message is new, there is nothing to reset.
	if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(payload, msg); err != nil {
		return nil, fmt.Errorf("messages: decode %s: %w", t.mt.Descriptor().FullName(), err)
	}
	return msg, nil
}

// Delivery is what a subscription that opted in to delivery metadata
// receives instead of the bare message. It never crosses a node boundary: the
// receiving node builds it from the Batch it was sent.
//
// Cursor is the message's position in its producer's stream: for one
// (Node, Group, Incarnation) the cursors a subscriber sees increase by one,
// repeat only on redelivery, and jump only after a CursorExpired or a
// BackPressure notice. Local is true for LocalBroadcast, which is not
// buffered and has no cursor.
type Delivery struct {
	Node        string
	Group       uint32
	Incarnation uint64
	Cursor      uint64
	Topic       string
	Local       bool
	// StoreCursor is the message's row in this node's durable store, for a
	// durable topic (0: not stored here).
	StoreCursor uint64
	// Unstored marks a message of a durable topic that this node's store
	// (node-local, failing: a full disk) could not take: StoreCursor is 0,
	// and a gap row counts it once the store takes writes again.
	Unstored bool
	// Message is the decoded payload (an *Undecodable when it could not be
	// decoded). It is shared by every local subscriber: do not mutate it.
	// nil for a subscription that asked for the encoding only
	// (echopubsub.WithFormat(echopubsub.FormatEncoded)).
	Message proto.Message
	// PayloadType and Payload are the message's encoding, set for a
	// subscription that asked for it (echopubsub.WithFormat, FormatEncoded
	// or FormatBoth; the names of a session's Envelope): its full protobuf
	// type name and the bytes its publisher encoded, as they travelled
	// (the same bytes on every node; decode them with messages.Decode).
	// A node hands them over without decoding them, so a type this node
	// does not link arrives as its bytes, not as an *Undecodable. Payload
	// is shared by every local subscriber that asked for it and is never
	// written after it is handed out: do not modify it. It may share one
	// array with the other messages of the batch it came in, which it keeps
	// alive while it is held: copy it to keep it long.
	PayloadType string
	Payload     []byte
	// Traceparent and Tracestate are the W3C trace context the message was
	// published in (its publish span), when the publishing node traces
	// (echopubsub.WithTracerProvider); "" otherwise. Continue the trace with
	// echopubsub.ContextWithTrace (see "Tracing" in docs/operations.md).
	Traceparent, Tracestate string
}

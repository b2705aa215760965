package messages

import (
	"errors"
	"fmt"

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
	return AppendEncode(nil, msg)
}

// AppendEncode is Encode appending the bytes to buf (which may be reused
// storage, as a recycled Broadcast's payload is).
func AppendEncode(buf []byte, msg proto.Message) (typeName string, payload []byte, err error) {
	if msg == nil || !msg.ProtoReflect().IsValid() {
		return "", nil, ErrNilMessage
	}
	payload, err = proto.MarshalOptions{}.MarshalAppend(buf, msg)
	if err != nil {
		return "", nil, fmt.Errorf("messages: encode %s: %w", msg.ProtoReflect().Descriptor().FullName(), err)
	}
	return string(msg.ProtoReflect().Descriptor().FullName()), payload, nil
}

// Decode turns a payload back into its message. An unknown type or bad bytes
// give an error, never a panic.
func Decode(typeName string, payload []byte) (proto.Message, error) {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(typeName))
	if err != nil {
		return nil, fmt.Errorf("%w %q", ErrUnknownType, typeName)
	}
	msg := mt.New().Interface()
	if err := proto.Unmarshal(payload, msg); err != nil {
		return nil, fmt.Errorf("messages: decode %s: %w", typeName, err)
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
	// Message is the decoded payload (an *Undecodable when it could not be
	// decoded). It is shared by every local subscriber: do not mutate it.
	Message proto.Message
}

package messages_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// TestTypeDecode: a resolved Type decodes what Encode made into an equal
// message of the same Go type, for a generated type (the direct
// constructor) and for a dynamic one (protobuf's constructor); bad bytes
// give an error naming the type.
func TestTypeDecode(t *testing.T) {
	in := &testpb.Stamp{Publisher: "p", Seq: 7, Pad: []byte("0123456789"), SentUnixNano: 42}
	name, payload, err := messages.Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		mt   protoreflect.MessageType
	}{
		{"generated", in.ProtoReflect().Type()},
		{"dynamic", dynamicpb.NewMessageType(in.ProtoReflect().Descriptor())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			typ := messages.TypeOf(tc.mt)
			if !typ.Resolved() {
				t.Fatal("TypeOf gave an unresolved Type")
			}
			out, err := typ.Decode(payload)
			if err != nil {
				t.Fatal(err)
			}
			if out.ProtoReflect().Type() != tc.mt {
				t.Fatalf("decoded as %T, want a message of the type resolved", out)
			}
			if !proto.Equal(out, in) && !proto.Equal(out, dynamicOf(t, in)) {
				t.Fatalf("decoded %v, want %v", out, in)
			}
			if _, err := typ.Decode([]byte{0xff}); err == nil || !strings.Contains(err.Error(), name) {
				t.Fatalf("bad bytes: error %v, want one naming %s", err, name)
			}
		})
	}
	if (messages.Type{}).Resolved() {
		t.Fatal("the zero Type says it is resolved")
	}
	// Decode by name takes the same path.
	out, err := messages.Decode(name, payload)
	if err != nil || !proto.Equal(out, in) {
		t.Fatalf("Decode(%s): %v, %v", name, out, err)
	}
	if _, ok := out.(*testpb.Stamp); !ok {
		t.Fatalf("Decode gave %T, want *testpb.Stamp", out)
	}
}

// dynamicOf is in as a dynamic message (proto.Equal compares a dynamic
// message only with another).
func dynamicOf(t *testing.T, in proto.Message) proto.Message {
	d := dynamicpb.NewMessage(in.ProtoReflect().Descriptor())
	b, _ := proto.Marshal(in)
	if err := proto.Unmarshal(b, d); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestTypeOfAllocatesNothing: a receiving node resolves each payload type of
// every batch; at small batches (BatchInterval 0) an allocation there is
// one per message.
func TestTypeOfAllocatesNothing(t *testing.T) {
	mt := (&testpb.Stamp{}).ProtoReflect().Type()
	if n := testing.AllocsPerRun(1000, func() { _ = messages.TypeOf(mt) }); n > 0 {
		t.Fatalf("TypeOf: %.1f allocations, want 0", n)
	}
}

package messages_test

import (
	"bytes"
	"testing"

	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/messages"
)

// TestBatchSerializeSendsTheEncoding: what protoactor's remote marshals for
// a batch (Batch.Serialize, then its serializer) is, for a batch made by
// Encoded, the encoding itself, not a copy of it, under the Batch's type
// name; for an ordinary batch, proto.Marshal's bytes. Either way the
// receiving side's deserializer gives back the batch that was sent.
func TestBatchSerializeSendsTheEncoding(t *testing.T) {
	var e messages.BatchEncoder
	e.Add("room:1", "echopubsub.test.v1.Stamp", bytes.Repeat([]byte{7}, 300), "", "", 0)
	e.Add("room:2", "echopubsub.test.v1.Stamp", []byte("abc"), "sub", "n2", 9)
	h := messages.BatchHeader{ProtocolVersion: messages.ProtocolVersion, PubsubName: "ps", ProducerNode: "n1",
		ProducerIncarnation: 3, Group: 1, FirstCursor: 5}
	wire := e.Encode(h)
	sent, err := messages.Encoded(wire).Decoded()
	if err != nil {
		t.Fatal(err)
	}
	plain := &messages.Batch{ProtocolVersion: messages.ProtocolVersion, PubsubName: "ps", FirstCursor: 2}
	plain.Add("t", "x.Y", []byte("payload"), "", "", 0)
	plainWire, err := proto.Marshal(plain)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		batch *messages.Batch
		want  []byte
		alias bool // the bytes marshalled are want's own
	}{
		{"encoded", messages.Encoded(wire), wire, true},
		{"ordinary", plain, plainWire, false},
	} {
		rs, err := c.batch.Serialize()
		if err != nil {
			t.Fatalf("%s: Serialize: %v", c.name, err)
		}
		out, typeName, err := remote.Serialize(rs, remote.DefaultSerializerID)
		if err != nil {
			t.Fatalf("%s: protoactor's serializer: %v", c.name, err)
		}
		if want := string(proto.MessageName(&messages.Batch{})); typeName != want {
			t.Fatalf("%s: sent as type %q, want %q", c.name, typeName, want)
		}
		if !bytes.Equal(out, c.want) {
			t.Fatalf("%s: sent %x, want %x", c.name, out, c.want)
		}
		if c.alias && &out[0] != &c.want[0] {
			t.Fatalf("%s: the encoding was copied to be sent", c.name)
		}
		got, err := remote.Deserialize(out, typeName, remote.DefaultSerializerID)
		if err != nil {
			t.Fatalf("%s: the receiving side cannot decode it: %v", c.name, err)
		}
		want := c.batch
		if c.alias {
			want = sent
		}
		if !proto.Equal(got.(*messages.Batch), want) {
			t.Fatalf("%s: received %v, want %v", c.name, got, want)
		}
	}
}

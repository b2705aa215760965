package messages

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"
)

// FuzzDecode: any type name and bytes give a message or an error, never a
// panic, and a decoded message survives Encode/Decode unchanged.
func FuzzDecode(f *testing.F) {
	b, _ := proto.Marshal(&CursorExpired{Node: "n", Group: 1, Missed: 3, Reason: "r"})
	f.Add("echopubsub.v1.CursorExpired", b)
	f.Add("echopubsub.v1.Batch", []byte{0x3a, 0x02, 0x0a, 0x00})
	f.Add("no.such.Type", []byte{})
	f.Add("", []byte{0xff})
	f.Add("google.protobuf.Any", []byte{0x0a, 0x01, 0x41})
	f.Fuzz(func(t *testing.T, typeName string, payload []byte) {
		msg, err := Decode(typeName, payload)
		if err != nil {
			if msg != nil {
				t.Fatalf("Decode returned both %v and error %v", msg, err)
			}
			return
		}
		name, again, err := Encode(msg)
		if err != nil {
			t.Fatalf("re-encode %s: %v", typeName, err)
		}
		if name != typeName {
			t.Fatalf("type name %q came back as %q", typeName, name)
		}
		msg2, err := Decode(name, again)
		if err != nil || !proto.Equal(msg, msg2) {
			t.Fatalf("round trip of %s: %v, equal %v", typeName, err, proto.Equal(msg, msg2))
		}
	})
}

// FuzzWireMessages: every message that crosses a node boundary decodes from
// any bytes without a panic and round-trips.
func FuzzWireMessages(f *testing.F) {
	b := &Batch{ProtocolVersion: ProtocolVersion, PubsubName: "p", ProducerNode: "n", ProducerIncarnation: 2, Group: 3, FirstCursor: 4}
	b.AddEntry(&Entry{Topic: "t", PayloadType: "x", Payload: []byte{1}, Exclude: "e", OnlyNode: "o"})
	b.AddEntry(&Entry{Topic: "u", PayloadType: "x", Payload: []byte{2, 3}})
	for _, m := range []proto.Message{
		b,
		&Register{ProtocolVersion: ProtocolVersion, PubsubName: "p", ProducerNode: "n", NextCursor: 5, MissedWrites: true},
		&Expire{ProtocolVersion: ProtocolVersion, Missed: 2, NextCursor: 9},
		&BatchAck{Status: AckStatus_ACK_STATUS_REJECTED, Error: "e"},
		&RegisterAck{Status: AckStatus_ACK_STATUS_OK, NextCursor: 1},
	} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, m := range []proto.Message{&Batch{}, &Register{}, &Expire{}, &BatchAck{}, &RegisterAck{},
			&Entry{}, &CursorExpired{}, &BackPressure{}, &Broadcast{}, &Undecodable{}} {
			if err := proto.Unmarshal(data, m); err != nil {
				continue
			}
			b, err := proto.Marshal(m)
			if err != nil {
				t.Fatalf("%T re-marshal: %v", m, err)
			}
			m2 := m.ProtoReflect().New().Interface()
			if err := proto.Unmarshal(b, m2); err != nil || !proto.Equal(m, m2) {
				t.Fatalf("%T round trip: %v", m, err)
			}
		}
	})
}

// FuzzBatchValidate: a Batch from a peer is validated before use. Any
// bytes that unmarshal into a Batch either fail Validate with ErrBadBatch or
// can be walked entry by entry without a panic, the walk covering exactly
// Len entries and every payload byte.
func FuzzBatchValidate(f *testing.F) {
	b := &Batch{ProtocolVersion: ProtocolVersion, FirstCursor: 7}
	b.AddEntry(&Entry{Topic: "t", PayloadType: "x", Payload: []byte{1, 2}})
	b.AddEntry(&Entry{Topic: "t", PayloadType: "y", Payload: []byte{3}, OnlyNode: "n"})
	b.AddEntry(&Entry{Topic: "u", PayloadType: "x", Exclude: "e"})
	seed, _ := proto.Marshal(b)
	f.Add(seed)
	f.Add([]byte{0x30, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x60, 0x01}) // overflowing cursor
	f.Fuzz(func(t *testing.T, data []byte) {
		var b Batch
		if err := proto.Unmarshal(data, &b); err != nil {
			return
		}
		if err := b.Validate(); err != nil {
			if !errors.Is(err, ErrBadBatch) {
				t.Fatalf("Validate error %v does not wrap ErrBadBatch", err)
			}
			return
		}
		c := b.Entries()
		n, bytes := 0, 0
		for {
			_, ti, payload, _, _, ok := c.Next()
			if !ok {
				break
			}
			if int(ti) >= len(b.PayloadTypes) {
				t.Fatalf("entry %d: type index %d of %d", n, ti, len(b.PayloadTypes))
			}
			n++
			bytes += len(payload)
		}
		if n != b.Len() || bytes != len(b.Payloads) {
			t.Fatalf("walked %d entries / %d bytes, batch has %d / %d", n, bytes, b.Len(), len(b.Payloads))
		}
		if b.FirstCursor+uint64(n) < b.FirstCursor {
			t.Fatalf("valid batch overflows its cursor range")
		}
		for i := 0; i < n; i++ {
			if b.Entry(i) == nil {
				t.Fatalf("Entry(%d) is nil in a batch of %d", i, n)
			}
		}
	})
}

package messages_test

import (
	"bytes"
	"testing"

	"github.com/echopubsub/echopubsub/internal/prop"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/messages"
)

// TestBatchEncoderMatchesMarshal: for any header and entries, the encoder's
// bytes are proto.Marshal's for the Batch built with Add, byte for byte, and
// Encoded(those bytes) marshals to them again (what protoactor sends). An
// encoder reused after Reset gives the same as a new one.
func TestBatchEncoderMatchesMarshal(t *testing.T) {
	var reused messages.BatchEncoder
	prop.Check(t, func(t *prop.T) {
		str := prop.SampledFrom([]string{"", "a", "topic", "bench", "x/y/z", string(make([]byte, 130))})
		h := messages.BatchHeader{
			ProtocolVersion:     prop.Uint32Range(0, 300).Draw(t, "version"),
			PubsubName:          str.Draw(t, "name"),
			ProducerNode:        str.Draw(t, "node"),
			ProducerIncarnation: prop.Uint64().Draw(t, "inc"),
			Group:               prop.Uint32().Draw(t, "group"),
			FirstCursor:         prop.Uint64().Draw(t, "first"),
			Awaited:             prop.Bool().Draw(t, "awaited"),
		}
		want := &messages.Batch{ProtocolVersion: h.ProtocolVersion, PubsubName: h.PubsubName, ProducerNode: h.ProducerNode,
			ProducerIncarnation: h.ProducerIncarnation, Group: h.Group, FirstCursor: h.FirstCursor, Awaited: h.Awaited}
		var fresh messages.BatchEncoder
		reused.Reset()
		n := prop.IntRange(0, 200).Draw(t, "entries")
		var traces [][2]string
		for i := 0; i < n; i++ {
			topic, typ := str.Draw(t, "topic"), str.Draw(t, "type")
			// The length drawn on its own: a slice's is mostly small, and
			// sizes of 128 and up are the columns' two-byte varints.
			size := prop.IntRange(0, 300).Draw(t, "size")
			payload := prop.SliceOfN(prop.Byte(), size, size).Draw(t, "payload")
			exclude, only := str.Draw(t, "exclude"), str.Draw(t, "only")
			stored := prop.SampledFrom([]uint64{0, 1, 1 << 40}).Draw(t, "stored")
			// A trace context on some entries (Batch.SetTrace; AddTraced).
			tp := prop.SampledFrom([]string{"", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}).Draw(t, "traceparent")
			ts := prop.SampledFrom([]string{"", "congo=t61rcWkgMzE"}).Draw(t, "tracestate")
			want.Add(topic, typ, payload, exclude, only, stored)
			want.SetTrace(tp, ts)
			fresh.AddTraced(topic, typ, payload, exclude, only, stored, tp, ts)
			reused.AddTraced(topic, typ, payload, exclude, only, stored, tp, ts)
			if tp == "" {
				ts = ""
			}
			traces = append(traces, [2]string{tp, ts})
		}
		wire, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		got := fresh.Encode(h)
		if !bytes.Equal(got, wire) {
			t.Fatalf("encoder gave %x\nproto.Marshal gave %x", got, wire)
		}
		if again := reused.Encode(h); !bytes.Equal(again, wire) {
			t.Fatalf("reused encoder gave %x, want %x", again, wire)
		}
		if fresh.Len() != want.Len() {
			t.Fatalf("Len %d, want %d", fresh.Len(), want.Len())
		}
		sent, err := proto.Marshal(messages.Encoded(got))
		if err != nil || !bytes.Equal(sent, wire) {
			t.Fatalf("Encoded marshals to %x (%v), want %x", sent, err, wire)
		}
		var dec messages.Batch
		if err := proto.Unmarshal(wire, &dec); err != nil {
			t.Fatalf("decode: %v", err)
		}
		// (Not Validate: a drawn first cursor may overflow; the columns are
		// the encoder's own.)
		c := dec.Entries()
		for i := 0; ; i++ {
			if _, _, _, _, _, ok := c.Next(); !ok {
				break
			}
			if tp, ts := c.Trace(); string(tp) != traces[i][0] || string(ts) != traces[i][1] {
				t.Fatalf("entry %d: trace (%q, %q), want %q", i, tp, ts, traces[i])
			}
		}
	})
}

// TestBatchDecoded: a batch made by Encoded and handed over in process reads
// as the batch it encodes; an ordinary batch reads as itself; bad bytes are
// an error.
func TestBatchDecoded(t *testing.T) {
	var e messages.BatchEncoder
	e.Add("t", "echopubsub.test.v1.Stamp", []byte("abc"), "", "n2", 9)
	h := messages.BatchHeader{ProtocolVersion: messages.ProtocolVersion, PubsubName: "ps", ProducerNode: "n1", ProducerIncarnation: 3, Group: 1, FirstCursor: 5}
	got, err := messages.Encoded(e.Encode(h)).Decoded()
	if err != nil {
		t.Fatal(err)
	}
	if err := got.Validate(); err != nil || got.Len() != 1 || got.PubsubName != "ps" || got.FirstCursor != 5 {
		t.Fatalf("decoded %v (%v)", got, err)
	}
	if entry := got.Entry(0); entry.Topic != "t" || string(entry.Payload) != "abc" || entry.OnlyNode != "n2" {
		t.Fatalf("entry %v", entry)
	}
	plain := &messages.Batch{PubsubName: "ps", ProtocolVersion: messages.ProtocolVersion}
	if same, err := plain.Decoded(); err != nil || same != plain {
		t.Fatalf("an ordinary batch read as %p (%v), want itself %p", same, err, plain)
	}
	if _, err := messages.Encoded([]byte{0x12, 0x09}).Decoded(); err == nil {
		t.Fatal("a truncated encoding decoded without an error")
	}
}

// TestBatchWithABadTopicDecodes (issue 37): a batch whose topic is not
// UTF-8 (encoded by hand, as the producer's encoder does) decodes, where
// the names as proto3 strings failed the whole batch; BadTopics marks
// exactly that topic, and is nil (no allocation) for a good batch. The
// entries keep their bytes.
func TestBatchWithABadTopicDecodes(t *testing.T) {
	var enc messages.BatchEncoder
	enc.Add("room:ok", "x.Y", []byte("a"), "", "", 0)
	enc.Add("room:\xff", "x.Y", []byte("b"), "sub\xfe", "", 0)
	var got messages.Batch
	if err := proto.Unmarshal(enc.Encode(messages.BatchHeader{ProtocolVersion: 2, PubsubName: "p"}), &got); err != nil {
		t.Fatalf("a batch with a topic that is not UTF-8 does not decode: %v", err)
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := got.BadTopics()
	if len(bad) != 2 || bad[0] || !bad[1] {
		t.Fatalf("BadTopics = %v, want [false true]", bad)
	}
	if e := got.Entry(1); e.Topic != "room:\xff" || e.Exclude != "sub\xfe" || string(e.Payload) != "b" {
		t.Fatalf("entry 1 = %+v", e)
	}
	var good messages.Batch
	good.Add("room:ok", "x.Y", nil, "", "", 0)
	if good.BadTopics() != nil || testing.AllocsPerRun(10, func() { good.BadTopics() }) != 0 {
		t.Fatal("BadTopics of a good batch is not nil, or allocates")
	}
}

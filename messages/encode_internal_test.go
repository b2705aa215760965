package messages

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/internal/prop"
)

// TestBatchEncoderEncodingsStayPut: an encoding Encode returned is never
// written again, whatever the encoder does next (Reset and batches of any
// size, Encode again under another header, Add after Encode). Every
// encoding of a reused encoder, checked after all of them were made, is
// still proto.Marshal's bytes for its batch. A producer keeps its last
// batches' encodings to resend them (and protoactor may still be
// marshalling one): an encoding overwritten by the next batch would send
// other entries under a batch's cursors. The test also requires that both
// ways of encoding ran (the hand-over of the encoder's buffer and the copy),
// so that it cannot pass by never handing a buffer over.
func TestBatchEncoderEncodingsStayPut(t *testing.T) {
	handed, copied := 0, 0
	prop.Check(t, func(t *prop.T) {
		var e BatchEncoder
		type kept struct{ got, want []byte }
		var all []kept
		encode := func(b *Batch, h BatchHeader) {
			b.ProtocolVersion, b.PubsubName, b.FirstCursor = h.ProtocolVersion, h.PubsubName, h.FirstCursor
			want, err := proto.Marshal(b)
			if err != nil {
				t.Fatal(err)
			}
			was := e.handed
			got := e.Encode(h)
			if e.handed && !was {
				handed++
			} else {
				copied++
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("Encode gave %d bytes, proto.Marshal %d; they differ", len(got), len(want))
			}
			all = append(all, kept{got, want})
		}
		batches := prop.IntRange(1, 8).Draw(t, "batches")
		for i := 0; i < batches; i++ {
			e.Reset()
			var b Batch
			add := func(n int) {
				size := prop.IntRange(0, 300).Draw(t, "size")
				topic := prop.SampledFrom([]string{"a", "topic", "x/y/z"}).Draw(t, "topic")
				stored := prop.SampledFrom([]uint64{0, 7}).Draw(t, "stored")
				for j := 0; j < n; j++ {
					p := bytes.Repeat([]byte{byte(i*31 + j)}, size)
					e.Add(topic, "t.T", p, "", "", stored)
					b.Add(topic, "t.T", p, "", "", stored)
				}
			}
			add(prop.IntRange(0, 400).Draw(t, "entries"))
			h := BatchHeader{ProtocolVersion: 2, PubsubName: "ps", FirstCursor: uint64(i) + 1}
			encode(&b, h)
			switch prop.IntRange(0, 2).Draw(t, "then") {
			case 1: // the same entries under another header
				encode(&b, BatchHeader{ProtocolVersion: 1, PubsubName: "other-name", FirstCursor: 1 << 40})
			case 2: // more entries before the next Encode
				add(prop.IntRange(1, 50).Draw(t, "more"))
				encode(&b, h)
			}
		}
		for i, k := range all {
			if !bytes.Equal(k.got, k.want) {
				t.Fatalf("encoding %d of %d was written after Encode returned it", i+1, len(all))
			}
		}
	})
	if handed == 0 || copied == 0 {
		t.Fatalf("%d encodings handed the buffer over and %d copied: both ways must run", handed, copied)
	}
	t.Logf("%d encodings handed the buffer over, %d copied", handed, copied)
}

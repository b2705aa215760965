package messages_test

import (
	"fmt"
	"testing"

	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// batchSizes are the shapes of issue 8: a full batch (MaxBatchMessages
// 10,000) of 10 B and 200 B payloads.
var batchSizes = []struct{ entries, payload int }{{10_000, 10}, {10_000, 200}}

func benchEntries(n, size int) []*messages.Entry {
	es := make([]*messages.Entry, n)
	for i := range es {
		p := make([]byte, size)
		for j := range p {
			p[j] = byte(i + j)
		}
		es[i] = &messages.Entry{Topic: "bench", PayloadType: "echopubsub.test.v1.Stamp", Payload: p}
	}
	return es
}

// benchBatch builds a batch as the producer does: columns sized up front.
func benchBatch(es []*messages.Entry) *messages.Batch {
	size := 0
	for _, e := range es {
		size += len(e.Payload)
	}
	b := &messages.Batch{ProtocolVersion: messages.ProtocolVersion, PubsubName: "bench", ProducerNode: "127.0.0.1:7000",
		ProducerIncarnation: 1, FirstCursor: 1, TopicIndex: make([]uint32, 0, len(es)), TypeIndex: make([]uint32, 0, len(es)),
		PayloadSize: make([]uint32, 0, len(es)), Payloads: make([]byte, 0, size)}
	for _, e := range es {
		b.AddEntry(e)
	}
	return b
}

// BenchmarkBatchEncode is what a producer does per batch (once for all the
// nodes that need its range): encode it from buffered entries with the
// BatchEncoder ("encoder"); "marshal" is the build-and-proto.Marshal it
// replaced, for comparison.
func BenchmarkBatchEncode(b *testing.B) {
	for _, sz := range batchSizes {
		es := benchEntries(sz.entries, sz.payload)
		h := messages.BatchHeader{ProtocolVersion: messages.ProtocolVersion, PubsubName: "bench", ProducerNode: "127.0.0.1:7000",
			ProducerIncarnation: 1, FirstCursor: 1}
		var enc messages.BatchEncoder
		for _, way := range []struct {
			name   string
			encode func() ([]byte, error)
		}{
			{"encoder", func() ([]byte, error) {
				enc.Reset()
				for _, e := range es {
					enc.Add(e.Topic, e.PayloadType, e.Payload, e.Exclude, e.OnlyNode, 0)
				}
				return enc.Encode(h), nil
			}},
			{"marshal", func() ([]byte, error) { return proto.Marshal(benchBatch(es)) }},
		} {
			b.Run(fmt.Sprintf("entries=%d/payload=%dB/%s", sz.entries, sz.payload, way.name), func(b *testing.B) {
				var wire int
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					buf, err := way.encode()
					if err != nil {
						b.Fatal(err)
					}
					wire = len(buf)
				}
				b.StopTimer()
				secs := b.Elapsed().Seconds()
				b.ReportMetric(float64(sz.entries)*float64(b.N)/secs, "entries/s")
				b.ReportMetric(float64(wire)/float64(sz.entries), "wire-B/entry")
				b.SetBytes(int64(wire))
			})
		}
	}
}

// BenchmarkBatchDecode is what a receiving node does per batch before
// dispatch: unmarshal, validate, walk every entry.
func BenchmarkBatchDecode(b *testing.B) {
	for _, sz := range batchSizes {
		b.Run(fmt.Sprintf("entries=%d/payload=%dB", sz.entries, sz.payload), func(b *testing.B) {
			buf, err := proto.Marshal(benchBatch(benchEntries(sz.entries, sz.payload)))
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var m messages.Batch
				if err := proto.Unmarshal(buf, &m); err != nil {
					b.Fatal(err)
				}
				if err := m.Validate(); err != nil {
					b.Fatal(err)
				}
				n := 0
				for c := m.Entries(); ; n++ {
					if _, _, _, _, _, ok := c.Next(); !ok {
						break
					}
				}
				if n != sz.entries {
					b.Fatalf("walked %d entries", n)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(sz.entries)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
		})
	}
}

// BenchmarkPayloadDecode is the per-message decode a receiving node does
// once per entry whose topic has a local subscriber (a 10 B Stamp).
func BenchmarkPayloadDecode(b *testing.B) {
	typ, payload, err := messages.Encode(&testpb.Stamp{Seq: 1 << 48, Pad: make([]byte, 10)})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := messages.Decode(typ, payload); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decodes/s")
}

// BenchmarkBatchSend is what protoactor's remote does with a producer's
// encoded batch per node it goes to, before gRPC: "serialize" through
// Batch.Serialize (the encoding, not copied), "marshal" proto.Marshal of
// the Encoded batch as it did before (a copy of the encoding).
func BenchmarkBatchSend(b *testing.B) {
	for _, sz := range batchSizes {
		var enc messages.BatchEncoder
		for _, e := range benchEntries(sz.entries, sz.payload) {
			enc.Add(e.Topic, e.PayloadType, e.Payload, e.Exclude, e.OnlyNode, 0)
		}
		batch := messages.Encoded(enc.Encode(messages.BatchHeader{ProtocolVersion: messages.ProtocolVersion, PubsubName: "bench",
			ProducerNode: "127.0.0.1:7000", ProducerIncarnation: 1, FirstCursor: 1}))
		for _, way := range []struct {
			name string
			send func() ([]byte, error)
		}{
			{"serialize", func() ([]byte, error) {
				rs, err := batch.Serialize()
				if err != nil {
					return nil, err
				}
				out, _, err := remote.Serialize(rs, remote.DefaultSerializerID)
				return out, err
			}},
			{"marshal", func() ([]byte, error) {
				out, _, err := remote.Serialize(batch, remote.DefaultSerializerID)
				return out, err
			}},
		} {
			b.Run(fmt.Sprintf("entries=%d/payload=%dB/%s", sz.entries, sz.payload, way.name), func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					out, err := way.send()
					if err != nil {
						b.Fatal(err)
					}
					b.SetBytes(int64(len(out)))
				}
				b.ReportMetric(float64(sz.entries)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
			})
		}
	}
}

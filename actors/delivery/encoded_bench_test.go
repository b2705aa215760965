package delivery

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// BenchmarkDeliverFormat is a receiving node's cost per message for one
// subscriber of each format, the payload as a worker hands it over (bytes
// from a batch, the type resolved once): FormatMessage decodes it,
// FormatEncoded hands the bytes over in a *messages.Delivery.
func BenchmarkDeliverFormat(b *testing.B) {
	for _, pad := range []int{10, 200} {
		payload, err := proto.Marshal(&testpb.Stamp{Seq: 1 << 40, Pad: make([]byte, pad)})
		if err != nil {
			b.Fatal(err)
		}
		typ, err := messages.LookupType("echopubsub.test.v1.Stamp")
		if err != nil {
			b.Fatal(err)
		}
		for _, f := range []struct {
			name string
			f    Format
			meta bool
		}{{"decoded", FormatMessage, false}, {"metadata", FormatMessage, true}, {"encoded", FormatEncoded, false}} {
			b.Run(fmt.Sprintf("pad=%d/%s", pad, f.name), func(b *testing.B) {
				n := newBenchNode(b)
				res, err := n.system.Root.RequestFuture(n.registry, &Subscribe{PID: n.sink(), Topic: "t", Opts: SubOptions{Format: f.f, Meta: f.meta}}, 5e9).Result()
				if err != nil || res.(*Reply).Err != nil {
					b.Fatalf("subscribe: %v %v", err, res)
				}
				it := &Item{Topic: "t", PayloadType: "echopubsub.test.v1.Stamp", Payload: payload, Type: typ}
				b.ReportAllocs()
				for b.Loop() {
					it.Message = nil
					n.d.Deliver(it)
				}
			})
		}
	}
}

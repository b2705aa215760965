package delivery

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/echopubsub/echopubsub/internal/proc"
	"github.com/echopubsub/echopubsub/messages"
)

// countingType is a payload type that counts the messages made to decode
// into (one per decode).
type countingType struct {
	protoreflect.MessageType
	n *atomic.Int64
}

func (c countingType) New() protoreflect.Message {
	c.n.Add(1)
	return c.MessageType.New()
}

// recorder spawns a subscriber that records what it receives.
func (n *benchNode) recorder(t *testing.T) (*actor.PID, func() []interface{}) {
	var mu sync.Mutex
	var got []interface{}
	pid := n.system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case *messages.Delivery, *wrapperspb.StringValue:
			mu.Lock()
			got = append(got, m)
			mu.Unlock()
		}
	}, actor.WithMailbox(SubscriberMailbox())))
	return pid, func() []interface{} {
		mu.Lock()
		defer mu.Unlock()
		return append([]interface{}(nil), got...)
	}
}

func (n *benchNode) subscribeAs(t *testing.T, pid *actor.PID, topic string, f Format) {
	res, err := n.system.Root.RequestFuture(n.registry, &Subscribe{PID: pid, Topic: topic, Opts: SubOptions{Format: f}}, 5*time.Second).Result()
	if err != nil || res.(*Reply).Err != nil {
		t.Fatalf("subscribe: %v %v", err, res)
	}
}

// A topic whose subscribers all asked for the encoding is never decoded; a
// topic with both kinds is decoded once per message, whatever the number of
// subscribers that take the message.
func TestEncodedSubscriptionsAreNotDecoded(t *testing.T) {
	const n = 50
	for _, tc := range []struct {
		name    string
		formats []Format
		decodes int64
	}{
		{"encoded only", []Format{FormatEncoded, FormatEncoded}, 0},
		{"mixed", []Format{FormatEncoded, FormatMessage, FormatBoth, FormatMessage}, n},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := newBenchNode(t)
			var reads []func() []interface{}
			for _, f := range tc.formats {
				pid, read := node.recorder(t)
				node.subscribeAs(t, pid, "t", f)
				reads = append(reads, read)
			}
			var decodes atomic.Int64
			typ := messages.TypeOf(countingType{MessageType: (&wrapperspb.StringValue{}).ProtoReflect().Type(), n: &decodes})
			for i := 0; i < n; i++ {
				payload, err := proto.Marshal(wrapperspb.String(string(rune('a' + i%26))))
				if err != nil {
					t.Fatal(err)
				}
				node.d.Deliver(&Item{Topic: "t", PayloadType: "google.protobuf.StringValue", Payload: payload, Type: typ, Cursor: uint64(i + 1)})
			}
			for k, read := range reads {
				if !proc.Until(5*time.Second, time.Millisecond, func() bool { return len(read()) == n }) {
					t.Fatalf("subscriber %d (format %d) got %d messages, want %d", k, tc.formats[k], len(read()), n)
				}
				for i, m := range read() {
					want := string(rune('a' + i%26))
					switch tc.formats[k] {
					case FormatEncoded:
						d := m.(*messages.Delivery)
						var got wrapperspb.StringValue
						if d.Message != nil || proto.Unmarshal(d.Payload, &got) != nil || got.Value != want || d.Cursor != uint64(i+1) {
							t.Fatalf("encoded subscriber %d, message %d: %+v, want the bytes of %q, no Message", k, i, d, want)
						}
					case FormatBoth:
						d := m.(*messages.Delivery)
						if d.Message.(*wrapperspb.StringValue).Value != want || len(d.Payload) == 0 {
							t.Fatalf("FormatBoth subscriber %d, message %d: %+v, want %q and its bytes", k, i, d, want)
						}
					default:
						if m.(*wrapperspb.StringValue).Value != want {
							t.Fatalf("subscriber %d, message %d: %v, want %q", k, i, m, want)
						}
					}
				}
			}
			if got := decodes.Load(); got != tc.decodes {
				t.Fatalf("%d decodes for %d messages, want %d", got, n, tc.decodes)
			}
		})
	}
}

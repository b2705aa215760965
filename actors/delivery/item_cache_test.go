package delivery

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// An Item reused for several messages (a batch's entries, a take of writes)
// keeps its topic's entry, not its subscription list: a subscription added
// to the topic between two Delivers gets the second, and a run of another
// topic goes to that topic's subscribers.
func TestReusedItemSeesSubscriptionsAddedMeanwhile(t *testing.T) {
	n := newBenchNode(t)
	type count struct {
		n    atomic.Int64
		done atomic.Bool // the end marker, sent after every Deliver, was handled
	}
	counter := func() (*actor.PID, *count) {
		c := &count{}
		pid := n.system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
			switch ctx.Message().(type) {
			case *wrapperspb.UInt64Value:
				c.n.Add(1)
			case *wrapperspb.StringValue:
				c.done.Store(true)
			}
		}, actor.WithMailbox(SubscriberMailbox())))
		return pid, c
	}
	a, gotA := counter()
	b, gotB := counter()
	u, gotU := counter()
	n.subscribe(t, a, "t")
	n.subscribe(t, u, "u")
	it := &Item{Topic: "t", Message: &wrapperspb.UInt64Value{Value: 1}, Node: n.system.Address()}
	n.d.Deliver(it)
	n.subscribe(t, b, "t")
	n.d.Deliver(it)
	it.Topic = "u"
	n.d.Deliver(it)
	it.Topic = "t"
	n.d.Deliver(it)
	for _, pid := range []*actor.PID{a, b, u} { // behind what Deliver sent them, in their mailboxes
		n.system.Root.Send(pid, wrapperspb.String("end"))
	}
	deadline := time.Now().Add(10 * time.Second)
	for !gotA.done.Load() || !gotB.done.Load() || !gotU.done.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the end markers were not handled in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	if gotA.n.Load() != 3 || gotB.n.Load() != 2 || gotU.n.Load() != 1 {
		t.Fatalf("got a=%d b=%d u=%d, want 3, 2, 1", gotA.n.Load(), gotB.n.Load(), gotU.n.Load())
	}
}

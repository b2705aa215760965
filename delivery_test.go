package echopubsub_test

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// A worker that crashes in the middle of a batch never acknowledged it: the
// producer replays it, and the worker's table (which survives the restart)
// skips what was already delivered.
func TestWorkerCrashMidBatchIsReplayed(t *testing.T) {
	cfg := fastConfig()
	cfg.BatchInterval = 50 * time.Millisecond
	nodes := test.StartCluster(t, 2, cfg)
	c := nodes[1].Subscribe(t, "match")
	crashed := false
	nodes[1].Faults.SetOnDeliver(func(from string, cursor uint64) {
		if cursor == 2 && !crashed {
			crashed = true
			panic("test: worker crash mid-batch")
		}
	})
	for i := uint64(0); i < 6; i++ {
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	wantStamps(t, c, 0, 1, 2, 3, 4, 5)
	if !crashed {
		t.Fatal("the worker never crashed")
	}
}

// A worker that crashes right after acknowledging loses nothing: the
// messages were in the subscribers' mailboxes before the ack.
func TestWorkerAcksThenCrashesLosesNothing(t *testing.T) {
	nodes := test.StartCluster(t, 2, fastConfig())
	c := nodes[1].Subscribe(t, "match")
	crashed := false
	nodes[1].Faults.SetOnAcked(func(from string, req proto.Message) {
		if _, ok := req.(*messages.Batch); ok && !crashed {
			crashed = true
			panic("test: worker crash after ack")
		}
	})
	nodes[0].Broadcast(t, "match", stamp(1))
	wantStamps(t, c, 1)
	nodes[0].Broadcast(t, "match", stamp(2))
	wantStamps(t, c, 1, 2)
	if !crashed {
		t.Fatal("the worker never crashed")
	}
}

// With PoolSize > 1 each sender still sees its own stream in order on every
// node, though senders spread over several producers.
func TestPerSenderOrderWithPool(t *testing.T) {
	cfg := fastConfig()
	cfg.PoolSize = 4
	nodes := test.StartCluster(t, 2, cfg)
	c := nodes[1].Subscribe(t, "match", echopubsub.WithMetadata())
	const senders, each = 8, 40
	for i := uint64(1); i <= each; i++ {
		for s := 0; s < senders; s++ {
			from := actor.NewPID(nodes[0].Addr, "sender-"+string(rune('a'+s)))
			if err := nodes[0].PS.Broadcast(from, "match", &testpb.Stamp{Publisher: from.Id, Seq: i}); err != nil {
				t.Fatal(err)
			}
		}
	}
	test.Eventually(t, 10*time.Second, func() bool { return c.Len() == senders*each }, c.Describe)
	last := map[string]uint64{}
	groups := map[uint32]bool{}
	for _, m := range c.All() {
		d := m.(*messages.Delivery)
		s := d.Message.(*testpb.Stamp)
		if s.Seq != last[s.Publisher]+1 {
			t.Fatalf("sender %s: seq %d after %d", s.Publisher, s.Seq, last[s.Publisher])
		}
		last[s.Publisher] = s.Seq
		groups[d.Group] = true
	}
	if len(groups) < 2 {
		t.Fatalf("8 senders used %d producer(s); want them spread over the pool", len(groups))
	}
}

// A node whose worker is stalled does not delay delivery to the others:
// batches to different nodes are in flight concurrently.
func TestStalledNodeDoesNotDelayOthers(t *testing.T) {
	nodes := test.StartCluster(t, 3, fastConfig())
	fast := nodes[1].Subscribe(t, "match")
	slow := nodes[2].Subscribe(t, "match")
	gate := make(chan struct{})
	nodes[2].Faults.SetOnReceive(func(from string, req proto.Message) {
		if _, ok := req.(*messages.Batch); ok {
			<-gate
		}
	})
	for i := uint64(1); i <= 3; i++ {
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	wantStamps(t, fast, 1, 2, 3) // while node 2's worker is still blocked
	if n := len(slow.Stamps()); n != 0 {
		t.Fatalf("stalled node received %d messages before release", n)
	}
	nodes[2].Faults.SetOnReceive(nil)
	close(gate)
	wantStamps(t, slow, 1, 2, 3)
}

func TestBroadcastFromLocalBroadcastAndActorBroadcast(t *testing.T) {
	nodes := test.StartCluster(t, 2, fastConfig())
	a := nodes[0].Subscribe(t, "match")
	b := nodes[0].Subscribe(t, "match")
	r := nodes[1].Subscribe(t, "match")

	if err := nodes[0].PS.BroadcastFrom(a.PID, "match", stamp(1)); err != nil {
		t.Fatal(err)
	}
	wantStamps(t, b, 1)
	wantStamps(t, r, 1)

	if err := nodes[0].PS.LocalBroadcast("match", stamp(2)); err != nil {
		t.Fatal(err)
	}
	wantStamps(t, b, 1, 2)

	// An actor sends messages.Broadcast to ps.PID(), with Request for a result.
	payload, err := anypb.New(stamp(3))
	if err != nil {
		t.Fatal(err)
	}
	res, err := nodes[0].System.Root.RequestFuture(nodes[0].PS.PID(), &messages.Broadcast{Topic: "match", Message: payload}, 5*time.Second).Result()
	if err != nil || res.(*messages.BroadcastResult).Error != "" {
		t.Fatalf("actor broadcast: %v %v", res, err)
	}
	wantStamps(t, b, 1, 2, 3)
	wantStamps(t, r, 1, 3)
	wantStamps(t, a, 2, 3) // excluded from 1 only

	bad, _ := nodes[0].System.Root.RequestFuture(nodes[0].PS.PID(), &messages.Broadcast{Topic: "match"}, 5*time.Second).Result()
	if bad.(*messages.BroadcastResult).Error == "" {
		t.Fatal("a Broadcast without a message was accepted")
	}
}

func TestSubscribeTwiceDeliversTwiceAndUnsubscribe(t *testing.T) {
	nodes := test.StartCluster(t, 2, fastConfig())
	c := nodes[1].Subscribe(t, "match")
	if err := nodes[1].PS.Subscribe(c.PID, "match"); err != nil {
		t.Fatal(err)
	}
	nodes[0].Broadcast(t, "match", stamp(1))
	wantStamps(t, c, 1, 1)
	if err := nodes[1].PS.Unsubscribe(c.PID, "match"); err != nil {
		t.Fatal(err)
	}
	other := nodes[1].Subscribe(t, "match") // a marker that the next message arrived
	nodes[0].Broadcast(t, "match", stamp(2))
	wantStamps(t, other, 2)
	wantStamps(t, c, 1, 1)
}

func TestStopIsIdempotent(t *testing.T) {
	nodes := test.StartCluster(t, 2, fastConfig())
	nodes[0].StopPubSub(t)
	nodes[0].StopPubSub(t)
	if err := nodes[0].PS.Broadcast(nil, "match", stamp(1)); err != echopubsub.ErrStopped {
		t.Fatalf("Broadcast after Stop: %v, want ErrStopped", err)
	}
}

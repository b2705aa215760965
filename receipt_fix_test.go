package echopubsub_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
)

// A receipt with AwaitStored says stored only where the node's store
// appended the message: node 1's store fails (its worker still delivers and
// acks, and writes a gap row later), so node 1 is NotStored, never
// Delivered-and-stored; node 2 runs without a store: NotStored always;
// node 0's store works: Delivered and Stored.
func TestBroadcastAwaitStoredFailingStore(t *testing.T) {
	cfg := replayConfig()
	nodes := test.StartCluster(t, 3, cfg)
	failing := test.NewFailingStore()
	for i, nd := range nodes {
		nd.StopPubSub(t)
		opts := []echopubsub.Option{staticOf(addrsOf(nodes))}
		switch i {
		case 0:
			opts = append(opts, echopubsub.WithDurableTopics("room:*"), test.WithMemStore())
		case 1:
			opts = append(opts, echopubsub.WithDurableTopics("room:*"), test.WithMemStore(), echopubsub.WithStore(failing))
		} // node 2: a member without a store
		nd.Start(t, cfg, opts...)
	}
	r, err := nodes[0].PS.BroadcastAwait(awaitCtx(t, 10*time.Second), nil, "room:1", stamp(1), echopubsub.AwaitStored())
	if err != nil {
		t.Fatalf("BroadcastAwait(AwaitStored), both stores working: %v (receipt %+v)", err, r)
	}
	wantStatus(t, r, echopubsub.Delivered, nodes[:2]...)
	wantStatus(t, r, echopubsub.NotStored, nodes[2])

	failing.Fail(fmt.Errorf("write store file: %w", syscall.ENOSPC))
	r, err = nodes[0].PS.BroadcastAwait(awaitCtx(t, 10*time.Second), nil, "room:1", stamp(2), echopubsub.AwaitStored())
	if err != nil {
		t.Fatalf("BroadcastAwait(AwaitStored), node 1's store failing: %v (receipt %+v)", err, r)
	}
	wantStatus(t, r, echopubsub.Delivered, nodes[0])
	wantStatus(t, r, echopubsub.NotStored, nodes[1:]...)
	for i, nd := range nodes {
		k := indexOf(r, nd.Addr)
		if k < 0 || r.Nodes[k].Stored != (i == 0) {
			t.Fatalf("receipt with node 1's store failing: node %d Stored %v, want %v; receipt %+v", i, k >= 0 && r.Nodes[k].Stored, i == 0, r)
		}
	}
	if s := echopubsub.NotStored.String(); s != "not_stored" {
		t.Fatalf("NotStored.String() = %q", s)
	}
}

// A node whose batch ack was lost, and which then fell behind the buffer,
// is not reported Expired for a message it got: node 2's worker holds the
// batch of stamp 1 until node 0's call for it timed out (node 2 shows
// unreachable), then delivers it; its answer is lost, as are the batches
// after it (dropped on receipt), while eleven more messages overwrite the
// buffer. The Expire node 0 then sends is answered with node 2's own
// cursor, past stamp 1: the receipt says delivered, and node 2's
// subscriber has stamp 1.
func TestBroadcastAwaitLostAckThenExpiredIsDelivered(t *testing.T) {
	cfg := fastConfig()
	cfg.BufferSize = 10
	nodes := test.StartCluster(t, 3, cfg)
	c := nodes[2].Subscribe(t, "match")
	waitJoined(t, nodes)
	gate := make(chan struct{})
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(gate) }) })
	var held atomic.Bool
	from := nodes[0].Addr
	nodes[2].Faults.SetOnReceive(func(node string, req proto.Message) {
		if _, ok := req.(*messages.Batch); !ok || node != from {
			return
		}
		if held.CompareAndSwap(false, true) {
			<-gate // the batch of stamp 1: delivered once released
			return
		}
		nodes[2].Faults.DropReceived(1) // every later batch is lost
	})
	ps := nodes[0].PS
	written := nodes[0].Stats(t).WriteCursor
	done := make(chan echopubsub.Receipt, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := ps.BroadcastAwait(ctx, nil, "match", stamp(1))
		if err != nil {
			t.Errorf("BroadcastAwait of stamp 1: %v (receipt %+v)", err, r)
		}
		done <- r
	}()
	// Stamp 1 must be written before the messages that overwrite it.
	test.Eventually(t, 5*time.Second, func() bool { return nodes[0].Stats(t).WriteCursor == written+1 },
		test.Sprintf("stamp 1 written"))
	// Node 0's call holding stamp 1 timed out (its answer will be lost):
	// a receipt taken now says node 2 is unreachable.
	seq := uint64(1)
	test.Eventually(t, 10*time.Second, func() bool {
		seq++
		r, _ := ps.BroadcastAwait(awaitCtx(t, 100*time.Millisecond), nil, "match", stamp(seq), echopubsub.AwaitQuorum(2))
		st, _ := r.Status(nodes[2].Addr)
		return st == echopubsub.Unreachable
	}, test.Sprintf("node 2 unreachable for node 0"))
	for i := 0; i < 11; i++ { // overwrite the buffer past stamp 1
		seq++
		if _, err := ps.BroadcastAwait(awaitCtx(t, 10*time.Second), nil, "match", stamp(seq), echopubsub.AwaitQuorum(2)); err != nil {
			t.Fatalf("BroadcastAwait %d, quorum 2: %v", seq, err)
		}
	}
	release.Do(func() { close(gate) })
	var r echopubsub.Receipt
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("BroadcastAwait of stamp 1 did not return")
	}
	wantStatus(t, r, echopubsub.Delivered, nodes...)
	test.Eventually(t, 10*time.Second, func() bool { return len(c.Stamps()) > 0 && c.Stamps()[0] == 1 },
		func() string { return "node 2's subscriber got stamp 1: " + c.Describe() })
}

// A node that restarted after the message was written is not owed it: node
// 1 is cut when stamp 1 is written, restarts (a new pubsub), and is joined
// past stamp 1 once healed. The receipt says NotOwed for node 1, and its
// new subscriber is told nothing about stamp 1 (no CursorExpired).
func TestBroadcastAwaitRestartedNodeNotOwed(t *testing.T) {
	cfg := fastConfig()
	nodes := test.StartCluster(t, 2, cfg)
	waitJoined(t, nodes)
	test.Partition(nodes, 1)
	ps := nodes[0].PS
	written := nodes[0].Stats(t).WriteCursor
	done := make(chan echopubsub.Receipt, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := ps.BroadcastAwait(ctx, nil, "match", stamp(1))
		if err != nil {
			t.Errorf("BroadcastAwait of stamp 1: %v (receipt %+v)", err, r)
		}
		done <- r
	}()
	test.Eventually(t, 5*time.Second, func() bool { return nodes[0].Stats(t).WriteCursor == written+1 },
		test.Sprintf("stamp 1 written"))
	nodes[1].StopPubSub(t)
	nodes[1].Start(t, cfg, staticOf(addrsOf(nodes)))
	c := nodes[1].Subscribe(t, "match")
	test.Heal(nodes)
	var r echopubsub.Receipt
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("BroadcastAwait of stamp 1 did not return after node 1 restarted and was healed")
	}
	wantStatus(t, r, echopubsub.Delivered, nodes[0])
	wantStatus(t, r, echopubsub.NotOwed, nodes[1])
	// Something published after the join reaches it, with no notice before.
	if _, err := ps.BroadcastAwait(awaitCtx(t, 10*time.Second), nil, "match", stamp(2)); err != nil {
		t.Fatalf("BroadcastAwait of stamp 2: %v", err)
	}
	wantStamps(t, c, 2)
	if n := test.Count[*messages.CursorExpired](c); n != 0 {
		t.Fatalf("node 1's new subscriber told CursorExpired %d times: %s", n, c.Describe())
	}
}

//go:build !race

package echopubsub_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub"

	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
)

// Batches [0,1) and, the first time, [2,3) are lost on the way to node 1;
// [1,2) is refused (OUT_OF_ORDER at 0) and the producer resends [0,1),
// [1,2), [2,3). The worker delivers them and answers once, cumulatively:
// OK at 3, naming batch 2. Every message arrives, and no call may fail: the
// answer covers every flight that ends at or below 3, the lost [2,3) of the
// earlier epoch and the three resent ones alike. (Found in review: matched
// to the lost [2,3) alone, the resent flights stayed in flight until
// onAckCheck gave up on them after CallTimeout: a failed call, a warning,
// a RetryInterval pause, for a peer that had answered everything.)
func TestCumulativeAnswerLeavesNoOrphanFlights(t *testing.T) {
	cfg := fastConfig()
	cfg.BatchInterval = 0
	cfg.MaxBatchMessages = 1 // one batch per message: 3 batches in flight
	cfg.MaxBatchesInFlight = 4
	nodes := test.StartCluster(t, 2, cfg)
	test.WaitJoined(t, nodes)
	c := nodes[1].Subscribe(t, "match")

	var mu sync.Mutex
	dropped := map[uint64]bool{}
	// The story needs all three batches sent before node 1 answers any:
	// were [0,1) and [1,2) refused and resent first (the test goroutine
	// descheduled between two Broadcasts did that), the first [2,3) would
	// be lost with nothing sent after it, which only CallTimeout reveals: a
	// failed call this test is not about. Node 1's worker waits at batch 0
	// until node 0's producer has taken all three writes (a full batch
	// each, sent as it is taken).
	taken := make(chan struct{})
	var takenOnce sync.Once
	allTaken := func() { takenOnce.Do(func() { close(taken) }) }
	t.Cleanup(allTaken)
	nodes[1].Faults.SetOnReceive(func(_ string, req proto.Message) {
		b, ok := req.(*messages.Batch)
		if !ok {
			return
		}
		if b.FirstCursor == 0 {
			<-taken
		}
		mu.Lock()
		defer mu.Unlock()
		if (b.FirstCursor == 0 || b.FirstCursor == 2) && !dropped[b.FirstCursor] {
			dropped[b.FirstCursor] = true
			nodes[1].Faults.DropReceived(1) // this request: lost on the way
		}
	})
	var failures atomic.Int64
	var lastErr atomic.Value
	nodes[0].System.EventStream.Subscribe(func(evt interface{}) {
		if f, ok := evt.(*messages.SyncFailed); ok && f.Node == nodes[1].Addr {
			failures.Add(1)
			lastErr.Store(f.Err)
		}
	})
	for i := uint64(0); i < 3; i++ {
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	test.Eventually(t, 5*time.Second, func() bool { return nodes[0].Stats(t).WriteCursor == 3 }, test.Sprintf("writes not taken"))
	allTaken()
	wantStamps(t, c, 0, 1, 2)
	mu.Lock()
	if !dropped[0] || !dropped[2] {
		t.Fatalf("batches 0 and 2 not both dropped: %v", dropped)
	}
	mu.Unlock()
	test.Never(t, 2*cfg.CallTimeout, func() bool { return failures.Load() > 0 },
		func() string {
			return "a call to node 1 failed although it answered every batch it got: " + lastErr.Load().(string)
		})
}

// A worker's answer goes to the producer's own, well-known PID
// (echopubsub/<name>/g<n>/producer), and the guard passes any BatchAck to
// it that names a member (checkAck): without TLS an ack carries no sender
// to check, so anyone who reaches the port (here a protoactor node that is
// no member) can send one naming node 1. The producer takes an answer only
// if it names this producer incarnation, which only members were sent (in
// batches): a forged one, in an earlier build's form or naming a batch,
// must not settle node 1's receipt as Delivered while node 1's worker has
// delivered nothing (it is blocked). (Found in review: the first version of
// cumulative answers took it.)
func TestForgedAckToProducerIsNoReceipt(t *testing.T) {
	h := startHostileTarget(t)
	test.WaitJoined(t, h.nodes)
	addr0, addr1 := h.nodes[0].Addr, h.nodes[1].Addr
	gate, got := make(chan struct{}), make(chan struct{}, 16)
	t.Cleanup(func() { close(gate) }) // runs before the nodes stop
	h.nodes[1].Faults.SetOnReceive(func(_ string, req proto.Message) {
		if _, ok := req.(*messages.Batch); ok {
			got <- struct{}{}
			<-gate // node 1's worker is stuck: it delivers nothing
		}
	})
	done := awaitAsync(h.nodes[0].PS, 3*time.Second, "match", stamp(1))
	select {
	case <-got: // the batch is in flight to node 1
	case <-time.After(5 * time.Second):
		t.Fatal("node 1's worker never got the batch")
	}
	system := hostilePeer(t)
	forgeAnswers(system, actor.NewPID(addr0, "echopubsub/scores/g0/producer"), addr1)
	res := <-done
	if st, _ := res.r.Status(addr1); st == echopubsub.Delivered && h.cs[1].Len() == 0 {
		t.Fatalf("receipt says node 1 Delivered (err %v) while its worker delivered nothing: a forged ack from a non-member was taken", res.err)
	}
}

// The forged answers of TestForgedAckToProducerIsNoReceipt must not make
// a silent gap either. With a window of one batch, message 0 is in flight
// to node 1 (its worker blocked) and 1 and 2 wait for the window. Taken
// for batch 0, a forged answer would move node 1's read cursor to the
// write cursor (3), and 1 and 2 would never be sent: node 1's subscriber
// would get 0 only, and no CursorExpired (what the first version did).
func TestForgedAckMakesNoSilentGap(t *testing.T) {
	cfg := fastConfig()
	cfg.BatchInterval = 0
	cfg.MaxBatchMessages = 1
	cfg.MaxBatchesInFlight = 1 // stop-and-wait: 1 and 2 wait for batch 0's answer
	nodes := test.StartCluster(t, 2, cfg)
	test.WaitJoined(t, nodes)
	c := nodes[1].Subscribe(t, "match")
	gate, got := make(chan struct{}), make(chan struct{}, 16)
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(gate) }) })
	nodes[1].Faults.SetOnReceive(func(_ string, req proto.Message) {
		if b, ok := req.(*messages.Batch); ok && b.FirstCursor == 0 {
			got <- struct{}{}
			<-gate
		}
	})
	for i := uint64(0); i < 3; i++ {
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("node 1's worker never got batch 0")
	}
	test.Eventually(t, 5*time.Second, func() bool { return nodes[0].Stats(t).WriteCursor >= 3 }, test.Sprintf("writes not taken"))
	system := hostilePeer(t)
	forgeAnswers(system, actor.NewPID(nodes[0].Addr, "echopubsub/scores/g0/producer"), nodes[1].Addr)
	// Everything the hostile peer sent is in node 0's mailboxes before
	// node 1 answers batch 0 (one connection, in order: see barrier).
	barrier(t, system, nodes[0].Addr)
	once.Do(func() { close(gate) })
	wantStamps(t, c, 0, 1, 2)
}

// forgeAnswers sends producer two forged OK answers naming worker node
// worker, far past any cursor: one in an earlier build's form (no
// incarnation, no batch named) and one naming batch 0 of a producer
// incarnation the forger guessed.
func forgeAnswers(system *actor.ActorSystem, producer *actor.PID, worker string) {
	system.Root.Send(producer, &messages.BatchAck{Status: messages.AckStatus_ACK_STATUS_OK, NextCursor: 1 << 40, WorkerNode: worker, Stored: true})
	system.Root.Send(producer, &messages.BatchAck{Status: messages.AckStatus_ACK_STATUS_OK, NextCursor: 1 << 40, WorkerNode: worker, Stored: true,
		ProducerIncarnation: 1, BatchFirstCursor: proto.Uint64(0)})
}

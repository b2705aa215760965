package echopubsub_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
)

// TestCatchUpLargerThanHardQueueKeepsAPromptSession: node 1 is cut off
// while node 0 publishes 2,000 messages (well within the buffer); on the
// heal node 1's worker gets them as a backlog, five times HardQueue. The
// session's owner acknowledges every envelope as it arrives: it keeps up,
// so it is never closed (HARD_QUEUE) nor warned (SoftQueue); it gets all
// 2,000 in order, then live traffic. A plain subscriber on the same node
// gets the backlog too, without waiting for the session.
func TestCatchUpLargerThanHardQueueKeepsAPromptSession(t *testing.T) {
	const cut = 2000
	cfg := sessionConfig(200, 400)
	cfg.BufferSize = 10_000
	nodes := test.StartCluster(t, 2, cfg)
	var sid atomic.Value // the session's id, set before anything is published
	var ackErr atomic.Value
	o := spawnOwner(t, nodes[1], func(e *echopubsub.Envelope) {
		if _, err := nodes[1].PS.Ack(sid.Load().(string), e.DeliveryID); err != nil {
			ackErr.CompareAndSwap(nil, fmt.Sprintf("ack %d: %v", e.DeliveryID, err))
		}
	})
	id := openSession(t, nodes[1], o, []string{"match"})
	sid.Store(id)
	c := nodes[1].Subscribe(t, "match")
	// The backlog must build on node 0 for a node it had joined: the
	// catch-up is then one stream of batches, not a join's history.
	waitJoined(t, nodes)
	nodes[0].Broadcast(t, "match", stamp(1))
	waitEnvelopes(t, o, 1)
	nodes[0].Faults.Cut(nodes[1].Addr)
	for i := uint64(2); i <= cut+1; i++ {
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	test.Eventually(t, 5*time.Second, func() bool { return nodes[0].NodeStats(t, nodes[1].Addr).Lag == cut },
		test.Sprintf("node 0 holds %d for node 1", cut))
	nodes[0].Faults.HealAll()
	test.Eventually(t, 20*time.Second, func() bool { return len(o.envelopes()) >= cut+1 || countOf[*messages.SessionClosed](o) > 0 },
		func() string { return fmt.Sprintf("owner got %d envelopes: %s", len(o.envelopes()), o.describe()) })
	if n := countOf[*messages.SessionClosed](o); n > 0 {
		t.Fatalf("a session that acks at once was closed after %d envelopes (%v): %v", len(o.envelopes()), ackErr.Load(), o.notices())
	}
	nodes[0].Broadcast(t, "match", stamp(cut+2))
	waitEnvelopes(t, o, cut+2)
	if n := o.notices(); len(n) != 0 {
		t.Fatalf("a session that acks at once was told %v (after %d envelopes)", n, len(o.envelopes()))
	}
	for i, s := range o.seqs() {
		if s != uint64(i+1) {
			t.Fatalf("envelope %d carries #%d: %v", i, s, o.seqs()[:i+1])
		}
	}
	if err := ackErr.Load(); err != nil {
		t.Fatal(err)
	}
	if got := len(o.envelopes()); got != cut+2 {
		t.Fatalf("owner got %d envelopes, want %d", got, cut+2)
	}
	test.Eventually(t, 10*time.Second, func() bool { return len(c.Stamps()) == cut+2 }, c.Describe)
	test.Eventually(t, 5*time.Second, func() bool { return nodes[1].PS.Pending(id) == 0 },
		test.Sprintf("pending %d, want 0", nodes[1].PS.Pending(id)))
}

// TestHeldSessionHoldsNothingElse: a session's owner that has not acked
// yet holds the session at SoftQueue (RoomWait is long here: it does not
// stall). A plain subscriber on the same node gets all 501 meanwhile: the
// node's stream does not wait for the session. Each AckMany of what the
// owner holds makes room, and the session gets the rest, in order, 50 at a
// time, with no notice: nothing lost, no pressure, never closed.
func TestHeldSessionHoldsNothingElse(t *testing.T) {
	const n, soft = 501, 50 // the last one is held with nothing behind it: only the wake-up brings it
	cfg := sessionConfig(soft, 100)
	cfg.RoomWait = time.Minute
	nd := test.StartCluster(t, 1, cfg)[0]
	o := spawnOwner(t, nd, nil)
	id := openSession(t, nd, o, []string{"match"})
	c := nd.Subscribe(t, "match")
	for i := uint64(1); i <= n; i++ {
		nd.Broadcast(t, "match", stamp(i))
	}
	test.Eventually(t, 10*time.Second, func() bool { return len(c.Stamps()) == n }, c.Describe)
	acked := 0
	for acked < n {
		want := min(acked+soft, n)
		waitEnvelopes(t, o, want)
		if got := len(o.envelopes()); got != want || nd.PS.Pending(id) != want-acked {
			t.Fatalf("owner holds %d envelopes (pending %d) after acking %d: want %d, held at SoftQueue %d", got, nd.PS.Pending(id), acked, want, soft)
		}
		var ids []uint64
		for _, e := range o.envelopes()[acked:] {
			ids = append(ids, e.DeliveryID)
		}
		if _, err := nd.PS.AckMany(id, ids); err != nil {
			t.Fatal(err)
		}
		acked = want
	}
	for i, s := range o.seqs() {
		if s != uint64(i+1) {
			t.Fatalf("envelope %d carries #%d", i, s)
		}
	}
	if nt := o.notices(); len(nt) != 0 {
		t.Fatalf("a session held for room was told %v", nt)
	}
}

func TestRoomWaitMustNotBeNegative(t *testing.T) {
	cfg := echopubsub.DefaultConfig("x")
	if cfg.RoomWait != time.Second {
		t.Fatalf("default RoomWait %v, want 1s", cfg.RoomWait)
	}
	cfg.RoomWait = -time.Millisecond
	if err := cfg.Validate(); err == nil || err.Error() != "echopubsub: config RoomWait must be >= 0, got -1ms" {
		t.Fatalf("Validate: %v", err)
	}
	cfg.RoomWait = 0 // pacing off
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

package echopubsub_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
)

// The Expired event and cursor_expired.sent count the CursorExpired a peer's
// worker says it told: once, even when the join that told it was answered
// after the producer gave up on the call (it learns it from the probe that
// follows, which finds the join held), and never for a join the worker
// already held.
func TestExpiredCountedAsToldWhenTheJoinAnswerIsLate(t *testing.T) {
	cfg := fastConfig()
	cfg.BufferSize = 10
	log := test.Logger(t, zerolog.InfoLevel)
	m0 := newMeter(t)
	nodes, addrs := test.NewNodes(t, 2, log)
	ev := watchEvents(t, nodes[0])
	nodes[0].Faults.Cut(nodes[1].Addr)
	var slowed atomic.Bool
	nodes[1].Faults.SetOnReceive(func(_ string, req proto.Message) {
		if r, ok := req.(*messages.Register); ok && r.Join && r.MissedWrites && slowed.CompareAndSwap(false, true) {
			// A slow worker (the fault under test, not a settling wait):
			// the join is applied after the producer's call timed out.
			time.Sleep(2 * cfg.CallTimeout)
		}
	})
	nodes[0].Start(t, cfg, staticOf(addrs), echopubsub.WithMeterProvider(m0.mp))
	nodes[1].Start(t, cfg, staticOf(addrs))
	c := nodes[1].Subscribe(t, "match")
	for i := uint64(1); i <= 15; i++ { // past the buffer before node 1 is reached
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	test.Eventually(t, 5*time.Second, func() bool { return nodes[0].Stats(t).WriteCursor == 15 }, test.Sprintf("written"))
	test.Heal(nodes)
	test.Eventually(t, 10*time.Second, func() bool { return test.Count[*messages.CursorExpired](c) == 1 }, c.Describe)
	m0.eventually(t, "echopubsub.cursor_expired.sent", func(v int64) bool { return v == 1 }, "1")
	test.Eventually(t, 5*time.Second, func() bool { return ev.count("expired") == 1 }, test.Sprintf("%d Expired events, want 1", ev.count("expired")))
	if !slowed.Load() {
		t.Fatal("the join was never slowed: the test did not test the late answer")
	}
	nodes[0].Broadcast(t, "match", stamp(16))
	wantStamps(t, c, 16)
	if n := m0.value(t, "echopubsub.cursor_expired.sent"); n != 1 || ev.count("expired") != 1 || test.Count[*messages.CursorExpired](c) != 1 {
		t.Fatalf("cursor_expired.sent %d, Expired events %d, told %d: want 1 each", n, ev.count("expired"), test.Count[*messages.CursorExpired](c))
	}
}

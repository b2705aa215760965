package echopubsub_test

import (
	"testing"
	"time"

	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
)

// An answer held for AckInterval keeps the node's read cursor back. A
// node a buffer behind gets nothing more until its answers come (what it
// is owed may be overwritten before it is sent), and what was overwritten
// is lost to it: it is told CursorExpired, however promptly it took every
// batch. So a batch that brings what waits for an answer to half the
// capacity warning's lag (CapacityWarningThreshold of BufferSize: 200
// here) is answered at once. The buffer holds 1,000 messages, an answer
// may be held 10s, and 3,000 messages go in bursts of 50 every 50ms (the
// bursts make batches large enough that maxFlights does not close the
// window first): held for the interval, node 1's answers stop its stream
// for 10s and it loses messages it was sent in time; answered at the
// share, every message arrives in order, within the 10s wantStamps gives,
// with no notice. The share leaves 800 messages, 800ms of this stream, for
// an answer's way back on a loaded machine.
func TestHeldAnswersStayWithinTheBuffer(t *testing.T) {
	cfg := fastConfig()
	cfg.BatchInterval = 0
	cfg.BufferSize = 1000
	cfg.CallTimeout = 100 * time.Second
	cfg.AckInterval = cfg.CallTimeout / 10
	nodes := test.StartCluster(t, 2, cfg)
	test.WaitJoined(t, nodes)
	c := nodes[1].Subscribe(t, "match")
	tick := time.NewTicker(50 * time.Millisecond) // a steady stream of bursts, as a publisher's
	defer tick.Stop()
	const n, each = 3000, 50
	for i := uint64(1); i <= n; i++ {
		if i%each == 1 {
			<-tick.C
		}
		if err := nodes[0].PS.Broadcast(nil, "match", stamp(i)); err != nil {
			t.Fatal(err)
		}
	}
	wantStamps(t, c, seqs(1, n)...)
	if k := test.Count[*messages.CursorExpired](c); k != 0 {
		t.Fatalf("node 1 was told CursorExpired %d times for messages it received: %s", k, c.Describe())
	}
}

// With a BatchInterval a part batch waits for the batches in flight to its
// node to be answered (partWaits), so an answer held for AckInterval held
// the next part batch, and every message in it, for the interval: the
// subscribers, not only the producer's buffer, saw the wait (at the default
// 10ms AckInterval, up to 10ms on every message of a BatchInterval under
// it). Here the interval is 20s: s1's answer goes at once (the first after
// a quiet interval), s2's would be held, and s3, a plain Broadcast, must
// still arrive within the 10s wantStamps gives (BatchInterval 10ms).
func TestHeldAnswerDoesNotHoldTheNextPartBatch(t *testing.T) {
	cfg := fastConfig() // BatchInterval 10ms
	cfg.CallTimeout = 200 * time.Second
	cfg.AckInterval = cfg.CallTimeout / 10
	nodes := test.StartCluster(t, 2, cfg)
	c := nodes[1].Subscribe(t, "match")
	for i := uint64(1); i <= 3; i++ {
		if err := nodes[0].PS.Broadcast(nil, "match", stamp(i)); err != nil {
			t.Fatal(err)
		}
		wantStamps(t, c, seqs(1, i)...) // on node 1: its batch is delivered, its answer sent or held
	}
}

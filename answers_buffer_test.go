package echopubsub_test

import (
	"testing"
	"time"

	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
)

// An answer held for AckInterval keeps the node's read cursor back, and the
// buffer overwrites what a node has not acknowledged in time, however
// promptly it was delivered. A batch that brings what waits for an answer
// to half the capacity warning's lag (CapacityWarningThreshold of
// BufferSize: 200 here) is answered at once. The buffer holds 1,000
// messages, an answer may be held 3s, and 2,000 messages go at up to one
// per millisecond: held for the interval, node 1's answers would leave it
// 1,000 behind within two seconds and it would be told CursorExpired for
// messages it had; answered at the share, every message arrives in order
// with no notice.
func TestHeldAnswersStayWithinTheBuffer(t *testing.T) {
	cfg := fastConfig()
	cfg.BatchInterval = 0
	cfg.BufferSize = 1000
	cfg.CallTimeout = 30 * time.Second
	cfg.AckInterval = cfg.CallTimeout / 10
	nodes := test.StartCluster(t, 2, cfg)
	test.WaitJoined(t, nodes)
	c := nodes[1].Subscribe(t, "match")
	tick := time.NewTicker(time.Millisecond) // a steady stream, as a publisher's
	defer tick.Stop()
	const n = 2000
	for i := uint64(1); i <= n; i++ {
		<-tick.C
		if err := nodes[0].PS.Broadcast(nil, "match", stamp(i)); err != nil {
			t.Fatal(err)
		}
	}
	wantStamps(t, c, seqs(1, n)...)
	if k := test.Count[*messages.CursorExpired](c); k != 0 {
		t.Fatalf("node 1 was told CursorExpired %d times for messages it received: %s", k, c.Describe())
	}
}

package echopubsub_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// A full batch (MaxBatchMessages or MaxBatchBytes worth) goes as soon as it
// is buffered and the window has room, and whenever an ack frees a slot:
// BatchInterval bounds only how long a part batch waits. With an interval
// far longer than the test, the whole batches arrive at once. The first
// batch is held at the receiving worker until every write is buffered, so
// the batches behind it can only go on acks.
func TestFullBatchesDoNotWaitForBatchInterval(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		maxMsgs, maxBytes     int
		window, n, pad, whole int // whole: the messages in full batches, at least
	}{
		// 10 batches of exactly 100; a window of 1: batches 2 to 10 go on acks.
		{name: "MaxBatchMessages", maxMsgs: 100, maxBytes: 1 << 20, window: 1, n: 1000, pad: 10, whole: 1000},
		// Each message counts over 100 bytes: the last, part batch holds
		// fewer than 4096/100 messages and may wait for the interval.
		{name: "MaxBatchBytes", maxMsgs: 10_000, maxBytes: 4096, window: 4, n: 1000, pad: 100, whole: 1000 - 4096/100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := fastConfig()
			cfg.BatchInterval = time.Minute
			cfg.BufferSize = 10_000
			cfg.CallTimeout = 3 * time.Second // the held first batch must not time out (it is held for milliseconds)
			cfg.MaxBatchMessages, cfg.MaxBatchBytes, cfg.MaxBatchesInFlight = tc.maxMsgs, tc.maxBytes, tc.window
			nodes := test.StartCluster(t, 2, cfg)
			c := nodes[1].Subscribe(t, "match")
			// Joined first: a join sends what the node is owed at once,
			// whatever the interval; this test is about the writes after it.
			waitJoined(t, nodes)
			release := make(chan struct{})
			var once sync.Once
			defer once.Do(func() { close(release) }) // a failing test must not leave the worker held
			nodes[1].Faults.SetOnDeliver(func(_ string, cursor uint64) {
				if cursor == 0 {
					<-release
				}
			})
			start := time.Now()
			for i := 0; i < tc.n; i++ {
				nodes[0].Broadcast(t, "match", &testpb.Stamp{Publisher: "t", Seq: uint64(i), Pad: make([]byte, tc.pad)})
			}
			// Waits for the producer to have buffered every write (internal
			// state): from then on, only acks can send the batches left.
			test.Eventually(t, 10*time.Second, func() bool { return nodes[0].Stats(t).WriteCursor == uint64(tc.n) },
				func() string { return fmt.Sprintf("write cursor %d", nodes[0].Stats(t).WriteCursor) })
			once.Do(func() { close(release) })
			test.Eventually(t, 20*time.Second, func() bool { return c.Len() >= tc.whole }, c.Describe)
			got := c.Stamps()
			for i, s := range got {
				if s != uint64(i) {
					t.Fatalf("stamp %d is %d: %s", i, s, c.Describe())
				}
			}
			t.Logf("%d of %d delivered %v after the first broadcast (BatchInterval %v)", len(got), tc.n, time.Since(start).Round(time.Millisecond), cfg.BatchInterval)
		})
	}
}

// The end of a burst does not wait for BatchInterval: once the full
// batches before it are acknowledged, the part batch left goes. Without a
// full batch before it (light load), a part batch still waits for the
// interval (TestPartBatchWaitsForItsInterval).
func TestBurstTailDoesNotWaitForBatchInterval(t *testing.T) {
	cfg := fastConfig()
	cfg.BatchInterval = time.Minute
	cfg.BufferSize = 10_000
	cfg.MaxBatchMessages, cfg.MaxBatchesInFlight = 100, 4
	nodes := test.StartCluster(t, 2, cfg)
	c := nodes[1].Subscribe(t, "match")
	waitJoined(t, nodes) // a join sends what the node is owed at once: this test is about the writes after it
	const n = 250        // two full batches, then 50
	for i := 0; i < n; i++ {
		nodes[0].Broadcast(t, "match", &testpb.Stamp{Publisher: "t", Seq: uint64(i)})
	}
	test.Eventually(t, 20*time.Second, func() bool { return c.Len() >= n }, c.Describe)
	for i, s := range c.Stamps() {
		if s != uint64(i) {
			t.Fatalf("stamp %d is %d: %s", i, s, c.Describe())
		}
	}
}

// Under light load (no batch ever full) a part batch waits for its
// BatchInterval: the interval is what batches it.
func TestPartBatchWaitsForItsInterval(t *testing.T) {
	cfg := fastConfig()
	cfg.BatchInterval = 2 * time.Second
	cfg.MaxBatchMessages = 100
	nodes := test.StartCluster(t, 2, cfg)
	c := nodes[1].Subscribe(t, "match")
	waitJoined(t, nodes)
	start := time.Now()
	for i := 0; i < 10; i++ {
		nodes[0].Broadcast(t, "match", &testpb.Stamp{Publisher: "t", Seq: uint64(i)})
	}
	test.Eventually(t, 20*time.Second, func() bool { return c.Len() >= 10 }, c.Describe)
	// The flush timer is armed at the first write: the batch goes when it
	// fires, not at once (well under the interval would mean no batching).
	if took := time.Since(start); took < cfg.BatchInterval/2 {
		t.Fatalf("10 messages arrived after %v: a part batch did not wait for BatchInterval %v", took, cfg.BatchInterval)
	}
}

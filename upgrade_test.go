package echopubsub_test

import (
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
)

// A rolling upgrade: a node not upgraded yet (a test build pinned to the
// previous protocol version, through the internal fault seam) and a current
// node stream to each other both ways, every message in order and no
// notice; the current producer falls back to version 1 for that node, and
// the version 1 producer is served by the current worker. Once the old node
// is upgraded (a graceful stop and a current start), both speak the current
// version; the only notice is the one version 1 always gave a peer on a
// restart ("producer restarted": version 1 has no Retire).
func TestPreviousVersionPeerInteroperates(t *testing.T) {
	cfg := fastConfig()
	cfg.BufferSize = 1000
	cfg.MaxBatchMessages = 16 // several batches per burst
	log := test.Logger(t, zerolog.InfoLevel)
	nodes, addrs := test.NewNodes(t, 2, log)
	nodes[1].Faults.PinProtocolVersion(messages.PreviousProtocolVersion)
	for _, nd := range nodes {
		nd.Start(t, cfg, staticOf(addrs))
	}
	registered(t, nodes)
	fwd := []*test.Collector{nodes[0].Subscribe(t, "fwd"), nodes[1].Subscribe(t, "fwd")}
	back := []*test.Collector{nodes[0].Subscribe(t, "back"), nodes[1].Subscribe(t, "back")}
	for i := uint64(1); i <= 200; i++ {
		nodes[0].Broadcast(t, "fwd", stamp(i))  // current -> version 1
		nodes[1].Broadcast(t, "back", stamp(i)) // version 1 -> current
	}
	for _, c := range append(fwd, back...) {
		wantUpTo(t, c, 200)
	}
	for _, c := range append(fwd, back...) {
		noExpiry(t, c)
	}

	// Upgrade node 1.
	nodes[1].StopPubSub(t)
	nodes[1].Faults.PinProtocolVersion(0)
	nodes[1].Start(t, cfg, staticOf(addrs))
	registered(t, nodes)
	up := nodes[1].Subscribe(t, "fwd")
	for i := uint64(201); i <= 210; i++ {
		nodes[0].Broadcast(t, "fwd", stamp(i))
		nodes[1].Broadcast(t, "back", stamp(i))
	}
	wantStamps(t, up, 201, 202, 203, 204, 205, 206, 207, 208, 209, 210)
	want := append(upTo(200), 201, 202, 203, 204, 205, 206, 207, 208, 209, 210)
	test.Eventually(t, 10*time.Second, func() bool { return equal(back[0].Stamps(), want) }, back[0].Describe)
	for _, c := range []*test.Collector{fwd[0], back[0]} {
		test.Eventually(t, 5*time.Second, func() bool { return test.Count[*messages.CursorExpired](c) == 1 }, c.Describe)
		for _, m := range c.All() {
			if ce, ok := m.(*messages.CursorExpired); ok && (ce.Node != nodes[1].Addr || ce.Reason != "producer restarted") {
				t.Fatalf("notice %v, want only version 1's restart notice from %s", ce, nodes[1].Addr)
			}
		}
	}
	noExpiry(t, up)
}

// registered waits until each node's producer registered with the other
// (what a readiness probe waits for): a burst larger than the buffer before
// that would be a real loss, told, and not what these tests are about.
func registered(t *testing.T, nodes []*test.Node) {
	t.Helper()
	for _, nd := range nodes {
		for _, other := range nodes {
			if other != nd {
				test.Eventually(t, 10*time.Second, func() bool { return nd.NodeStats(t, other.Addr).Registered },
					test.Sprintf("%s never registered with %s", nd.Addr, other.Addr))
			}
		}
	}
}

// A rolling upgrade past cumulative answers: a worker of the build before
// (a test build: it answers each batch through the future that asked it,
// and its registration does not say cumulative_answers) is sent every
// batch through a future, several in flight, and the current worker gets
// cumulative answers' requests; batches lost on the way to the earlier
// build are refused and sent again. Both ways, every message arrives in
// order, and nobody is told anything.
func TestEarlierBuildWorkerAnswersPerBatch(t *testing.T) {
	cfg := fastConfig()
	cfg.BufferSize = 1000
	cfg.BatchInterval = 0
	cfg.MaxBatchMessages = 4 // several batches in flight at once
	log := test.Logger(t, zerolog.InfoLevel)
	nodes, addrs := test.NewNodes(t, 2, log)
	nodes[1].Faults.AnswerPerBatch(true)
	for _, nd := range nodes {
		nd.Start(t, cfg, staticOf(addrs))
	}
	registered(t, nodes)
	fwd, back := nodes[1].Subscribe(t, "fwd"), nodes[0].Subscribe(t, "back")
	var mu sync.Mutex
	lost := 0
	nodes[1].Faults.SetOnReceive(func(_ string, req proto.Message) {
		if b, ok := req.(*messages.Batch); ok && b.FirstCursor > 0 && b.FirstCursor%37 < 4 {
			mu.Lock()
			defer mu.Unlock()
			if lost < 5 {
				lost++
				nodes[1].Faults.DropReceived(1) // this batch: lost on the way
			}
		}
	})
	for i := uint64(1); i <= 300; i++ {
		nodes[0].Broadcast(t, "fwd", stamp(i))  // current producer -> earlier build's worker
		nodes[1].Broadcast(t, "back", stamp(i)) // earlier build's producer (current code) -> current worker
	}
	wantUpTo(t, fwd, 300)
	wantUpTo(t, back, 300)
	noExpiry(t, fwd)
	noExpiry(t, back)
	mu.Lock()
	defer mu.Unlock()
	if lost == 0 {
		t.Fatalf("no batch was lost on the way: the test did not exercise a refusal")
	}
}

package echopubsub_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub/internal/proc"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
)

// TestEarlierIncarnationThatNeverReachedANodeIsTold: node 0's producer
// writes five messages while node 1 (running, subscribed) is cut off from
// it, and stops without ever reaching node 1. Its next incarnation, on the
// same node-local store, tells node 1 CursorExpired (Missed 0: how many
// is not known) before the first message it delivers. This was the known
// limit "a producer that ends before it ever reached a node".
func TestEarlierIncarnationThatNeverReachedANodeIsTold(t *testing.T) {
	cfg := fastConfig()
	nodes := test.StartCluster(t, 2, cfg)
	stores := test.NewStores(t)
	for _, nd := range nodes {
		nd.StopPubSub(t)
	}
	nodes[0].Faults.Cut(nodes[1].Addr)
	nodes[1].Start(t, cfg, staticOf(addrsOf(nodes)))
	c := nodes[1].Subscribe(t, "chat")
	nodes[0].Start(t, cfg, staticOf(addrsOf(nodes)), stores.Option("node0"))
	local := nodes[0].Subscribe(t, "chat")
	publishStamps(t, nodes[0], "chat", "a", 1, 5)
	wantStamps(t, local, 1, 2, 3, 4, 5) // written while node 1 ran
	nodes[0].StopPubSub(t)
	if c.Len() != 0 {
		t.Fatalf("node 1 got %s through the cut", c.Describe())
	}

	nodes[0].Faults.HealAll()
	nodes[0].Start(t, cfg, staticOf(addrsOf(nodes)), stores.Option("node0"))
	publishStamps(t, nodes[0], "chat", "a", 6, 6)
	test.Eventually(t, 10*time.Second, func() bool { return c.Len() == 2 },
		func() string { return "node 1's subscriber: " + c.Describe() })
	ce, ok := c.All()[0].(*messages.CursorExpired)
	if !ok || ce.Node != nodes[0].Addr || ce.Missed != 0 || !strings.Contains(ce.Reason, "earlier incarnation") {
		t.Fatalf("node 1's subscriber got %s: want CursorExpired from %s (missed 0: unknown), then #6", c.Describe(), nodes[0].Addr)
	}
	wantStamps(t, c, 6)
}

// TestColdStartIsNoAlarm: node 0 writes while node 1's pubsub is down, and
// stops; node 1 starts, then node 0 again on the same store. Node 1 was
// owed nothing (it started after node 0's earlier incarnation last wrote):
// it gets the new message and no CursorExpired.
func TestColdStartIsNoAlarm(t *testing.T) {
	cfg := fastConfig()
	nodes := test.StartCluster(t, 2, cfg)
	stores := test.NewStores(t)
	for _, nd := range nodes {
		nd.StopPubSub(t)
	}
	nodes[0].Start(t, cfg, staticOf(addrsOf(nodes)), stores.Option("node0"))
	local := nodes[0].Subscribe(t, "chat")
	publishStamps(t, nodes[0], "chat", "a", 1, 5)
	wantStamps(t, local, 1, 2, 3, 4, 5)
	nodes[0].StopPubSub(t)

	nodes[1].Start(t, cfg, staticOf(addrsOf(nodes)))
	c := nodes[1].Subscribe(t, "chat")
	nodes[0].Start(t, cfg, staticOf(addrsOf(nodes)), stores.Option("node0"))
	publishStamps(t, nodes[0], "chat", "a", 6, 6)
	wantStamps(t, c, 6)
	if n := test.Count[*messages.CursorExpired](c); n != 0 {
		t.Fatalf("node 1, started after node 0's earlier incarnation ended, was told: %s", c.Describe())
	}
}

// TestCrashedIncarnationThatNeverReachedANodeIsTold is the same with no
// graceful end: node 0's producer crashes while node 1 is cut off from it,
// so only its lease bounds when it last wrote. Its next incarnation tells
// node 1.
func TestCrashedIncarnationThatNeverReachedANodeIsTold(t *testing.T) {
	cfg := fastConfig()
	cfg.PoolSize = 1 // one producer: the one that crashes carries the topic
	nodes := test.StartCluster(t, 2, cfg)
	stores := test.NewStores(t)
	for _, nd := range nodes {
		nd.StopPubSub(t)
	}
	nodes[0].Faults.Cut(nodes[1].Addr)
	nodes[1].Start(t, cfg, staticOf(addrsOf(nodes)))
	c := nodes[1].Subscribe(t, "chat")
	nodes[0].Start(t, cfg, staticOf(addrsOf(nodes)), stores.Option("node0"))
	local := nodes[0].Subscribe(t, "chat")
	publishStamps(t, nodes[0], "chat", "a", 1, 5)
	wantStamps(t, local, 1, 2, 3, 4, 5)
	nodes[0].Faults.PanicOnNextSend() // its next try to reach node 1 crashes it
	test.Eventually(t, 10*time.Second, func() bool { return test.Count[*messages.CursorExpired](local) == 1 },
		func() string { return "node 0's own subscriber, told of the restart: " + local.Describe() })
	if c.Len() != 0 {
		t.Fatalf("node 1 got %s through the cut", c.Describe())
	}

	nodes[0].Faults.HealAll()
	publishStamps(t, nodes[0], "chat", "a", 6, 6)
	test.Eventually(t, 10*time.Second, func() bool { return c.Len() == 2 },
		func() string { return "node 1's subscriber: " + c.Describe() })
	if ce, ok := c.All()[0].(*messages.CursorExpired); !ok || ce.Node != nodes[0].Addr || !strings.Contains(ce.Reason, "earlier incarnation") {
		t.Fatalf("node 1's subscriber got %s: want CursorExpired from %s, then #6", c.Describe(), nodes[0].Addr)
	}
	wantStamps(t, c, 6)
}

// TestRestartTellsExactlyWhatAnAwayNodeMissed: node 1 got #1..3 from node
// 0, then is cut off while node 0 writes #4 and #5 and stops gracefully
// (node 1 away for the drain). Node 0's next incarnation says where the
// earlier one ended (recorded in its store): node 1 is told CursorExpired
// with Missed 2, exactly what it will never get, not 0 (unknown).
func TestRestartTellsExactlyWhatAnAwayNodeMissed(t *testing.T) {
	cfg := fastConfig()
	nodes := test.StartCluster(t, 2, cfg)
	stores := test.NewStores(t)
	nodes[0].StopPubSub(t)
	nodes[0].Start(t, cfg, staticOf(addrsOf(nodes)), stores.Option("node0"))
	c := nodes[1].Subscribe(t, "chat")
	publishStamps(t, nodes[0], "chat", "a", 1, 3)
	wantStamps(t, c, 1, 2, 3)
	nodes[0].Faults.Cut(nodes[1].Addr)
	local := nodes[0].Subscribe(t, "chat")
	publishStamps(t, nodes[0], "chat", "a", 4, 5)
	wantStamps(t, local, 4, 5)
	nodes[0].StopPubSub(t)

	nodes[0].Faults.HealAll()
	nodes[0].Start(t, cfg, staticOf(addrsOf(nodes)), stores.Option("node0"))
	publishStamps(t, nodes[0], "chat", "a", 6, 6)
	test.Eventually(t, 10*time.Second, func() bool { return c.Len() == 5 },
		func() string { return "node 1's subscriber: " + c.Describe() })
	if ce, ok := c.All()[3].(*messages.CursorExpired); !ok || ce.Node != nodes[0].Addr || ce.Missed != 2 {
		t.Fatalf("node 1's subscriber got %s: want #1..3, CursorExpired from %s with Missed 2, #6", c.Describe(), nodes[0].Addr)
	}
	wantStamps(t, c, 1, 2, 3, 6)
}

// TestKilledProducerThatNeverReachedANodeIsTold, as processes: node A (a
// seglog store) cannot reach node B while it writes five messages B is
// owed (B runs), and is killed (kill -9) before it ever reached B. A
// started again on its store tells B CursorExpired before its first new
// message: this was the documented silent gap.
func TestKilledProducerThatNeverReachedANodeIsTold(t *testing.T) {
	ports := test.FreePorts(t, 2)
	peers := []string{fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])}
	dir := t.TempDir()
	b := startChild(t, childSpec{Port: ports[1], Peers: peers})
	a := startChild(t, childSpec{Port: ports[0], Peers: peers, StoreDir: dir, Cut: peers[1]})
	a.publish(t, "p", 5)
	// A's own subscriber gets each message when A's producer writes it.
	if !proc.Until(10*time.Second, 5*time.Millisecond, func() bool { p := a.report(t).Pubs["p"]; return p != nil && p.N == 5 }) {
		t.Fatalf("A did not write its 5 messages: %s", describe(a.report(t)))
	}
	a.kill(t)
	if r := b.report(t); len(r.Pubs) != 0 || len(r.Expired) != 0 {
		t.Fatalf("B got %s through the cut", describe(r))
	}

	a = startChild(t, childSpec{Port: ports[0], Peers: peers, StoreDir: dir})
	a.publish(t, "q", 1)
	var last childReport
	if !proc.Until(10*time.Second, 20*time.Millisecond, func() bool { last = b.report(t); return last.Pubs["q"] != nil }) {
		t.Fatalf("B never got A's new message: %s", describe(last))
	}
	if len(last.Expired) != 1 || !strings.Contains(last.Expired[0], "earlier incarnation") || last.Pubs["p"] != nil {
		t.Fatalf("B got %s: want one CursorExpired (an earlier incarnation), then q#1", describe(last))
	}
}

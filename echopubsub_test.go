package echopubsub_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// fastConfig is the default configuration with test-sized timings.
func fastConfig() echopubsub.Config { return test.FastConfig() }

func stamp(seq uint64) *testpb.Stamp { return &testpb.Stamp{Publisher: "t", Seq: seq} }

func wantStamps(t *testing.T, c *test.Collector, want ...uint64) {
	t.Helper()
	test.Eventually(t, 10*time.Second, func() bool { return equal(c.Stamps(), want) },
		func() string { return "want stamps " + fmtU(want) + ", got " + c.Describe() })
}

func TestBroadcastReachesEveryNode(t *testing.T) {
	nodes := test.StartCluster(t, 3, fastConfig())
	var cs []*test.Collector
	for _, nd := range nodes {
		cs = append(cs, nd.Subscribe(t, "match"))
	}
	for i := uint64(1); i <= 5; i++ {
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	for _, c := range cs {
		wantStamps(t, c, 1, 2, 3, 4, 5)
	}
}

func TestDirectBroadcastReachesOnlyTarget(t *testing.T) {
	nodes := test.StartCluster(t, 3, fastConfig())
	var cs []*test.Collector
	for _, nd := range nodes {
		cs = append(cs, nd.Subscribe(t, "match"))
	}
	if err := nodes[0].PS.DirectBroadcast(nodes[2].Addr, "match", stamp(1)); err != nil {
		t.Fatal(err)
	}
	nodes[0].Broadcast(t, "match", stamp(2)) // a marker every node gets after the direct one
	wantStamps(t, cs[2], 1, 2)
	wantStamps(t, cs[0], 2)
	wantStamps(t, cs[1], 2)
}

func TestCatchUpAfterDisconnect(t *testing.T) {
	nodes := test.StartCluster(t, 2, fastConfig())
	c := nodes[1].Subscribe(t, "match")
	nodes[0].Broadcast(t, "match", stamp(1))
	wantStamps(t, c, 1)
	test.Partition(nodes, 1)
	nodes[0].Broadcast(t, "match", stamp(2))
	nodes[0].Broadcast(t, "match", stamp(3))
	test.Eventually(t, 5*time.Second, func() bool { return nodes[0].NodeStats(t, nodes[1].Addr).Lag == 2 },
		test.Sprintf("node 0 holds 2 messages for node 1"))
	if got := c.Stamps(); !equal(got, []uint64{1}) {
		t.Fatalf("cut node received %v while cut", got)
	}
	test.Heal(nodes)
	wantStamps(t, c, 1, 2, 3)
	nodes[0].Broadcast(t, "match", stamp(4))
	wantStamps(t, c, 1, 2, 3, 4)
}

func TestHeldMessagesReplayInOrder(t *testing.T) {
	nodes := test.StartCluster(t, 3, fastConfig())
	c := nodes[2].Subscribe(t, "match", echopubsub.WithMetadata())
	test.Partition(nodes, 2)
	for i := uint64(1); i <= 50; i++ {
		nodes[i%2].Broadcast(t, "match", &testpb.Stamp{Publisher: "p", Seq: i})
	}
	test.Heal(nodes)
	// Per producer node, the cursors arrive in order with no gap.
	test.Eventually(t, 10*time.Second, func() bool { return len(c.Stamps()) == 50 }, func() string { return c.Describe() })
	next := map[string]uint64{}
	for _, m := range c.All() {
		d := m.(*messages.Delivery)
		if n, ok := next[d.Node]; ok && d.Cursor != n {
			t.Fatalf("from %s: cursor %d after %d", d.Node, d.Cursor, n-1)
		}
		next[d.Node] = d.Cursor + 1
	}
}

func TestNewJoinerGetsOnlyLaterMessages(t *testing.T) {
	cfg := fastConfig()
	log := test.Logger(t, zerolog.InfoLevel)
	// Three remotes, all listed; the third starts its pubsub late.
	nodes, addrs := test.NewNodes(t, 3, log)
	static := func() echopubsub.Option { return echopubsub.WithMembership(cluster.NewStatic(addrs...)) }
	// No registration with node 2 is in flight while 1..3 are written
	// (one sent before could otherwise arrive just after node 2 starts).
	nodes[0].Faults.Cut(nodes[2].Addr)
	nodes[0].Start(t, cfg, static())
	nodes[1].Start(t, cfg, static())
	for i := uint64(1); i <= 3; i++ {
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	test.Eventually(t, 5*time.Second, func() bool { return nodes[0].Stats(t).WriteCursor == 3 }, test.Sprintf("written"))
	// Not a settling wait: it makes 1..3 history. A write within one probe
	// round trip of a node's start is concurrent with it and may be
	// delivered (see "Joined" in the package doc); 300 ms is far outside.
	time.Sleep(300 * time.Millisecond)
	nodes[2].Start(t, cfg, static())
	nodes[0].Faults.HealAll()
	c := nodes[2].Subscribe(t, "match")
	nodes[0].Broadcast(t, "match", stamp(4))
	wantStamps(t, c, 4)
	if n := test.Count[*messages.CursorExpired](c); n != 0 {
		t.Fatalf("a subscriber that came after the join was told CursorExpired: %s", c.Describe())
	}
}

func TestCursorExpiredAfterElevenMessagesWithBufferTen(t *testing.T) {
	cfg := fastConfig()
	cfg.BufferSize = 10
	nodes := test.StartCluster(t, 2, cfg)
	c := nodes[1].Subscribe(t, "match")
	expireJoinedNode1(t, nodes, 11)
	test.Eventually(t, 10*time.Second, func() bool { return test.Count[*messages.CursorExpired](c) == 1 }, c.Describe)
	ce := c.All()[0].(*messages.CursorExpired)
	if ce.Node != nodes[0].Addr || ce.Missed != 11 { // 1 overwritten, the 10 still buffered skipped
		t.Fatalf("CursorExpired = %v, want node %s missed 11", ce, nodes[0].Addr)
	}
	// Nothing of the lost stretch is replayed; the stream resumes after it.
	nodes[0].Broadcast(t, "match", stamp(12))
	wantStamps(t, c, 12)
}

func TestExpiryNeverReplaysOverwrittenSlot(t *testing.T) {
	cfg := fastConfig()
	cfg.BufferSize = 4
	nodes := test.StartCluster(t, 2, cfg)
	c := nodes[1].Subscribe(t, "match")
	nodes[0].Broadcast(t, "match", stamp(0))
	wantStamps(t, c, 0)
	test.Partition(nodes, 1)
	for i := uint64(1); i <= 5; i++ { // lag 5 > 4: cursor of m1 was overwritten by m5
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	test.Heal(nodes)
	test.Eventually(t, 10*time.Second, func() bool { return test.Count[*messages.CursorExpired](c) == 1 }, c.Describe)
	nodes[0].Broadcast(t, "match", stamp(6))
	wantStamps(t, c, 0, 6)
	if n := test.Count[*messages.CursorExpired](c); n != 1 {
		t.Fatalf("%d CursorExpired, want 1: %s", n, c.Describe())
	}
}

func TestProducerRestartedWhileAwayExpires(t *testing.T) {
	cfg := fastConfig()
	nodes := test.StartCluster(t, 2, cfg)
	c := nodes[1].Subscribe(t, "match")
	local := nodes[0].Subscribe(t, "match")
	nodes[0].Broadcast(t, "match", stamp(1))
	wantStamps(t, c, 1)
	test.Partition(nodes, 1)
	nodes[0].Broadcast(t, "match", stamp(2)) // held for node 1, then lost with the producer
	crashProducer(t, nodes[0])
	test.Heal(nodes)
	test.Eventually(t, 10*time.Second, func() bool { return test.Count[*messages.CursorExpired](c) == 1 }, c.Describe)
	// The producer's own node is told too: the write that crashed it may
	// not have reached local subscribers.
	test.Eventually(t, 10*time.Second, func() bool { return test.Count[*messages.CursorExpired](local) == 1 }, local.Describe)
	nodes[0].Broadcast(t, "match", stamp(3))
	wantStamps(t, c, 1, 3)
}

// expireJoinedNode1 cuts node 1 off once it has joined, broadcasts stamps
// 1..n on "match" from node 0 (more than its BufferSize), waits until node 0
// counts node 1 expired, and heals. About a joined node's cursor falling
// behind (Missed is exact then); a node cut off before its join is
// TestStartupPartitionLongerThanBuffer.
func expireJoinedNode1(t *testing.T, nodes []*test.Node, n uint64) {
	t.Helper()
	waitJoined(t, nodes)
	test.Partition(nodes, 1)
	for i := uint64(1); i <= n; i++ {
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	test.Eventually(t, 5*time.Second, func() bool { return nodes[0].NodeStats(t, nodes[1].Addr).Expired },
		test.Sprintf("node 1 expired in node 0's view"))
	test.Heal(nodes)
}

// crashProducer makes nd's group-0 producer panic on its next send (a fault
// hook runs on the producer's goroutine) and waits for its new incarnation.
func crashProducer(t *testing.T, nd *test.Node) {
	t.Helper()
	before := nd.Stats(t).Incarnation
	nd.Faults.PanicOnNextSend()
	nd.Broadcast(t, "crash-trigger", stamp(0))
	test.Eventually(t, 10*time.Second, func() bool { return nd.Stats(t).Incarnation != before },
		test.Sprintf("producer on %s restarted", nd.Addr))
}

func TestBatchIntervalGroupsRapidSends(t *testing.T) {
	cfg := fastConfig()
	cfg.BatchInterval = 200 * time.Millisecond
	nodes := test.StartCluster(t, 2, cfg)
	c := nodes[1].Subscribe(t, "match")
	batches := nodes[1].Faults.CountBatches()
	for i := uint64(1); i <= 20; i++ {
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	test.Eventually(t, 5*time.Second, func() bool { return len(c.Stamps()) == 20 }, c.Describe)
	if n := batches(); n != 1 {
		t.Fatalf("20 rapid sends took %d batches, want 1", n)
	}
}

func TestOwnSubscriberGetsMessageExactlyOnce(t *testing.T) {
	nodes := test.StartCluster(t, 3, fastConfig())
	c := nodes[0].Subscribe(t, "match")
	nodes[0].Broadcast(t, "match", stamp(1))
	wantStamps(t, c, 1)
	// Wait until every node acknowledged, then make sure nothing more came.
	test.Eventually(t, 5*time.Second, func() bool {
		for _, ns := range nodes[0].Stats(t).Nodes {
			if ns.Lag != 0 {
				return false
			}
		}
		return true
	}, test.Sprintf("all nodes acknowledged"))
	nodes[0].Broadcast(t, "match", stamp(2))
	wantStamps(t, c, 1, 2)
}

func TestReadCursorsEqualWriteCursorAfterFlush(t *testing.T) {
	nodes := test.StartCluster(t, 3, fastConfig())
	for i := uint64(1); i <= 7; i++ {
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	test.Eventually(t, 5*time.Second, func() bool {
		st := nodes[0].Stats(t)
		if st.WriteCursor != 7 || len(st.Nodes) != 3 {
			return false
		}
		for _, ns := range st.Nodes {
			if ns.Next != st.WriteCursor {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("%+v", nodes[0].Stats(t)) })
}

func TestReceiveFaultThenRetryDelivers(t *testing.T) {
	nodes := test.StartCluster(t, 2, fastConfig())
	c := nodes[1].Subscribe(t, "match")
	nodes[1].Faults.DropReceived(1)
	nodes[0].Broadcast(t, "match", stamp(1))
	wantStamps(t, c, 1)
}

func TestDeliveryAfterSeveralRetryCycles(t *testing.T) {
	nodes := test.StartCluster(t, 2, fastConfig())
	c := nodes[1].Subscribe(t, "match")
	nodes[1].Faults.DropReceived(4)
	nodes[0].Broadcast(t, "match", stamp(1))
	nodes[0].Broadcast(t, "match", stamp(2))
	wantStamps(t, c, 1, 2)
}

func TestExpiryNoticeIsRetriedAndProducerSurvives(t *testing.T) {
	cfg := fastConfig()
	cfg.BufferSize = 4
	nodes := test.StartCluster(t, 2, cfg)
	c := nodes[1].Subscribe(t, "match")
	// About the Expire call to a joined node (a node cut off before its join
	// is told in its join: TestStartupPartitionLongerThanBuffer).
	waitJoined(t, nodes)
	test.Partition(nodes, 1)
	for i := uint64(1); i <= 6; i++ {
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	test.Eventually(t, 5*time.Second, func() bool { return nodes[0].NodeStats(t, nodes[1].Addr).Expired },
		test.Sprintf("node 1 expired"))
	nodes[1].Faults.DropReceived(3) // the first three Expire calls are lost
	test.Heal(nodes)
	test.Eventually(t, 10*time.Second, func() bool { return test.Count[*messages.CursorExpired](c) == 1 }, c.Describe)
	nodes[0].Broadcast(t, "match", stamp(7))
	wantStamps(t, c, 7)
}

func TestCapacityWarning(t *testing.T) {
	for _, tc := range []struct {
		held int
		warn bool
	}{{4, true}, {3, false}} {
		t.Run(fmt.Sprintf("held=%d", tc.held), func(t *testing.T) {
			cfg := fastConfig()
			cfg.BufferSize = 10 // threshold 0.4: warn from 4 held messages
			nodes := test.StartCluster(t, 2, cfg)
			var warnings atomic.Int32
			sub := nodes[0].System.EventStream.Subscribe(func(ev interface{}) {
				if _, ok := ev.(*messages.CapacityWarning); ok {
					warnings.Add(1)
				}
			})
			defer nodes[0].System.EventStream.Unsubscribe(sub)
			// Lag is counted from a joined node's cursor: before its join a
			// node has no cursor and nothing is held for it.
			waitJoined(t, nodes)
			test.Partition(nodes, 1)
			for i := 1; i <= tc.held; i++ {
				nodes[0].Broadcast(t, "match", stamp(uint64(i)))
			}
			test.Eventually(t, 5*time.Second, func() bool {
				ns := nodes[0].NodeStats(t, nodes[1].Addr)
				return ns.Lag == uint64(tc.held) && ns.Failures >= 2 // flushed (and failed) since the last write
			}, test.Sprintf("node 1 behind by %d", tc.held))
			if got := warnings.Load() > 0; got != tc.warn {
				t.Fatalf("%d held of 10: warning %v, want %v", tc.held, got, tc.warn)
			}
		})
	}
}

// A node is owed every message written after its pubsub started, however
// long the producer takes to reach it: writes made while the link was cut
// are delivered once it heals, in order, and nobody is told anything.
func TestWritesWhileBeingReachedAreDelivered(t *testing.T) {
	cfg := fastConfig()
	log := test.Logger(t, zerolog.InfoLevel)
	nodes, addrs := test.NewNodes(t, 2, log)
	nodes[0].Faults.Cut(nodes[1].Addr) // node 0 cannot reach node 1 yet
	for _, nd := range nodes {
		nd.Start(t, cfg, echopubsub.WithMembership(cluster.NewStatic(addrs...)))
	}
	c := nodes[1].Subscribe(t, "match")
	nodes[0].Broadcast(t, "match", stamp(1)) // written while node 1 is being reached
	test.Eventually(t, 5*time.Second, func() bool { return nodes[0].Stats(t).WriteCursor == 1 }, test.Sprintf("written"))
	test.Heal(nodes)
	nodes[0].Broadcast(t, "match", stamp(2))
	wantStamps(t, c, 1, 2)
	if n := test.Count[*messages.CursorExpired](c); n != 0 {
		t.Fatalf("false alarm: %d CursorExpired: %s", n, c.Describe())
	}
}

package echopubsub_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// gapCluster is two nodes, each on its own node-local store ("node0",
// "node1" of the Stores it returns), durable room:*.
func gapCluster(t *testing.T) ([]*test.Node, func(i int), *test.Stores) {
	cfg := replayConfig()
	cfg.SoftQueue, cfg.HardQueue = 400, 800
	nodes := test.StartCluster(t, 2, cfg)
	stores := test.NewStores(t)
	start := func(i int) {
		nodes[i].Start(t, cfg, staticOf(addrsOf(nodes)), echopubsub.WithDurableTopics("room:*"),
			stores.Option(fmt.Sprint("node", i)))
	}
	for i, nd := range nodes {
		nd.StopPubSub(t)
		start(i)
	}
	return nodes, start, stores
}

// replayAll replays room:1 on nd into a new session and returns what the
// owner got, one word per envelope ("a#3") or gap ("gap(a,5)").
func replayAll(t *testing.T, nd *test.Node, pub string) ([]string, echopubsub.ReplayStats) {
	t.Helper()
	o := spawnOwner(t, nd, nil)
	id := openSession(t, nd, o, nil)
	st := replay(t, nd, id, "room:1", echopubsub.ReplayOptions{Limit: 400})
	if st.Stopped {
		t.Fatalf("replay stopped: %+v", st)
	}
	waitEnvelopes(t, o, st.Delivered)
	var out []string
	for _, m := range o.all() {
		switch m := m.(type) {
		case *echopubsub.Envelope:
			s := m.Event.(*testpb.Stamp)
			out = append(out, fmt.Sprintf("%s#%d", s.Publisher, s.Seq))
		case *echopubsub.StreamGap:
			if m.Node != pub {
				t.Fatalf("gap names producer %s, want %s", m.Node, pub)
			}
			g := fmt.Sprintf("gap(%d)", m.Missed)
			if m.To != 0 { // a known range: shown, and it must count Missed
				if m.Missed != 0 && m.To-m.From != m.Missed {
					t.Fatalf("gap row's range [%d, %d) is not its %d missed", m.From, m.To, m.Missed)
				}
				g += rangeOf(m.ProducerIncarnation, m.From, m.To)
			}
			out = append(out, g)
		}
	}
	return out, st
}

// TestReplayMarksWhatANodeMissedWhileAway: node 1 stops (gracefully) while
// node 0 publishes five durable messages, then starts again on its store.
// Its store has a hole: replay on node 1 shows one gap row of exactly five
// messages, where they were, and everything else. The gap row's range is
// exactly the producer cursors of the messages node 1 did not get (as node
// 0's own subscriber saw them delivered).
func TestReplayMarksWhatANodeMissedWhileAway(t *testing.T) {
	nodes, start, _ := gapCluster(t)
	c := nodes[1].Subscribe(t, "room:1")
	local := nodes[0].Subscribe(t, "room:1", echopubsub.WithMetadata())
	publishStamps(t, nodes[0], "room:1", "a", 1, 3)
	wantStamps(t, c, 1, 2, 3)
	nodes[1].StopPubSub(t)
	publishStamps(t, nodes[0], "room:1", "a", 4, 8)
	// Broadcast only queues a write: node 0's own subscriber gets each one
	// when its producer writes it, so 4..8 are written before node 1 starts
	// again (otherwise, on a loaded machine, they may be written after and
	// be owed to it: see "Joined").
	wantStamps(t, local, 1, 2, 3, 4, 5, 6, 7, 8)
	start(1)
	c = nodes[1].Subscribe(t, "room:1")
	publishStamps(t, nodes[0], "room:1", "a", 9, 10)
	// Stored before node 1's worker acknowledged them. (A write within one
	// probe round trip of node 1's start may reach it too: see "Joined".)
	test.Eventually(t, 10*time.Second, func() bool { s := c.Stamps(); return len(s) > 0 && s[len(s)-1] == 10 },
		func() string { return "node 1's subscriber: " + c.Describe() })
	got, st := replayAll(t, nodes[1], nodes[0].Addr)
	// a#1..3, one gap of exactly what is missing, then the rest to a#10.
	want := "a#1 a#2 a#3"
	if st.Missed >= 1 && st.Missed <= 5 {
		var a4 *messages.Delivery // the first message node 1 did not get, where node 0 wrote it
		for _, m := range local.All() {
			if d, ok := m.(*messages.Delivery); ok && d.Message.(*testpb.Stamp).Seq == 4 {
				a4 = d
			}
		}
		want += fmt.Sprintf(" gap(%d)%s", st.Missed, rangeOf(a4.Incarnation, a4.Cursor, a4.Cursor+st.Missed))
		for s := 4 + st.Missed; s <= 10; s++ {
			want += fmt.Sprintf(" a#%d", s)
		}
	}
	if strings.Join(got, " ") != want || st.Gaps != 1 {
		t.Fatalf("node 1 replayed %v (%+v); want a#1..3, one gap of what is missing, the rest", got, st)
	}
	// Node 0 published them all: its own store has no hole.
	if got, _ := replayAll(t, nodes[0], nodes[0].Addr); len(got) != 10 || strings.Contains(strings.Join(got, " "), "gap") {
		t.Fatalf("node 0 replayed %v, want a#1..10", got)
	}
}

// TestReplayMarksACursorExpiry: node 0 cannot reach node 1 while it
// publishes more than its buffer holds; node 1 is told CursorExpired, and
// its store gets a gap row there, never a silent hole.
func TestReplayMarksACursorExpiry(t *testing.T) {
	nodes, _, _ := gapCluster(t)
	c := nodes[1].Subscribe(t, "room:1")
	publishStamps(t, nodes[0], "room:1", "a", 1, 3)
	wantStamps(t, c, 1, 2, 3)
	nodes[0].Faults.Cut(nodes[1].Addr)
	publishStamps(t, nodes[0], "room:1", "a", 4, 153) // BufferSize is 100
	nodes[0].Faults.HealAll()
	test.Eventually(t, 10*time.Second, func() bool { return test.Count[*messages.CursorExpired](c) == 1 },
		func() string { return "node 1's subscriber: " + c.Describe() })
	publishStamps(t, nodes[0], "room:1", "a", 154, 155)
	test.Eventually(t, 10*time.Second, func() bool { s := c.Stamps(); return len(s) > 0 && s[len(s)-1] == 155 },
		func() string { return "node 1's subscriber: " + c.Describe() })
	got, st := replayAll(t, nodes[1], nodes[0].Addr)
	if st.Gaps != 1 || len(got) < 5 || strings.Join(got[:3], " ") != "a#1 a#2 a#3" || !strings.HasPrefix(got[3], "gap(") {
		t.Fatalf("node 1 replayed %v (%+v): want a#1..3 then one gap", got, st)
	}
	// After the gap: the rest, in order, up to the last one.
	var first uint64
	if _, err := fmt.Sscanf(got[4], "a#%d", &first); err != nil {
		t.Fatal(err)
	}
	for i, w := range got[4:] {
		if w != fmt.Sprintf("a#%d", first+uint64(i)) {
			t.Fatalf("after the gap: %v", got[4:])
		}
	}
	if got[len(got)-1] != "a#155" {
		t.Fatalf("replay ends at %s, want a#155", got[len(got)-1])
	}
	// The gap row carries what the live notice said.
	for _, m := range c.All() {
		if ce, ok := m.(*messages.CursorExpired); ok && missedOf(got[3]) != ce.Missed {
			t.Fatalf("gap says %d missed, the CursorExpired %d", missedOf(got[3]), ce.Missed)
		}
	}
}

func missedOf(gap string) uint64 {
	var n uint64
	fmt.Sscanf(gap, "gap(%d)", &n)
	return n
}

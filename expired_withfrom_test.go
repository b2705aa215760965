package echopubsub_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
)

// TestWithFromSessionToldByTheStoreOnly: node 1 falls behind node 0's
// buffer (cut off while node 0 publishes 30 messages into a buffer of 20).
// A session there that follows room:1 WithFrom is told by its store alone:
// a node-local store's gap row (a StreamGap naming the range node 1 did not
// get), or a shared store's rows themselves; never also the node's
// CursorExpired. It is told at once, before anything else is published
// (the store is read when the notice comes, not when the next row shows
// the hole). A plain subscriber and a session subscribed without WithFrom
// get the CursorExpired, with the same range. So does a session following
// room:2, a stream node 1's node-local store never held (so no gap row
// there: its messages may have been among those lost; no live row of it
// reached the session before the notice); with a shared store, which holds
// every row, it does not.
func TestWithFromSessionToldByTheStoreOnly(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			const buffer, cut = 20, 30
			nodes := startWithFromPair(t, buffer, shared)
			c := nodes[1].Subscribe(t, "room:1")
			follower, plain := spawnOwner(t, nodes[1], nil), spawnOwner(t, nodes[1], nil)
			id := openSession(t, nodes[1], follower, nil)
			if err := nodes[1].PS.SessionSubscribe(id, "room:1", echopubsub.WithFrom(1)); err != nil {
				t.Fatalf("SessionSubscribe WithFrom(1): %v", err)
			}
			openSession(t, nodes[1], plain, []string{"room:1"})
			empty := spawnOwner(t, nodes[1], nil)
			if err := nodes[1].PS.SessionSubscribe(openSession(t, nodes[1], empty, nil), "room:2", echopubsub.WithFrom(1)); err != nil {
				t.Fatalf("SessionSubscribe WithFrom(1): %v", err)
			}
			publishStamps(t, nodes[0], "room:1", "a", 1, 3)
			wantStamps(t, c, 1, 2, 3)
			waitEnvelopes(t, follower, 3)
			waitEnvelopes(t, plain, 3)
			// Not a settling wait: node 0 must have node 1's ack of 1..3 before
			// the cut, or the cut would fail that batch and the range start earlier.
			test.Eventually(t, 5*time.Second, func() bool { return nodes[0].NodeStats(t, nodes[1].Addr).Next == 3 },
				test.Sprintf("node 1 acknowledged 1..3"))
			nodes[0].Faults.Cut(nodes[1].Addr)
			publishStamps(t, nodes[0], "room:1", "a", 4, 3+cut)
			test.Eventually(t, 5*time.Second, func() bool { return nodes[0].NodeStats(t, nodes[1].Addr).Expired },
				test.Sprintf("node 1 expired in node 0's view"))
			nodes[0].Faults.HealAll()
			test.Eventually(t, 10*time.Second, func() bool { return test.Count[*messages.CursorExpired](c) == 1 }, c.Describe)
			test.Eventually(t, 10*time.Second, func() bool { return countOf[*messages.CursorExpired](plain) == 1 }, plain.describe)
			var ce *messages.CursorExpired
			for _, m := range c.All() {
				if m, ok := m.(*messages.CursorExpired); ok {
					ce = m
				}
			}
			for _, m := range plain.all() {
				if m, ok := m.(*messages.CursorExpired); ok && rangeOf(m.ProducerIncarnation, m.From, m.To) != rangeOf(ce.ProducerIncarnation, ce.From, ce.To) {
					t.Fatalf("the plain session was told %v, the subscriber %v", m, ce)
				}
			}
			// The store tells the follower now: nothing more is published yet.
			if shared {
				test.Eventually(t, 10*time.Second, func() bool { return len(follower.seqs()) == 3+cut }, follower.describe)
			} else {
				test.Eventually(t, 10*time.Second, func() bool { return countOf[*messages.CursorExpired](empty) == 1 }, empty.describe)
				test.Eventually(t, 10*time.Second, func() bool { return countOf[*echopubsub.StreamGap](follower) == 1 }, follower.describe)
				for _, m := range follower.all() {
					if g, ok := m.(*echopubsub.StreamGap); ok && rangeOf(g.ProducerIncarnation, g.From, g.To) != rangeOf(ce.ProducerIncarnation, ce.From, ce.To) {
						t.Fatalf("the follower's StreamGap says %s, the subscriber's CursorExpired %s: %s",
							rangeOf(g.ProducerIncarnation, g.From, g.To), rangeOf(ce.ProducerIncarnation, ce.From, ce.To), follower.describe())
					}
				}
			}
			publishStamps(t, nodes[0], "room:1", "a", 4+cut, 4+cut)
			wantStamps(t, c, 1, 2, 3, 4+cut)
			want := []uint64{1, 2, 3, 4 + cut}
			if shared {
				want = want[:0]
				for s := uint64(1); s <= 4+cut; s++ {
					want = append(want, s)
				}
			}
			test.Eventually(t, 10*time.Second, func() bool { return len(follower.seqs()) == len(want) }, follower.describe)
			if got := follower.seqs(); fmt.Sprint(got) != fmt.Sprint(want) || countOf[*messages.CursorExpired](follower) != 0 {
				t.Fatalf("the follower got %v (%s), want %v and no CursorExpired", got, follower.describe(), want)
			}
			if n := countOf[*messages.CursorExpired](empty); shared && n != 0 {
				t.Fatalf("with a shared store, the session following room:2 was told %d CursorExpired: %s", n, empty.describe())
			}
		})
	}
}

// TestWithFromSessionReadsAGapRowNoNoticeAnnounced: node 1 was stopped
// while node 0 published a#4..8; it starts again cut off from node 0, so
// node 0's producer cannot join it yet, and a session there follows
// room:1 WithFrom(1): it catches up a#1..3 from its store and is live.
// Once the cut heals, node 0's producer joins, and node 1's store marks
// what it missed while away with a gap row (no CursorExpired: nobody on
// the restarted node was owed it live). The session is told (a StreamGap)
// at once, with nothing more published: a live follow at its stream's end
// would otherwise learn of the gap row only from the next row.
func TestWithFromSessionReadsAGapRowNoNoticeAnnounced(t *testing.T) {
	nodes, start, _ := gapCluster(t)
	c := nodes[1].Subscribe(t, "room:1")
	local := nodes[0].Subscribe(t, "room:1")
	publishStamps(t, nodes[0], "room:1", "a", 1, 3)
	wantStamps(t, c, 1, 2, 3)
	nodes[1].StopPubSub(t)
	publishStamps(t, nodes[0], "room:1", "a", 4, 8)
	wantStamps(t, local, 1, 2, 3, 4, 5, 6, 7, 8) // written before node 1 starts again (see "Joined")
	nodes[0].Faults.Cut(nodes[1].Addr)
	start(1)
	o := spawnOwner(t, nodes[1], nil)
	id := openSession(t, nodes[1], o, nil)
	if err := nodes[1].PS.SessionSubscribe(id, "room:1", echopubsub.WithFrom(1)); err != nil {
		t.Fatalf("SessionSubscribe WithFrom(1): %v", err)
	}
	test.Eventually(t, 10*time.Second, func() bool { return countOf[*echopubsub.CaughtUp](o) == 1 }, o.describe)
	if got := o.seqs(); fmt.Sprint(got) != "[1 2 3]" || countOf[*echopubsub.StreamGap](o) != 0 {
		t.Fatalf("caught up with %v (%s), want a#1..3 and no gap yet (node 0 cannot reach node 1)", got, o.describe())
	}
	nodes[0].Faults.HealAll()
	test.Eventually(t, 10*time.Second, func() bool { return countOf[*echopubsub.StreamGap](o) == 1 }, o.describe)
}

// startWithFromPair starts two joined nodes with room:* durable, a
// BufferSize of buffer, and node-local stores (or one shared store).
func startWithFromPair(t *testing.T, buffer int, shared bool) []*test.Node {
	t.Helper()
	cfg := replayConfig()
	cfg.BufferSize = buffer
	cfg.SoftQueue, cfg.HardQueue = 100, 200
	nodes := test.StartCluster(t, 2, cfg)
	stores, sharedStore := test.NewStores(t), test.NewSharedMemStore()
	for i, nd := range nodes {
		opt := stores.Option(fmt.Sprint("node", i))
		if shared {
			opt = echopubsub.WithStore(sharedStore)
		}
		nd.StopPubSub(t)
		nd.Start(t, cfg, staticOf(addrsOf(nodes)), echopubsub.WithDurableTopics("room:*"), opt)
	}
	waitJoined(t, nodes)
	return nodes
}

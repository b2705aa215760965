package echopubsub_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
)

// TestMissedCountsEverythingTheNodeWillNeverGet: node 1 is cut off while
// node 0 publishes 30 messages into a buffer of 20, so 10 are overwritten
// and the 20 still buffered are skipped (node 1's cursor moves to the write
// cursor). Node 1 never receives any of the 30, and everything that tells
// it says 30: the plain subscriber's CursorExpired, the session's, the gap
// row of its store, and node 0's Expired event (which also says 10 of them
// were overwritten). The count is checked against what the subscribers
// received, not only against the figure; and so is the range every notice
// names (CursorExpired's and the gap row's From and To): exactly the
// producer cursors between the last one the subscriber got before the cut
// and the first one after.
func TestMissedCountsEverythingTheNodeWillNeverGet(t *testing.T) {
	const buffer, cut = 20, 30
	cfg := replayConfig()
	cfg.BufferSize = buffer
	cfg.SoftQueue, cfg.HardQueue = 100, 200
	nodes := test.StartCluster(t, 2, cfg)
	stores := test.NewStores(t)
	for i, nd := range nodes { // each on its own node-local store
		nd.StopPubSub(t)
		nd.Start(t, cfg, staticOf(addrsOf(nodes)), echopubsub.WithDurableTopics("room:*"),
			stores.Option(fmt.Sprint("node", i)))
	}
	var mu sync.Mutex
	var events []*messages.Expired
	sub := nodes[0].System.EventStream.Subscribe(func(ev interface{}) {
		if e, ok := ev.(*messages.Expired); ok {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		}
	})
	t.Cleanup(func() { nodes[0].System.EventStream.Unsubscribe(sub) })
	c := nodes[1].Subscribe(t, "room:1", echopubsub.WithMetadata())
	o := spawnOwner(t, nodes[1], nil)
	openSession(t, nodes[1], o, []string{"room:1"})
	// About a joined node's cursor falling behind: Missed is exact then.
	waitJoined(t, nodes)
	publishStamps(t, nodes[0], "room:1", "a", 1, 3)
	wantStamps(t, c, 1, 2, 3)
	waitEnvelopes(t, o, 3)
	// Not a settling wait: node 0 must have node 1's ack of 1..3 before the
	// cut, or the cut would fail that batch and the count start earlier.
	test.Eventually(t, 5*time.Second, func() bool { return nodes[0].NodeStats(t, nodes[1].Addr).Next == 3 },
		test.Sprintf("node 1 acknowledged 1..3"))
	nodes[0].Faults.Cut(nodes[1].Addr)
	publishStamps(t, nodes[0], "room:1", "a", 4, 3+cut)
	test.Eventually(t, 5*time.Second, func() bool { return nodes[0].NodeStats(t, nodes[1].Addr).Expired },
		test.Sprintf("node 1 expired in node 0's view"))
	nodes[0].Faults.HealAll()
	test.Eventually(t, 10*time.Second, func() bool { return test.Count[*messages.CursorExpired](c) == 1 }, c.Describe)
	publishStamps(t, nodes[0], "room:1", "a", 4+cut, 4+cut)
	wantStamps(t, c, 1, 2, 3, 4+cut)
	waitEnvelopes(t, o, 4)

	// What node 1 never got, from what its subscribers received.
	lost := uint64(cut + 4 - len(c.Stamps()))
	if lost != cut {
		t.Fatalf("node 1 lost %d, want %d: %s", lost, cut, c.Describe())
	}
	var ce *messages.CursorExpired
	for _, m := range c.All() {
		if m, ok := m.(*messages.CursorExpired); ok {
			ce = m
		}
	}
	if ce.Missed != lost || ce.Node != nodes[0].Addr {
		t.Fatalf("subscriber told %v, but lost %d", ce, lost)
	}
	// The range, from the cursors delivered around the cut.
	var got []*messages.Delivery
	for _, m := range c.All() {
		if d, ok := m.(*messages.Delivery); ok {
			got = append(got, d)
		}
	}
	before, after := got[2], got[3] // a#3, a#(4+cut)
	want := fmt.Sprintf("incarnation %d [%d, %d)", before.Incarnation, before.Cursor+1, after.Cursor)
	if r := rangeOf(ce.ProducerIncarnation, ce.From, ce.To); r != want || !ce.RangeKnown() || after.Incarnation != before.Incarnation {
		t.Fatalf("subscriber told %s, but it did not get %s (a#3 at %d, a#%d at %d)", r, want, before.Cursor, 4+cut, after.Cursor)
	}
	var told []uint64
	for _, m := range o.all() {
		if m, ok := m.(*messages.CursorExpired); ok {
			told = append(told, m.Missed)
			if r := rangeOf(m.ProducerIncarnation, m.From, m.To); r != want {
				t.Fatalf("session told %s, want %s", r, want)
			}
		}
	}
	if len(told) != 1 || told[0] != lost || !equal(o.seqs(), []uint64{1, 2, 3, 4 + cut}) {
		t.Fatalf("session told missed %v, got %v: want one notice of %d", told, o.seqs(), lost)
	}
	rows, st := replayAll(t, nodes[1], nodes[0].Addr)
	if want := fmt.Sprintf("a#1 a#2 a#3 gap(%d)%s a#%d", lost, want, 4+cut); fmt.Sprint(rows) != "["+want+"]" || st.Missed != lost {
		t.Fatalf("node 1's store replayed %v (%+v), want %s", rows, st, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 1 || events[0].Missed != lost || events[0].Overwritten != cut-buffer || events[0].Node != nodes[1].Addr {
		t.Fatalf("node 0's Expired events %s, want one: missed %d, %d overwritten", describeExpired(events), lost, cut-buffer)
	}
}

// rangeOf renders a notice's range.
func rangeOf(inc, from, to uint64) string {
	return fmt.Sprintf("incarnation %d [%d, %d)", inc, from, to)
}

func describeExpired(evs []*messages.Expired) string {
	s := ""
	for _, e := range evs {
		s += fmt.Sprintf("%+v ", *e)
	}
	return s
}

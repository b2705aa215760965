package test

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// A generated stream is what one subscriber receives from a few publishers
// that behave as EchoPubSub promises: in order, with redeliveries, and with
// jumps only after a notice.

type genPub struct {
	name  string
	node  string
	group uint32
	next  uint64 // next seq to send
	sent  uint64 // last seq sent
	run   uint64 // first seq of the current contiguous run
}

type genStream struct {
	events []interface{}
	pubs   []*genPub
	// noticeAt: index of each notice that covers exactly one jump, with the
	// index of that jump's delivery.
	covers [][2]int
}

func delivery(p *genPub, seq uint64) *messages.Delivery {
	return &messages.Delivery{Node: p.node, Group: p.group, Incarnation: 1, Cursor: seq,
		Message: &testpb.Stamp{Publisher: p.name, Seq: seq}}
}

// genValid draws a valid stream. Each publisher has its own node, so a
// CursorExpired covers exactly one publisher.
func genValid(t *rapid.T, allowDropping bool) *genStream {
	n := rapid.IntRange(1, 3).Draw(t, "publishers")
	g := &genStream{}
	for i := 0; i < n; i++ {
		g.pubs = append(g.pubs, &genPub{name: fmt.Sprintf("p%d", i), node: fmt.Sprintf("n%d", i), group: uint32(i % 2), next: 1, run: 1})
	}
	steps := rapid.IntRange(1, 60).Draw(t, "steps")
	for i := 0; i < steps; i++ {
		p := g.pubs[rapid.IntRange(0, n-1).Draw(t, "pub")]
		switch rapid.IntRange(0, 9).Draw(t, "op") {
		case 0: // expired: skip some
			g.events = append(g.events, &messages.CursorExpired{Node: p.node, Group: p.group})
			notice := len(g.events) - 1
			p.next += uint64(rapid.IntRange(1, 5).Draw(t, "skip"))
			g.events = append(g.events, delivery(p, p.next))
			g.covers = append(g.covers, [2]int{notice, len(g.events) - 1})
			p.sent, p.run, p.next = p.next, p.next, p.next+1
		case 1: // redelivery of the current run's tail
			if p.sent == 0 {
				continue
			}
			from := p.sent - uint64(rapid.IntRange(0, int(min(p.sent-p.run, 3))).Draw(t, "back"))
			for s := from; s <= p.sent; s++ {
				g.events = append(g.events, delivery(p, s))
			}
		case 2:
			if !allowDropping {
				continue
			}
			g.events = append(g.events, &messages.BackPressure{State: messages.BackPressureState_BACK_PRESSURE_STATE_DROPPING})
			p.next += uint64(rapid.IntRange(0, 3).Draw(t, "dropped"))
		default:
			g.events = append(g.events, delivery(p, p.next))
			if p.next != p.sent+1 {
				p.run = p.next // a new run after a jump
			}
			p.sent, p.next = p.next, p.next+1
		}
	}
	return g
}

func run(g *genStream, events []interface{}) Report {
	c := NewChecker()
	c.AddSubscriber("s", false)
	for _, e := range events {
		c.Observe("s", e)
	}
	for _, p := range g.pubs {
		c.Finish(p.name, p.node, p.group, p.next-1)
	}
	return c.Report()
}

func TestCheckerAcceptsValidStreams(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		g := genValid(t, true)
		if r := run(g, g.events); !r.OK() {
			t.Fatalf("valid stream rejected: %v", r.Violations)
		}
	})
}

// Removing any one delivery of a valid stream without a notice is caught.
func TestCheckerCatchesPlantedGap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		g := genValid(t, false)
		var idx []int
		for i, e := range g.events {
			if d, ok := e.(*messages.Delivery); ok && !isRepeat(g.events[:i], d) && !isCoveredJump(g, i) && !nextIsCovered(g, i) {
				idx = append(idx, i)
			}
		}
		if len(idx) == 0 {
			t.Skip("no removable delivery")
		}
		cut := idx[rapid.IntRange(0, len(idx)-1).Draw(t, "cut")]
		// Remove every copy of that seq (redeliveries would refill the gap).
		d := g.events[cut].(*messages.Delivery)
		var events []interface{}
		for _, e := range g.events {
			if o, ok := e.(*messages.Delivery); ok && stampOf(o).Publisher == stampOf(d).Publisher && stampOf(o).Seq == stampOf(d).Seq {
				continue
			}
			events = append(events, e)
		}
		if r := run(g, events); r.Counts.SilentGaps == 0 {
			t.Fatalf("planted gap (%v) not caught", stampOf(d))
		}
	})
}

// Swapping two consecutive new deliveries of one publisher is caught.
func TestCheckerCatchesPlantedReorder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		g := genValid(t, false)
		var pairs [][2]int
		for i, e := range g.events {
			d, ok := e.(*messages.Delivery)
			if !ok || isRepeat(g.events[:i], d) {
				continue
			}
			for j := i + 1; j < len(g.events); j++ {
				if o, ok := g.events[j].(*messages.Delivery); ok && stampOf(o).Publisher == stampOf(d).Publisher {
					if !isRepeat(g.events[:j], o) && stampOf(o).Seq > stampOf(d).Seq {
						pairs = append(pairs, [2]int{i, j})
					}
					break
				}
			}
		}
		if len(pairs) == 0 {
			t.Skip("no swappable pair")
		}
		p := pairs[rapid.IntRange(0, len(pairs)-1).Draw(t, "pair")]
		events := append([]interface{}(nil), g.events...)
		events[p[0]], events[p[1]] = events[p[1]], events[p[0]]
		if r := run(g, events); r.Counts.Reorders+r.Counts.SilentGaps == 0 {
			t.Fatalf("planted reorder at %v not caught", p)
		}
	})
}

// Dropping the CursorExpired that covered a jump makes the jump silent.
func TestCheckerCatchesMissingNotice(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		g := genValid(t, false)
		if len(g.covers) == 0 {
			t.Skip("no covered jump")
		}
		cv := g.covers[rapid.IntRange(0, len(g.covers)-1).Draw(t, "cover")]
		ce := g.events[cv[0]].(*messages.CursorExpired)
		// Only planted if no other notice for the same stream lies between
		// the publisher's previous delivery and the jump.
		jump := stampOf(g.events[cv[1]].(*messages.Delivery))
		for i := cv[1] - 1; i >= 0; i-- {
			if d, ok := g.events[i].(*messages.Delivery); ok && stampOf(d).Publisher == jump.Publisher {
				break
			}
			if o, ok := g.events[i].(*messages.CursorExpired); ok && i != cv[0] && o.Node == ce.Node && o.Group == ce.Group {
				t.Skip("two notices cover the jump")
			}
		}
		events := append(append([]interface{}(nil), g.events[:cv[0]]...), g.events[cv[0]+1:]...)
		if r := run(g, events); r.Counts.SilentGaps == 0 {
			t.Fatalf("jump to %d without its notice not caught", jump.Seq)
		}
	})
}

func TestCheckerTailGapAndLateSubscriber(t *testing.T) {
	p := &genPub{name: "p", node: "n", group: 0}
	c := NewChecker()
	c.AddSubscriber("early", false)
	c.AddSubscriber("late", true)
	for s := uint64(1); s <= 3; s++ {
		c.Observe("early", delivery(p, s))
	}
	c.Observe("late", delivery(p, 2))
	c.Observe("late", delivery(p, 3))
	c.Observe("late", &messages.CursorExpired{Node: "n"})
	if got := c.Behind("p", 5); got != 1 {
		t.Fatalf("Behind = %d, want 1 (early misses 4,5; late was told)", got)
	}
	if v := c.Finish("p", "n", 0, 5); len(v) != 1 || v[0].Subscriber != "early" || v[0].Prev != 3 {
		t.Fatalf("Finish = %v, want one tail gap for early after 3", v)
	}
	if r := c.Report(); r.Counts.SilentGaps != 1 || r.Counts.Expiries != 1 {
		t.Fatalf("report %+v", r.Counts)
	}
}

func stampOf(d *messages.Delivery) *testpb.Stamp { return d.Message.(*testpb.Stamp) }

func isRepeat(before []interface{}, d *messages.Delivery) bool {
	for _, e := range before {
		if o, ok := e.(*messages.Delivery); ok && stampOf(o).Publisher == stampOf(d).Publisher && stampOf(o).Seq >= stampOf(d).Seq {
			return true
		}
	}
	return false
}

// nextIsCovered: the publisher's next new delivery after i is a covered
// jump, whose notice would also cover a gap at i.
func nextIsCovered(g *genStream, i int) bool {
	d := g.events[i].(*messages.Delivery)
	for j := i + 1; j < len(g.events); j++ {
		if o, ok := g.events[j].(*messages.Delivery); ok && stampOf(o).Publisher == stampOf(d).Publisher && !isRepeat(g.events[:j], o) {
			return isCoveredJump(g, j)
		}
	}
	return false
}

func isCoveredJump(g *genStream, i int) bool {
	for _, cv := range g.covers {
		if cv[1] == i {
			return true
		}
	}
	return false
}

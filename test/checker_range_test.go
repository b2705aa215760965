package test

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/internal/prop"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// Rule 7 (ranges). A generated range stream is what one subscriber of the
// one topic (CursorContiguous) receives from a few producers, each with
// one publisher: deliveries in cursor order with redeliveries; expiries
// whose range is exactly what the subscriber then does not get (From its
// cursor due, To the next cursor delivered), possibly after a DROPPING
// window (the node's cursor is past what the subscriber got); DROPPING
// windows; restarts (a notice of unknown range, a new incarnation). Every
// producer delivers once more at the end, so every range is judged.

type rangeProducer struct {
	node      string
	group     uint32
	inc, next uint64 // cursor due next
	seq       uint64 // the publisher's last number
	pub       string
	last      *messages.Delivery // the last delivered, for a redelivery
}

func genRanges(t *prop.T) []interface{} {
	n := prop.IntRange(1, 3).Draw(t, "producers")
	var ps []*rangeProducer
	for i := 0; i < n; i++ {
		ps = append(ps, &rangeProducer{node: fmt.Sprintf("n%d", i%2), group: uint32(i / 2), inc: 1,
			next: uint64(prop.IntRange(0, 3).Draw(t, "first")), pub: fmt.Sprintf("p%d", i)})
	}
	var ev []interface{}
	deliver := func(p *rangeProducer) {
		p.seq++
		p.last = &messages.Delivery{Node: p.node, Group: p.group, Incarnation: p.inc, Cursor: p.next,
			Message: &testpb.Stamp{Publisher: p.pub, Seq: p.seq}}
		ev = append(ev, p.last)
		p.next++
	}
	lose := func(p *rangeProducer, k uint64) { p.next += k; p.seq += k }
	expire := func(p *rangeProducer, k uint64) {
		ev = append(ev, &messages.CursorExpired{Node: p.node, Group: p.group, Missed: k, Reason: "fell behind the buffer",
			ProducerIncarnation: p.inc, From: p.next, To: p.next + k})
		lose(p, k)
	}
	steps := prop.IntRange(1, 40).Draw(t, "steps")
	for i := 0; i < steps; i++ {
		p := ps[prop.IntRange(0, n-1).Draw(t, "producer")]
		switch prop.IntRange(0, 9).Draw(t, "op") {
		case 0:
			expire(p, uint64(prop.IntRange(1, 5).Draw(t, "missed")))
		case 1: // dropped by the subscriber's bound, then the node fell behind
			ev = append(ev, dropping())
			lose(p, uint64(prop.IntRange(1, 3).Draw(t, "dropped")))
			if prop.Bool().Draw(t, "resumed first") {
				ev = append(ev, resumed())
			}
			expire(p, uint64(prop.IntRange(1, 5).Draw(t, "missed")))
		case 2:
			ev = append(ev, dropping())
			lose(p, uint64(prop.IntRange(1, 3).Draw(t, "dropped")))
			ev = append(ev, resumed())
		case 3: // restart: the end of the old incarnation is not known
			ev = append(ev, &messages.CursorExpired{Node: p.node, Group: p.group, Reason: ReasonRestarted,
				ProducerIncarnation: p.inc, From: p.next})
			p.inc++
			p.next = 0
			p.seq += uint64(prop.IntRange(0, 2).Draw(t, "lost in the restart"))
		case 4: // a redelivery of the last one
			if p.last != nil && p.last.Incarnation == p.inc && p.last.Cursor == p.next-1 {
				ev = append(ev, p.last)
			}
		default:
			deliver(p)
		}
	}
	for _, p := range ps {
		deliver(p)
	}
	return ev
}

func runRanges(ev []interface{}) Report {
	c := NewChecker()
	c.CursorContiguous = true
	c.AddSubscriber("s", 0)
	for _, e := range ev {
		c.Observe("s", e)
	}
	c.Finish()
	return c.Report()
}

func TestCheckerAcceptsExactRanges(t *testing.T) {
	prop.CheckN(t, 1000, func(t *prop.T) {
		ev := genRanges(t)
		if r := runRanges(ev); !r.OK() || r.Counts.WrongRanges != 0 {
			t.Fatalf("exact ranges judged wrong: %+v %v\n%s", r.Counts, r.Violations, dumpEvents(ev))
		}
	})
}

// TestCheckerCatchesPlantedWrongRange: one ranged notice of a valid stream
// gets a range off by one at either end: naming a cursor the subscriber
// then got or was told of (more), or leaving one unnamed (less: a silent
// gap). The checker must fail the stream, when nothing else (a DROPPING, a
// notice of unknown range) stands where the range is judged.
func TestCheckerCatchesPlantedWrongRange(t *testing.T) {
	planted := 0
	prop.CheckN(t, 1000, func(t *prop.T) {
		ev := genRanges(t)
		type cand struct {
			i   int
			how string
		}
		var cands []cand
		for i, e := range ev {
			ce, ok := e.(*messages.CursorExpired)
			if !ok || !ce.RangeKnown() {
				continue
			}
			if h := rangeNeighbour(ev, i, ce, -1); h >= 0 {
				cands = append(cands, cand{i, "from-1"})
				if ce.From+1 < ce.To {
					cands = append(cands, cand{i, "from+1"})
				}
			}
			if j := rangeNeighbour(ev, i, ce, +1); j >= 0 {
				cands = append(cands, cand{i, "to+1"})
				if ce.To-1 > ce.From {
					cands = append(cands, cand{i, "to-1"})
				}
			}
		}
		if len(cands) == 0 {
			return // no range judged by a neighbour in this case (counted below)
		}
		planted++
		c := cands[prop.IntRange(0, len(cands)-1).Draw(t, "plant")]
		bad := proto.Clone(ev[c.i].(*messages.CursorExpired)).(*messages.CursorExpired)
		switch c.how {
		case "from-1":
			bad.From--
		case "from+1":
			bad.From++
		case "to+1":
			bad.To++
		case "to-1":
			bad.To--
		}
		bad2 := append([]interface{}(nil), ev...)
		bad2[c.i] = bad
		if r := runRanges(bad2); r.OK() {
			t.Fatalf("range %s at event %d not caught: %+v\n%s", c.how, c.i, r.Counts, dumpEvents(bad2))
		}
	})
	if planted < 100 { // the generator must reach judged ranges often, or this proves little
		t.Fatalf("only %d of 1000 cases had a range to plant", planted)
	}
}

// rangeNeighbour is the index of the event that judges notice i's range
// on side dir (-1: the last delivery or ranged notice of its incarnation
// before it, for From; +1: the next delivery of it after, for To), or -1
// when there is none or a DROPPING or a notice of unknown range of its
// producer stands between (which may cover what a wrong range leaves out).
func rangeNeighbour(ev []interface{}, i int, ce *messages.CursorExpired, dir int) int {
	for j := i + dir; j >= 0 && j < len(ev); j += dir {
		switch e := ev[j].(type) {
		case *messages.BackPressure:
			if e.State == messages.BackPressureState_BACK_PRESSURE_STATE_DROPPING {
				return -1
			}
		case *messages.CursorExpired:
			if e.Node != ce.Node || e.Group != ce.Group {
				continue
			}
			if !e.RangeKnown() {
				return -1
			}
			if dir < 0 && e.ProducerIncarnation == ce.ProducerIncarnation {
				return j
			}
		case *messages.Delivery:
			if e.Node == ce.Node && e.Group == ce.Group && e.Incarnation == ce.ProducerIncarnation && !redelivered(ev, j) {
				return j
			}
		}
	}
	return -1
}

// redelivered reports whether delivery j repeats an earlier one.
func redelivered(ev []interface{}, j int) bool {
	d := ev[j].(*messages.Delivery)
	for _, e := range ev[:j] {
		if o, ok := e.(*messages.Delivery); ok && o.Node == d.Node && o.Group == d.Group && o.Incarnation == d.Incarnation && o.Cursor >= d.Cursor {
			return true
		}
	}
	return false
}

func dumpEvents(ev []interface{}) string {
	s := ""
	for i, e := range ev {
		s += fmt.Sprintf("  %d: %v\n", i, e)
	}
	return s
}

// A ranged notice covers its range only: one about incarnation 1 does not
// cover a jump in incarnation 2's cursors (a notice of unknown range
// would).
func TestCheckerRangedNoticeCoversOnlyItsRange(t *testing.T) {
	d := func(inc, cursor, seq uint64) *messages.Delivery {
		return &messages.Delivery{Node: "n", Incarnation: inc, Cursor: cursor, Message: &testpb.Stamp{Publisher: fmt.Sprint("p", inc), Seq: seq}}
	}
	for _, ranged := range []bool{true, false} {
		old := &messages.CursorExpired{Node: "n", Reason: ReasonRestarted, ProducerIncarnation: 1, From: 5}
		if ranged {
			old.Reason, old.To = "producer stopped before this node got everything", 7
		}
		r := runRanges([]interface{}{d(1, 4, 1), d(2, 0, 1), old, d(2, 2, 2)}) // incarnation 2's cursor 1 lost
		if got := r.Counts.CursorGaps; (got == 1) != ranged {
			t.Errorf("ranged %v: cursor gaps %d: %v", ranged, got, r.Violations)
		}
	}
}

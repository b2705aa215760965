package test

import (
	"fmt"
	"testing"

	"github.com/echopubsub/echopubsub/internal/prop"

	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// A generated stream is what one subscriber receives from a few publishers
// that behave as EchoPubSub promises: in order, with redeliveries, with
// losses only after a notice that explains them (CursorExpired for the
// publisher's producer, or DROPPING ... RESUMED with nothing delivered in
// between, as the dispatcher does), publishers sharing producers (so a
// CursorExpired speaks for several streams), and a subscriber that may
// subscribe late (after some messages were broadcast: any suffix of those
// is its baseline). Every notice explains at least one loss.

type genPub struct {
	name      string
	key       streamKey
	sentAt    []int64 // sentAt[seq-1]
	next      uint64  // next seq to deliver
	delivered uint64  // highest seq delivered
	run       uint64  // first seq of the current contiguous run
}

type genStream struct {
	since  int64
	events []interface{}
	pubs   []*genPub
}

func delivery(p *genPub, seq uint64) *messages.Delivery {
	return &messages.Delivery{Node: p.key.node, Group: p.key.group, Incarnation: 1, Cursor: seq,
		Message: &testpb.Stamp{Publisher: p.name, Seq: seq}}
}

func dropping() *messages.BackPressure {
	return &messages.BackPressure{State: messages.BackPressureState_BACK_PRESSURE_STATE_DROPPING}
}

func resumed() *messages.BackPressure {
	return &messages.BackPressure{State: messages.BackPressureState_BACK_PRESSURE_STATE_RESUMED}
}

func genValid(t *prop.T) *genStream {
	keys := []streamKey{{"n0", 0}, {"n0", 1}, {"n1", 0}}
	n := prop.IntRange(1, 4).Draw(t, "publishers")
	g := &genStream{}
	clock := int64(0)
	tick := func() int64 { clock++; return clock }
	late := prop.Bool().Draw(t, "late")
	for i := 0; i < n; i++ {
		p := &genPub{name: fmt.Sprintf("p%d", i), key: keys[prop.IntRange(0, len(keys)-1).Draw(t, "key")], next: 1}
		if late { // broadcast before the subscriber subscribed; its baseline is any suffix
			k := prop.IntRange(0, 4).Draw(t, "prehistory")
			for s := 0; s < k; s++ {
				p.sentAt = append(p.sentAt, tick())
			}
			p.next = uint64(prop.IntRange(1, k+1).Draw(t, "baseline"))
		}
		g.pubs = append(g.pubs, p)
	}
	if late {
		g.since = tick()
	}
	// publish makes sure seqs up to s were broadcast.
	publish := func(p *genPub, s uint64) {
		for uint64(len(p.sentAt)) < s {
			p.sentAt = append(p.sentAt, tick())
		}
	}
	deliver := func(p *genPub) {
		publish(p, p.next)
		if p.run == 0 || p.next != p.delivered+1 {
			p.run = p.next
		}
		g.events = append(g.events, delivery(p, p.next))
		p.delivered, p.next = p.next, p.next+1
	}
	// lose loses k messages broadcast now (and what is pending of a late
	// subscriber's baseline: that it may miss anyway).
	lose := func(p *genPub, k int) {
		p.next = max(p.next, uint64(len(p.sentAt))+1) + uint64(k)
		publish(p, p.next-1)
	}
	steps := prop.IntRange(1, 50).Draw(t, "steps")
	for i := 0; i < steps; i++ {
		p := g.pubs[prop.IntRange(0, n-1).Draw(t, "pub")]
		switch prop.IntRange(0, 9).Draw(t, "op") {
		case 0: // the producer's buffer expired: p (and maybe others through it) lose some
			g.events = append(g.events, &messages.CursorExpired{Node: p.key.node, Group: p.key.group, Reason: "fell behind the buffer"})
			lose(p, prop.IntRange(1, 5).Draw(t, "skip"))
			for _, q := range g.pubs {
				if q != p && q.key == p.key && prop.Bool().Draw(t, "also") {
					lose(q, prop.IntRange(1, 3).Draw(t, "skip"))
				}
			}
		case 1: // redelivery of what was just delivered
			if p.delivered == 0 || p.delivered < p.next-1 {
				continue
			}
			back := uint64(prop.IntRange(0, 2).Draw(t, "back"))
			for s := p.delivered - min(back, p.delivered-p.run); s <= p.delivered; s++ {
				g.events = append(g.events, delivery(p, s))
			}
		case 2: // dropped for: DROPPING, losses, RESUMED; nothing delivered in between
			g.events = append(g.events, dropping())
			lose(p, prop.IntRange(1, 3).Draw(t, "dropped"))
			for _, q := range g.pubs {
				if q != p && prop.Bool().Draw(t, "also") {
					lose(q, prop.IntRange(1, 3).Draw(t, "dropped"))
				}
			}
			if i < steps-1 || prop.Bool().Draw(t, "resume at the end") {
				g.events = append(g.events, resumed())
			}
		default:
			deliver(p)
		}
	}
	// Drain: what was broadcast and not lost is delivered.
	for _, p := range g.pubs {
		for p.next <= uint64(len(p.sentAt)) { // only a late subscriber's baseline is pending
			deliver(p)
		}
	}
	return g
}

func runEvents(g *genStream, events []interface{}, prepare ...func(*Checker)) Report {
	c := NewChecker()
	c.AddSubscriber("s", g.since)
	for _, p := range g.pubs {
		for i, at := range p.sentAt {
			c.Published(p.name, p.key.node, p.key.group, uint64(i)+1, at)
		}
	}
	for _, f := range prepare {
		f(c)
	}
	for _, e := range events {
		c.Observe("s", e)
	}
	c.Finish()
	return c.Report()
}

// --- an independent, naive statement of the rules, for choosing plants ---

func stampOf(d *messages.Delivery) *testpb.Stamp { return d.Message.(*testpb.Stamp) }

// firstAfter: the first seq p broadcast after the subscriber subscribed.
func (g *genStream) firstAfter(p *genPub) uint64 {
	for i, at := range p.sentAt {
		if at > g.since {
			return uint64(i) + 1
		}
	}
	return 0
}

// explains: event e is a notice that can explain a loss of p.
func explains(e interface{}, p *genPub) bool {
	switch m := e.(type) {
	case *messages.CursorExpired:
		return m.Node == p.key.node && m.Group == p.key.group
	case *messages.BackPressure:
		return m.State == messages.BackPressureState_BACK_PRESSURE_STATE_DROPPING
	}
	return false
}

// loss is an interval of events (exclusive at both ends, as indices into
// the events) in which p lost something: a notice that explains p must
// lie in it.
type loss struct {
	pub      *genPub
	from, to int
}

// losses lists the losses of events: jumps, late starts and short tails.
func (g *genStream) losses(events []interface{}) []loss {
	var out []loss
	for _, p := range g.pubs {
		f := g.firstAfter(p)
		high, prev := uint64(0), -1
		for i, e := range events {
			d, ok := e.(*messages.Delivery)
			if !ok || stampOf(d).Publisher != p.name {
				continue
			}
			s := stampOf(d).Seq
			switch {
			case prev == -1:
				if f > 0 && s > f {
					out = append(out, loss{p, -1, i})
				}
			case s > high+1:
				out = append(out, loss{p, prev, i})
			case s <= high:
				continue
			}
			high, prev = s, i
		}
		if (prev >= 0 || f > 0) && high < uint64(len(p.sentAt)) {
			out = append(out, loss{p, prev, len(events)})
		}
	}
	return out
}

func coveredIn(events []interface{}, l loss, skip int) bool {
	for i := l.from + 1; i < l.to; i++ {
		if i != skip && explains(events[i], l.pub) {
			return true
		}
	}
	return false
}

// uncovered: a loss no notice explains (what the checker must report).
func (g *genStream) uncovered(events []interface{}) []loss {
	var out []loss
	for _, l := range g.losses(events) {
		if !coveredIn(events, l, -1) {
			out = append(out, l)
		}
	}
	return out
}

func without(events []interface{}, drop func(i int, e interface{}) bool) []interface{} {
	var out []interface{}
	for i, e := range events {
		if !drop(i, e) {
			out = append(out, e)
		}
	}
	return out
}

// withoutSeqs removes every copy of p's deliveries with lo <= seq <= hi.
func withoutSeqs(events []interface{}, p string, lo, hi uint64) []interface{} {
	return without(events, func(_ int, e interface{}) bool {
		d, ok := e.(*messages.Delivery)
		return ok && stampOf(d).Publisher == p && stampOf(d).Seq >= lo && stampOf(d).Seq <= hi
	})
}

func newDeliveries(events []interface{}) []int {
	var out []int
	high := map[string]uint64{}
	for i, e := range events {
		if d, ok := e.(*messages.Delivery); ok && stampOf(d).Seq > high[stampOf(d).Publisher] {
			high[stampOf(d).Publisher] = stampOf(d).Seq
			out = append(out, i)
		}
	}
	return out
}

// --- the properties ---

func TestCheckerAcceptsValidStreams(t *testing.T) {
	prop.Check(t, func(t *prop.T) {
		g := genValid(t)
		if u := g.uncovered(g.events); len(u) != 0 {
			t.Fatalf("generator made an uncovered loss: %+v", u[0])
		}
		r := runEvents(g, g.events)
		if !r.OK() {
			t.Fatalf("valid stream rejected: %v", r.Violations)
		}
		// Every generated notice explains a loss: no false alarm.
		if r.Counts.FalseAlarms != 0 || r.Counts.Precautionary != 0 {
			t.Fatalf("false alarms %d, precautionary %d in a stream whose every notice explains a loss",
				r.Counts.FalseAlarms, r.Counts.Precautionary)
		}
	})
}

// A message removed (every copy) from a stream that also carries
// legitimate notices, where no notice explains it, is caught: in
// mid-stream (silent gap), as the first of a stream the subscriber had to
// start with (start gap), or as the last (tail gap).
func TestCheckerCatchesPlantedGap(t *testing.T) {
	prop.Check(t, func(t *prop.T) {
		g := genValid(t)
		idx := newDeliveries(g.events)
		if len(idx) == 0 {
			t.Skip("no delivery")
		}
		d := g.events[idx[prop.IntRange(0, len(idx)-1).Draw(t, "cut")]].(*messages.Delivery)
		st := stampOf(d)
		events := withoutSeqs(g.events, st.Publisher, st.Seq, st.Seq)
		u := g.uncovered(events)
		if len(u) == 0 {
			t.Skip("the cut is explained by a legitimate notice, or is a baseline")
		}
		r := runEvents(g, events)
		if r.Counts.SilentGaps == 0 {
			t.Fatalf("planted gap (%v) not caught; uncovered: %+v\n%s", st, u, dump(g, events))
		}
		kind := SilentGap
		if u[0].to == len(events) { // also a stream never heard from at all
			kind = TailGap
		} else if u[0].from == -1 {
			kind = StartGap
		}
		for _, v := range r.Violations {
			if v.Publisher == st.Publisher && v.Kind == kind {
				return
			}
		}
		t.Fatalf("planted %s not named: %v", kind, r.Violations)
	})
}

// A loss right after RESUMED (in a stream whose DROPPING window was closed
// by its first message after RESUMED) is caught.
func TestCheckerCatchesLossAfterResumed(t *testing.T) {
	prop.Check(t, func(t *prop.T) {
		g := genValid(t)
		// Candidates: the second new delivery of a stream after a RESUMED.
		var cands []*messages.Delivery
		for r, e := range g.events {
			if bp, ok := e.(*messages.BackPressure); !ok || bp.State != messages.BackPressureState_BACK_PRESSURE_STATE_RESUMED {
				continue
			}
			seen := map[string]int{}
			for _, i := range newDeliveries(g.events) {
				if i > r {
					d := g.events[i].(*messages.Delivery)
					seen[stampOf(d).Publisher]++
					if seen[stampOf(d).Publisher] == 2 {
						cands = append(cands, d)
					}
				}
			}
		}
		if len(cands) == 0 {
			t.Skip("no stream with two messages after a RESUMED")
		}
		st := stampOf(cands[prop.IntRange(0, len(cands)-1).Draw(t, "cut")])
		events := withoutSeqs(g.events, st.Publisher, st.Seq, st.Seq)
		if len(g.uncovered(events)) == 0 {
			t.Skip("a later notice explains it")
		}
		if r := runEvents(g, events); r.Counts.SilentGaps == 0 {
			t.Fatalf("loss of %v after RESUMED not caught (the DROPPING window did not close)", st)
		}
	})
}

// Removing a notice that alone explained a loss, moving it before the
// stream's previous message, or making it a CursorExpired for another
// producer, each makes that loss silent.
func TestCheckerCatchesMissingOrMisplacedNotice(t *testing.T) {
	prop.Check(t, func(t *prop.T) {
		g := genValid(t)
		type sole struct {
			l      loss
			notice int
		}
		var soles []sole
		for _, l := range g.losses(g.events) {
			for i := l.from + 1; i < l.to; i++ {
				if explains(g.events[i], l.pub) && !coveredIn(g.events, l, i) {
					soles = append(soles, sole{l, i})
				}
			}
		}
		if len(soles) == 0 {
			t.Skip("no loss with a sole notice")
		}
		s := soles[prop.IntRange(0, len(soles)-1).Draw(t, "sole")]
		var events []interface{}
		switch how := prop.IntRange(0, 2).Draw(t, "how"); how {
		case 0:
			events = without(g.events, func(i int, _ interface{}) bool { return i == s.notice })
		case 1:
			if s.l.from < 0 {
				t.Skip("no previous message to move it before")
			}
			for i, e := range g.events {
				if i == s.l.from {
					events = append(events, g.events[s.notice])
				}
				if i != s.notice {
					events = append(events, e)
				}
			}
		case 2:
			if _, ok := g.events[s.notice].(*messages.CursorExpired); !ok {
				t.Skip("not a CursorExpired")
			}
			events = append([]interface{}(nil), g.events...)
			events[s.notice] = &messages.CursorExpired{Node: "elsewhere", Group: s.l.pub.key.group, Reason: "fell behind the buffer"}
		}
		if len(g.uncovered(events)) == 0 {
			t.Skip("still explained")
		}
		if r := runEvents(g, events); r.Counts.SilentGaps == 0 {
			t.Fatalf("loss of %s in events (%d, %d) without its notice at %d not caught", s.l.pub.name, s.l.from, s.l.to, s.notice)
		}
	})
}

// A subscriber that stops hearing from a publisher that kept publishing is
// caught at the end, unless told after its last message.
func TestCheckerCatchesSilentTail(t *testing.T) {
	prop.Check(t, func(t *prop.T) {
		g := genValid(t)
		p := g.pubs[prop.IntRange(0, len(g.pubs)-1).Draw(t, "pub")]
		if len(p.sentAt) == 0 {
			t.Skip("nothing to cut")
		}
		// Cut at least one message: from is at most the last one sent.
		from := uint64(prop.IntRange(1, len(p.sentAt)).Draw(t, "from"))
		events := withoutSeqs(g.events, p.name, from, ^uint64(0))
		if len(g.uncovered(events)) == 0 {
			t.Skip("explained")
		}
		r := runEvents(g, events)
		if r.Counts.SilentGaps == 0 {
			t.Fatalf("%s silent from %d on not caught", p.name, from)
		}
	})
}

// Swapping two consecutive new deliveries of one publisher is caught.
func TestCheckerCatchesPlantedReorder(t *testing.T) {
	prop.Check(t, func(t *prop.T) {
		g := genValid(t)
		var pairs [][2]int
		idx := newDeliveries(g.events)
		for a, i := range idx {
			for _, j := range idx[a+1:] {
				if stampOf(g.events[j].(*messages.Delivery)).Publisher == stampOf(g.events[i].(*messages.Delivery)).Publisher {
					pairs = append(pairs, [2]int{i, j})
					break
				}
			}
		}
		if len(pairs) == 0 {
			t.Skip("no swappable pair")
		}
		p := pairs[prop.IntRange(0, len(pairs)-1).Draw(t, "pair")]
		events := append([]interface{}(nil), g.events...)
		events[p[0]], events[p[1]] = events[p[1]], events[p[0]]
		if r := runEvents(g, events); r.Counts.Reorders+r.Counts.SilentGaps == 0 {
			t.Fatalf("planted reorder at %v not caught", p)
		}
	})
}

// A notice after which nothing it speaks for was missing is a false alarm;
// a "producer restarted" one is precautionary instead.
func TestCheckerCountsFalseAlarms(t *testing.T) {
	prop.Check(t, func(t *prop.T) {
		g := genValid(t)
		at := prop.IntRange(0, len(g.events)).Draw(t, "at")
		var extra interface{}
		switch prop.IntRange(0, 2).Draw(t, "kind") {
		case 0:
			extra = &messages.CursorExpired{Node: "n9", Group: 0, Reason: "fell behind the buffer"}
		case 1:
			extra = &messages.CursorExpired{Node: "n9", Group: 0, Reason: ReasonRestarted}
		case 2:
			extra = dropping()
		}
		events := append(append(append([]interface{}(nil), g.events[:at]...), extra), g.events[at:]...)
		// Only a notice inserted where it explains no loss is a false alarm.
		for _, l := range g.losses(events) {
			if l.from < at && at < l.to && explains(extra, l.pub) {
				t.Skip("it explains a real loss")
			}
		}
		r := runEvents(g, events)
		if !r.OK() {
			t.Fatalf("an extra notice made a violation: %v", r.Violations)
		}
		want := Counts{FalseAlarms: 1}
		if ce, ok := extra.(*messages.CursorExpired); ok && ce.Reason == ReasonRestarted {
			want = Counts{Precautionary: 1}
		}
		if r.Counts.FalseAlarms != want.FalseAlarms || r.Counts.Precautionary != want.Precautionary {
			t.Fatalf("false alarms %d, precautionary %d; want %d, %d", r.Counts.FalseAlarms, r.Counts.Precautionary,
				want.FalseAlarms, want.Precautionary)
		}
	})
}

// A dead subscriber is not checked at the end, and its notices that a
// stream never answered are not judged.
func TestCheckerDeadSubscriber(t *testing.T) {
	p := &genPub{name: "p", key: streamKey{"n", 0}}
	c := NewChecker()
	c.AddSubscriber("alive", 0)
	c.AddSubscriber("dead", 0)
	for s := uint64(1); s <= 5; s++ {
		c.Published("p", "n", 0, s, int64(s))
	}
	for s := uint64(1); s <= 3; s++ {
		c.Observe("alive", delivery(p, s))
		c.Observe("dead", delivery(p, s))
	}
	c.Observe("dead", &messages.CursorExpired{Node: "n", Reason: ReasonRestarted})
	c.SubscriberDied("dead")
	if got := c.Behind("p", 5, 5); got != 1 {
		t.Fatalf("Behind = %d, want 1 (alive misses 4, 5)", got)
	}
	v := c.Finish()
	if len(v) != 1 || v[0].Subscriber != "alive" || v[0].Kind != TailGap || v[0].Prev != 3 {
		t.Fatalf("Finish = %v, want one tail gap for alive after 3", v)
	}
	// The dead subscriber's notice came after its last message of p and p
	// went on: it cannot be judged.
	if r := c.Report(); r.Counts.Unjudged != 1 || r.Counts.FalseAlarms != 0 || r.Counts.Precautionary != 0 {
		t.Fatalf("report %+v", r.Counts)
	}
}

func dump(g *genStream, events []interface{}) string {
	s := fmt.Sprintf("since %d\n", g.since)
	for _, p := range g.pubs {
		s += fmt.Sprintf("  %s %v sent %v\n", p.name, p.key, p.sentAt)
	}
	for i, e := range events {
		s += fmt.Sprintf("  %d: %v\n", i, e)
	}
	return s
}

// Rule 6: a producer's cursors close a DROPPING window per producer. p1
// loses a message after the producer's first message after RESUMED (from
// p0): its publisher stream alone would let the DROPPING cover it.
func TestCheckerCursorRule(t *testing.T) {
	key := streamKey{"n", 0}
	d := func(pub string, seq, cursor uint64) *messages.Delivery {
		return &messages.Delivery{Node: key.node, Group: key.group, Incarnation: 7, Cursor: cursor,
			Message: &testpb.Stamp{Publisher: pub, Seq: seq}}
	}
	build := func(lose bool) []interface{} {
		ev := []interface{}{d("p0", 1, 1), d("p1", 1, 2), dropping(), resumed(), d("p0", 3, 5)} // cursors 3, 4 dropped
		if lose {
			return append(ev, d("p1", 4, 7)) // cursor 6 (p1's 3) lost after the window closed
		}
		return append(ev, d("p1", 3, 6), d("p1", 4, 7))
	}
	for _, tc := range []struct {
		lose, cursors bool
		want          int64
	}{{false, true, 0}, {true, true, 1}, {true, false, 0}} {
		c := NewChecker()
		c.CursorContiguous = tc.cursors
		c.AddSubscriber("s", 0)
		for _, e := range build(tc.lose) {
			c.Observe("s", e)
		}
		c.Finish()
		if r := c.Report(); r.Counts.CursorGaps != tc.want || r.Counts.SilentGaps != tc.want {
			t.Errorf("lose %v, cursors %v: cursor gaps %d, silent gaps %d, want %d: %v", tc.lose, tc.cursors,
				r.Counts.CursorGaps, r.Counts.SilentGaps, tc.want, r.Violations)
		}
	}
}

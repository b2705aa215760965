package test

import (
	"fmt"
	"sort"
	"sync"

	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// Checker states EchoPubSub's guarantee as code. It is fed, per subscriber
// and in arrival order, everything that subscriber received: Deliveries
// (WithMetadata) carrying *testpb.Stamp, *messages.CursorExpired and
// *messages.BackPressure notices; and, per publisher, what it published
// (Published: sequence number and the wall-clock time it was broadcast).
// Each publisher numbers its messages 1, 2, 3, ... and broadcasts them
// through one producer, (node, group): its stream comes through there.
//
// Terms. Every event a subscriber receives has an index in that
// subscriber's arrival order. A notice "can explain" a loss in the stream
// of publisher p at subscriber s when it is either a CursorExpired for the
// producer (node, group) p's stream comes through, or a BackPressure
// DROPPING for s (every DROPPING a subscriber receives is about itself). A
// loss is "covered" when a notice that can explain it arrived in the
// interval the rule names; every covering notice in that interval is marked
// as having explained a loss.
//
// The rules, per (subscriber, publisher) stream:
//
//  1. Order. Sequence numbers increase by exactly one. A number at or below
//     the highest received is fine only if it was received before (a
//     redelivery, counted as a duplicate); one never received is a Reorder.
//  2. Jumps (SilentGap). A jump forward is covered only by a notice that
//     arrived after the publisher's previous message (in this stream) and
//     before the jump. A notice received before the previous message
//     covers nothing, however close; a notice for another producer covers
//     nothing.
//  3. DROPPING windows. Rule 2 closes a DROPPING window at the first
//     message of the stream after the matching RESUMED: that message may
//     jump (what was dropped), the next may not. RESUMED itself covers
//     nothing.
//  4. Start (StartGap). A subscriber subscribed at time T must start the
//     stream at or before the first message the publisher broadcast after
//     T, or be covered by a notice received between subscribing and its
//     first message of that stream. A subscriber subscribed before the
//     publisher's first message must therefore start at 1. (What was
//     broadcast before T it may or may not receive: its first message of an
//     older number is its baseline.)
//  5. End (TailGap). At Finish, a subscriber that is still alive and stops
//     short of the publisher's last message (or never heard from a
//     publisher that broadcast after it subscribed) must have received,
//     after its last message of that stream (after subscribing, if none), a
//     notice that can explain it. A subscriber that died (its process was
//     killed) is not checked at the end: there is no one left to tell.
//  6. Cursors (only with CursorContiguous: every publisher broadcasts on
//     the one topic the subscribers subscribe to, so every entry a producer
//     writes goes to every subscriber). Per (subscriber, producer node,
//     group, incarnation), Delivery cursors of new entries increase by
//     exactly one; a forward jump (CursorGap) is covered only by a notice
//     of unknown range for that producer, or a DROPPING, that arrived after
//     the previous entry of that producer and before the jump (a notice of
//     known range moves the cursor due instead: rule 7). This closes DROPPING
//     windows per producer: a loss after a producer's first message after
//     RESUMED is caught even when the lost message's publisher had nothing
//     in between.
//  7. Ranges (with CursorContiguous). A CursorExpired whose range is known
//     (messages.CursorExpired.RangeKnown: producer incarnation I's cursors
//     [From, To)) must name exactly the cursors of I the subscriber did not
//     get there. Per (subscriber, node, group, I) the checker keeps next,
//     the cursor the subscriber gets next of I: the last cursor delivered +
//     1, or the To of the ranged notice received after it. Then:
//     a notice's From must equal next (From > next leaves [next, From)
//     unnamed: a RangeShort, a silent gap, unless a DROPPING or a notice of
//     unknown range for (node, group) arrived since I's last delivery or
//     ranged notice; From < next names cursors it got or was told of
//     already: a RangeOver); and the next new cursor of I delivered after
//     it must equal its To (above: rule 6's CursorGap, the same cover
//     allowed; below: a RangeOver, the notice named a cursor that came).
//     A ranged notice covers no jump by itself: its range is what it
//     covers. Not judged: From of a notice about an incarnation the
//     subscriber got nothing of before (it may have subscribed after the
//     node's cursor passed), and To of one after which nothing of I came.
//     RangeOver is counted in Counts.WrongRanges and fails Report.OK.
//  8. False alarms. At Finish, a CursorExpired or DROPPING that explained no
//     loss of any stream (nothing of the streams it speaks for was missing)
//     is a false alarm, counted in Counts.FalseAlarms (not a violation).
//     Exceptions: a CursorExpired with reason "producer restarted" cannot
//     know whether anything was lost (a kill -9 takes the producer's buffer
//     with it); when nothing was missing it is counted as Precautionary,
//     not as a false alarm. And a notice of a dead subscriber after which a
//     stream it speaks for never delivered again cannot be judged
//     (Unjudged).
//
// The last message of a publisher is the highest number it recorded as
// published or any subscriber received (a publisher killed between
// broadcasting and recording is still checked). Its (node, group) is the
// one Published gives, else the one its deliveries carry; for a publisher
// neither declared nor received, any group of its node.
//
// Used streaming (Observe only), rules 1-3, 6 and 7 apply at once
// (OnViolation) and rules 4, 5 and 8 at Finish. The zero value is not usable; use NewChecker. It is
// safe for concurrent use.
type Checker struct {
	mu   sync.Mutex
	subs map[string]*subState
	pubs map[string]*pubInfo
	// MaxViolations bounds the violations kept (all are counted).
	MaxViolations int
	violations    []Violation
	counts        Counts
	reorders      map[string]int   // per publisher
	dups          map[string]int   // per subscriber
	reasons       map[string]int64 // CursorExpired received, per reason
	falseReasons  map[string]int64 // false alarms, per reason ("dropping" for DROPPING)
	OnViolation   func(Violation)
	// CursorContiguous enables rules 6 and 7 (see the package doc).
	CursorContiguous bool
}

// Counts are the checker's totals.
type Counts struct {
	Delivered   int64 `json:"delivered"`
	Duplicates  int64 `json:"duplicates"`
	Reorders    int64 `json:"reorders"`
	SilentGaps  int64 `json:"silent_gaps"` // all gaps: mid-stream, start and tail
	StartGaps   int64 `json:"start_gaps"`  // of which at the start of a stream
	TailGaps    int64 `json:"tail_gaps"`   // of which at the end
	CursorGaps  int64 `json:"cursor_gaps"` // of which in a producer's cursors (rule 6)
	CoveredGaps int64 `json:"covered_gaps"`
	Expiries    int64 `json:"expiries"` // CursorExpired received
	Ranged      int64 `json:"ranged"`   // of them, with a known range (rule 7)
	Dropping    int64 `json:"dropping"` // BackPressure DROPPING received
	Resumed     int64 `json:"resumed"`
	// FalseAlarms: notices after which nothing they speak for was missing
	// (rule 8); Precautionary: "producer restarted" with nothing missing;
	// Unjudged: notices of dead subscribers that cannot be judged.
	FalseAlarms   int64 `json:"false_alarms"`
	Precautionary int64 `json:"precautionary"`
	Unjudged      int64 `json:"unjudged"`
	// WrongRanges: rule 7's RangeOver (a notice's range names a cursor the
	// subscriber got, or was told of before). RangeShort is a silent gap.
	WrongRanges int64 `json:"wrong_ranges"`
	Undecodable int64 `json:"undecodable"`
	Other       int64 `json:"other"`       // anything else (a bare message: not checkable)
	StreamGaps  int64 `json:"stream_gaps"` // CursorExpired with ReasonStreamGap
}

// Add sums o into c.
func (c *Counts) Add(o Counts) {
	c.Delivered += o.Delivered
	c.Duplicates += o.Duplicates
	c.Reorders += o.Reorders
	c.SilentGaps += o.SilentGaps
	c.StartGaps += o.StartGaps
	c.TailGaps += o.TailGaps
	c.CursorGaps += o.CursorGaps
	c.CoveredGaps += o.CoveredGaps
	c.Expiries += o.Expiries
	c.Ranged += o.Ranged
	c.Dropping += o.Dropping
	c.Resumed += o.Resumed
	c.FalseAlarms += o.FalseAlarms
	c.Precautionary += o.Precautionary
	c.Unjudged += o.Unjudged
	c.WrongRanges += o.WrongRanges
	c.Undecodable += o.Undecodable
	c.Other += o.Other
	c.StreamGaps += o.StreamGaps
}

// Kinds of violation.
const (
	SilentGap = "silent_gap" // rule 2: a jump in mid-stream
	StartGap  = "start_gap"  // rule 4
	TailGap   = "tail_gap"   // rule 5
	CursorGap = "cursor_gap" // rule 6: a jump in a producer's cursors
	Reorder   = "reorder"    // rule 1
	// RangeShort and RangeOver: rule 7, a notice's range that names less
	// than was missing there (a silent gap) or more.
	RangeShort = "range_short"
	RangeOver  = "range_over"
)

// ReasonRestarted is the CursorExpired reason that cannot know whether
// anything was lost (rule 8).
const ReasonRestarted = "producer restarted"

// ReasonStreamGap is the CursorExpired reason of a worker that found the
// producer's batches skipping cursors. The subscribers are told, so the
// guarantee holds, but only a defective producer makes one (a producer
// resends what was not acknowledged, and says Expire when its buffer
// overflowed): they are counted apart (Counts.StreamGaps), and the soak
// requires none.
const ReasonStreamGap = "gap in received stream"

// Violation is one breach of the guarantee.
type Violation struct {
	Kind       string `json:"kind"`
	Subscriber string `json:"subscriber"`
	Publisher  string `json:"publisher"`
	Node       string `json:"node"`
	Group      uint32 `json:"group"`
	// Prev is the highest sequence number received before (for a start
	// gap: the first the subscriber should have received, minus one), Got
	// the one received (for a tail gap, the publisher's last + 1).
	Prev uint64 `json:"prev"`
	Got  uint64 `json:"got"`
	// Index is the position of the message in the subscriber's stream.
	Index int64 `json:"index"`
}

func (v Violation) String() string {
	return fmt.Sprintf("%s: subscriber %s, publisher %s (node %s group %d): after %d got %d (message #%d)",
		v.Kind, v.Subscriber, v.Publisher, v.Node, v.Group, v.Prev, v.Got, v.Index)
}

const anyGroup = ^uint32(0) // a publisher whose group nobody learnt

type streamKey struct {
	node  string
	group uint32
}

func (k streamKey) explainedBy(o streamKey) bool {
	return k.node == o.node && (k.group == o.group || k.group == anyGroup)
}

type notice struct {
	at       int64
	dropping bool
	key      streamKey // CursorExpired
	reason   string
	ranged   bool // CursorExpired.RangeKnown: covers no jump of rule 6 (rule 7 checks its range)
	used     bool // explained a loss
}

type cursorKey struct {
	node  string
	group uint32
	inc   uint64
}

type cursorState struct {
	last    uint64 // highest cursor received
	hasLast bool   // false: only a ranged notice was received of this incarnation
	next    uint64 // the cursor due next: last + 1, or a later ranged notice's To
	lastAt  int64  // index of the last delivery or ranged notice
}

type subState struct {
	cursors map[cursorKey]*cursorState
	since   int64 // unix nanos when the subscription was in place (0: before everything)
	dead    bool
	n       int64 // events seen; an event's index
	notices []notice
	pubs    map[string]*pubState
}

type pubState struct {
	high    uint64 // highest seq received
	first   uint64 // first seq received
	firstAt int64  // its index
	lastAt  int64  // index of the publisher's last new (non-repeated) delivery
	seen    []span // received seqs, as sorted disjoint spans
	stream  streamKey
}

type pubInfo struct {
	node     string
	group    uint32 // anyGroup until learnt
	sentAt   []int64
	last     uint64 // highest seq published or received
	declared bool   // Published was called for it
}

type span struct{ lo, hi uint64 }

// NewChecker returns an empty checker that keeps up to 100 violations.
func NewChecker() *Checker {
	return &Checker{subs: map[string]*subState{}, pubs: map[string]*pubInfo{}, MaxViolations: 100,
		reorders: map[string]int{}, dups: map[string]int{}, reasons: map[string]int64{}, falseReasons: map[string]int64{}}
}

// AddSubscriber declares a subscriber before its first message: since is
// the wall-clock time (unix nanoseconds) at which its subscription was in
// place (Subscribe returned); 0 means before any publisher began.
func (c *Checker) AddSubscriber(sub string, since int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sub(sub).since = since
}

// SubscriberDied marks sub as dead (its process was killed): rule 5 does
// not apply to it, and its notices after its streams' last messages are
// not judged.
func (c *Checker) SubscriberDied(sub string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sub(sub).dead = true
}

// Published records that publisher, broadcasting through producer (node,
// group), broadcast seq at unix nanoseconds at. Calls for one publisher
// come in order of seq.
func (c *Checker) Published(publisher, node string, group uint32, seq uint64, at int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pub(publisher)
	p.node, p.group, p.declared = node, group, true
	for uint64(len(p.sentAt)) < seq-1 {
		p.sentAt = append(p.sentAt, 0) // unknown
	}
	if uint64(len(p.sentAt)) == seq-1 {
		p.sentAt = append(p.sentAt, at)
	}
	if seq > p.last {
		p.last = seq
	}
}

func (c *Checker) pub(name string) *pubInfo {
	p := c.pubs[name]
	if p == nil {
		p = &pubInfo{group: anyGroup}
		c.pubs[name] = p
	}
	return p
}

// firstAfter is the first seq broadcast after t (0: none known).
func (p *pubInfo) firstAfter(t int64) uint64 {
	if t == 0 {
		if p.last > 0 {
			return 1
		}
		return 0
	}
	i := sort.Search(len(p.sentAt), func(i int) bool { return p.sentAt[i] > t })
	if i == len(p.sentAt) {
		return 0
	}
	return uint64(i) + 1
}

func (p *pubInfo) key() streamKey { return streamKey{p.node, p.group} }

func (c *Checker) sub(name string) *subState {
	s := c.subs[name]
	if s == nil {
		s = &subState{pubs: map[string]*pubState{}, cursors: map[cursorKey]*cursorState{}}
		c.subs[name] = s
	}
	return s
}

// Observe records one message subscriber sub received, in arrival order.
func (c *Checker) Observe(sub string, msg interface{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sub(sub)
	s.n++
	switch m := msg.(type) {
	case *messages.CursorExpired:
		c.counts.Expiries++
		if m.RangeKnown() {
			c.counts.Ranged++
		}
		c.reasons[m.Reason]++
		if m.Reason == ReasonStreamGap {
			c.counts.StreamGaps++
		}
		s.notices = append(s.notices, notice{at: s.n, key: streamKey{m.Node, m.Group}, reason: m.Reason, ranged: m.RangeKnown()})
		if c.CursorContiguous && m.RangeKnown() {
			c.noticeRange(sub, s, m)
		}
	case *messages.BackPressure:
		switch m.State {
		case messages.BackPressureState_BACK_PRESSURE_STATE_DROPPING:
			c.counts.Dropping++
			s.notices = append(s.notices, notice{at: s.n, dropping: true})
		case messages.BackPressureState_BACK_PRESSURE_STATE_RESUMED:
			c.counts.Resumed++
		}
	case *messages.Delivery:
		st, ok := m.Message.(*testpb.Stamp)
		if !ok {
			if _, u := m.Message.(*messages.Undecodable); u {
				c.counts.Undecodable++
			} else {
				c.counts.Other++
			}
			return
		}
		if c.CursorContiguous {
			c.cursor(sub, s, m, st)
		}
		c.stamp(sub, s, streamKey{m.Node, m.Group}, st)
	default:
		c.counts.Other++
	}
}

// cover reports whether a notice that can explain a loss of stream arrived
// at an index in (from, to), and marks every such notice used.
func (s *subState) cover(stream streamKey, from, to int64) bool {
	return s.covered(stream, from, to, true)
}

// covered is cover, marking the notices only if mark.
func (s *subState) covered(stream streamKey, from, to int64, mark bool) bool {
	return s.coveredBy(stream, from, to, mark, false)
}

// coveredBy is covered; unranged: only DROPPING and notices of unknown
// range count (rule 6 and 7: a ranged notice covers its range only).
func (s *subState) coveredBy(stream streamKey, from, to int64, mark, unranged bool) bool {
	i := sort.Search(len(s.notices), func(i int) bool { return s.notices[i].at > from })
	ok := false
	for ; i < len(s.notices) && s.notices[i].at < to; i++ {
		if n := &s.notices[i]; n.dropping || (stream.explainedBy(n.key) && !(unranged && n.ranged)) {
			ok = true
			if !mark {
				return true
			}
			n.used = true
		}
	}
	return ok
}

// cursor applies rules 6 and 7 to a delivery.
func (c *Checker) cursor(subName string, s *subState, m *messages.Delivery, st *testpb.Stamp) {
	k := cursorKey{m.Node, m.Group, m.Incarnation}
	cs := s.cursors[k]
	switch {
	case cs == nil:
		s.cursors[k] = &cursorState{last: m.Cursor, hasLast: true, next: m.Cursor + 1, lastAt: s.n}
		return
	case cs.hasLast && m.Cursor <= cs.last:
		return // a redelivery (rule 1 judges its order)
	case m.Cursor > cs.next && !s.coveredBy(streamKey{m.Node, m.Group}, cs.lastAt, s.n, true, true):
		c.violate(Violation{Kind: CursorGap, Subscriber: subName, Publisher: st.Publisher, Node: m.Node, Group: m.Group,
			Prev: cs.next - 1, Got: m.Cursor, Index: s.n})
	case m.Cursor < cs.next: // a ranged notice named it
		c.violate(Violation{Kind: RangeOver, Subscriber: subName, Publisher: st.Publisher, Node: m.Node, Group: m.Group,
			Prev: cs.next - 1, Got: m.Cursor, Index: s.n})
	}
	cs.last, cs.hasLast, cs.next, cs.lastAt = m.Cursor, true, m.Cursor+1, s.n
}

// noticeRange applies rule 7 to a CursorExpired of known range: its From.
// (Its To is judged by the next delivery of its incarnation, in cursor.)
func (c *Checker) noticeRange(subName string, s *subState, m *messages.CursorExpired) {
	k := cursorKey{m.Node, m.Group, m.ProducerIncarnation}
	cs := s.cursors[k]
	if cs == nil {
		s.cursors[k] = &cursorState{next: m.To, lastAt: s.n}
		return
	}
	switch {
	case m.From < cs.next:
		c.violate(Violation{Kind: RangeOver, Subscriber: subName, Node: m.Node, Group: m.Group, Prev: cs.next - 1, Got: m.From, Index: s.n})
	case m.From > cs.next && !s.coveredBy(streamKey{m.Node, m.Group}, cs.lastAt, s.n, true, true):
		c.violate(Violation{Kind: RangeShort, Subscriber: subName, Node: m.Node, Group: m.Group, Prev: cs.next - 1, Got: m.From, Index: s.n})
	}
	cs.next, cs.lastAt = max(cs.next, m.To), s.n
}

func (c *Checker) stamp(subName string, s *subState, stream streamKey, st *testpb.Stamp) {
	c.counts.Delivered++
	pi := c.pub(st.Publisher)
	if pi.group == anyGroup {
		pi.node, pi.group = stream.node, stream.group
	}
	if st.Seq > pi.last {
		pi.last = st.Seq
	}
	p := s.pubs[st.Publisher]
	if p == nil { // the start is judged at Finish (rule 4)
		p = &pubState{stream: stream, high: st.Seq, first: st.Seq, firstAt: s.n, lastAt: s.n}
		p.add(st.Seq)
		s.pubs[st.Publisher] = p
		return
	}
	p.stream = stream
	seq := st.Seq
	switch {
	case seq == p.high+1:
	case seq > p.high+1:
		if s.cover(stream, p.lastAt, s.n) {
			c.counts.CoveredGaps++
		} else {
			c.violate(Violation{Kind: SilentGap, Subscriber: subName, Publisher: st.Publisher, Node: stream.node,
				Group: stream.group, Prev: p.high, Got: seq, Index: s.n})
		}
	case p.has(seq):
		c.counts.Duplicates++
		c.dups[subName]++
		return // a redelivery is not the publisher's "previous message"
	default:
		c.reorders[st.Publisher]++
		c.violate(Violation{Kind: Reorder, Subscriber: subName, Publisher: st.Publisher, Node: stream.node,
			Group: stream.group, Prev: p.high, Got: seq, Index: s.n})
		p.add(seq)
		p.lastAt = s.n
		return
	}
	p.add(seq)
	p.high = seq
	p.lastAt = s.n
}

func (p *pubState) has(seq uint64) bool {
	i := sort.Search(len(p.seen), func(i int) bool { return p.seen[i].hi >= seq })
	return i < len(p.seen) && p.seen[i].lo <= seq
}

// add inserts seq, merging spans. The common case (seq = last hi + 1) is O(1).
func (p *pubState) add(seq uint64) {
	if n := len(p.seen); n > 0 && p.seen[n-1].hi+1 == seq {
		p.seen[n-1].hi = seq
		return
	}
	i := sort.Search(len(p.seen), func(i int) bool { return p.seen[i].hi >= seq })
	if i < len(p.seen) && p.seen[i].lo <= seq {
		return
	}
	p.seen = append(p.seen, span{})
	copy(p.seen[i+1:], p.seen[i:])
	p.seen[i] = span{seq, seq}
	if i+1 < len(p.seen) && p.seen[i+1].lo == seq+1 {
		p.seen[i].hi = p.seen[i+1].hi
		p.seen = append(p.seen[:i+1], p.seen[i+2:]...)
	}
	if i > 0 && p.seen[i-1].hi+1 == seq {
		p.seen[i-1].hi = p.seen[i].hi
		p.seen = append(p.seen[:i], p.seen[i+1:]...)
	}
}

func (c *Checker) violate(v Violation) {
	switch v.Kind {
	case Reorder:
		c.counts.Reorders++
	case StartGap:
		c.counts.SilentGaps++
		c.counts.StartGaps++
	case TailGap:
		c.counts.SilentGaps++
		c.counts.TailGaps++
	case CursorGap:
		c.counts.SilentGaps++
		c.counts.CursorGaps++
	case RangeOver:
		c.counts.WrongRanges++
	default:
		c.counts.SilentGaps++
	}
	if len(c.violations) < c.MaxViolations {
		c.violations = append(c.violations, v)
	}
	if c.OnViolation != nil {
		c.OnViolation(v)
	}
}

// Finish applies rules 4, 5 and 7, once, when the system is quiet (publishers
// stopped, faults healed, subscribers drained or told). It returns the
// violations it found.
func (c *Checker) Finish() []Violation {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Violation
	violate := func(v Violation) {
		c.violate(v)
		out = append(out, v)
	}
	pubNames := make([]string, 0, len(c.pubs))
	for n := range c.pubs {
		pubNames = append(pubNames, n)
	}
	sort.Strings(pubNames)
	for _, name := range c.subNames() {
		s := c.subs[name]
		for _, pn := range pubNames {
			pi := c.pubs[pn]
			p := s.pubs[pn]
			f := uint64(0)
			if pi.declared {
				f = pi.firstAfter(s.since)
			}
			key := pi.key()
			if p != nil {
				key = p.stream
			}
			// Rule 4: the start.
			if p != nil && f > 0 && p.first > f {
				if s.cover(key, 0, p.firstAt) {
					c.counts.CoveredGaps++
				} else {
					violate(Violation{Kind: StartGap, Subscriber: name, Publisher: pn, Node: key.node, Group: key.group,
						Prev: f - 1, Got: p.first, Index: p.firstAt})
				}
			}
			// Rule 5: the end.
			if s.dead {
				continue
			}
			high, lastAt := uint64(0), int64(0)
			switch {
			case p != nil:
				high, lastAt = p.high, p.lastAt
			case f > 0:
				high = f - 1
			default:
				continue // nothing broadcast after it subscribed, nothing received
			}
			if high >= pi.last {
				continue
			}
			if s.cover(key, lastAt, s.n+1) {
				c.counts.CoveredGaps++
				continue
			}
			violate(Violation{Kind: TailGap, Subscriber: name, Publisher: pn, Node: key.node, Group: key.group,
				Prev: high, Got: pi.last + 1, Index: s.n})
		}
		// Rule 8: false alarms.
		for i := range s.notices {
			n := &s.notices[i]
			switch {
			case n.used:
			case s.dead && c.unjudged(s, n):
				c.counts.Unjudged++
			case !n.dropping && n.reason == ReasonRestarted:
				c.counts.Precautionary++
			default:
				c.counts.FalseAlarms++
				if n.dropping {
					c.falseReasons["dropping"]++
				} else {
					c.falseReasons[n.reason]++
				}
			}
		}
	}
	return out
}

// unjudged: a notice of a dead subscriber after which a stream it speaks
// for never delivered again (and was not complete).
func (c *Checker) unjudged(s *subState, n *notice) bool {
	for pn, pi := range c.pubs {
		key := pi.key()
		p := s.pubs[pn]
		if p != nil {
			key = p.stream
		}
		if !n.dropping && !key.explainedBy(n.key) {
			continue
		}
		if p == nil || (p.lastAt < n.at && p.high < pi.last) {
			return true
		}
	}
	return false
}

// Behind reports, for a live drain loop, how many subscribers have neither
// received up to last from publisher nor been told after their last
// message of it. lastAt is when it broadcast last (unix nanoseconds): a
// subscriber that subscribed later and heard nothing is not behind.
func (c *Checker) Behind(publisher string, last uint64, lastAt int64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	pi := c.pubs[publisher]
	for _, s := range c.subs {
		p := s.pubs[publisher]
		if p == nil {
			if last > 0 && s.since < lastAt && !(pi != nil && s.covered(pi.key(), 0, s.n+1, false)) {
				n++
			}
			continue
		}
		if p.high < last && !s.covered(p.stream, p.lastAt, s.n+1, false) {
			n++
		}
	}
	return n
}

// Highest returns the highest seq sub received from publisher.
func (c *Checker) Highest(sub, publisher string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.subs[sub]; s != nil && s.pubs[publisher] != nil {
		return s.pubs[publisher].high
	}
	return 0
}

func (c *Checker) subNames() []string {
	names := make([]string, 0, len(c.subs))
	for n := range c.subs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Report is the checker's result.
type Report struct {
	Counts     Counts         `json:"counts"`
	Violations []Violation    `json:"violations"`
	Reorders   map[string]int `json:"reorders_per_publisher"`
	Duplicates map[string]int `json:"duplicates_per_subscriber"`
	// ExpiryReasons counts the CursorExpired received per reason;
	// FalseAlarmReasons the false alarms per reason ("dropping": DROPPING).
	ExpiryReasons     map[string]int64 `json:"expiry_reasons,omitempty"`
	FalseAlarmReasons map[string]int64 `json:"false_alarm_reasons,omitempty"`
}

// Report returns a copy of the totals and the violations kept.
func (c *Checker) Report() Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := Report{Counts: c.counts, Violations: append([]Violation(nil), c.violations...),
		Reorders: map[string]int{}, Duplicates: map[string]int{},
		ExpiryReasons: map[string]int64{}, FalseAlarmReasons: map[string]int64{}}
	for k, v := range c.reorders {
		r.Reorders[k] = v
	}
	for k, v := range c.dups {
		r.Duplicates[k] = v
	}
	for k, v := range c.reasons {
		r.ExpiryReasons[k] = v
	}
	for k, v := range c.falseReasons {
		r.FalseAlarmReasons[k] = v
	}
	return r
}

// OK reports whether no silent gap, no reorder and no wrong range was
// found.
func (r Report) OK() bool {
	return r.Counts.SilentGaps == 0 && r.Counts.Reorders == 0 && r.Counts.WrongRanges == 0
}

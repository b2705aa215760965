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
// *messages.BackPressure notices. For each subscriber and each publisher:
//
//   - the received sequence numbers increase by exactly one;
//   - a number at or below the highest seen is allowed only if it was seen
//     before (a redelivery, counted as a duplicate); one never seen is a
//     reorder;
//   - any jump forward, and a tail that stops short of what the publisher
//     sent (Finish), must be preceded, after the publisher's previous
//     message, by a CursorExpired for the (node, group) the publisher
//     broadcasts through, or by a BackPressure DROPPING notice. Otherwise it
//     is a silent gap.
//
// A subscriber that joins late (after publishers began) takes the first
// message of each publisher as its baseline.
//
// The zero value is not usable; use NewChecker. It is safe for concurrent use.
type Checker struct {
	mu   sync.Mutex
	subs map[string]*subState
	// MaxViolations bounds the violations kept (all are counted).
	MaxViolations int
	violations    []Violation
	counts        Counts
	reorders      map[string]int // per publisher
	dups          map[string]int // per subscriber
	OnViolation   func(Violation)
}

// Counts are the checker's totals.
type Counts struct {
	Delivered   int64 `json:"delivered"`
	Duplicates  int64 `json:"duplicates"`
	Reorders    int64 `json:"reorders"`
	SilentGaps  int64 `json:"silent_gaps"`
	CoveredGaps int64 `json:"covered_gaps"` // jumps preceded by a notice
	Expiries    int64 `json:"expiries"`     // CursorExpired received
	Dropping    int64 `json:"dropping"`     // BackPressure DROPPING received
	Resumed     int64 `json:"resumed"`
	Undecodable int64 `json:"undecodable"`
	// LateNotices: DROPPING notices that arrived within 3 messages after
	// a silent gap of the same subscriber (the notice lost a race with the
	// jump). Those gaps still count as silent: the notice must come first.
	LateNotices int64 `json:"late_notices"`
	Other       int64 `json:"other"` // anything else (a bare message: not checkable)
}

// Add sums o into c.
func (c *Counts) Add(o Counts) {
	c.Delivered += o.Delivered
	c.Duplicates += o.Duplicates
	c.Reorders += o.Reorders
	c.SilentGaps += o.SilentGaps
	c.CoveredGaps += o.CoveredGaps
	c.Expiries += o.Expiries
	c.Dropping += o.Dropping
	c.Resumed += o.Resumed
	c.Undecodable += o.Undecodable
	c.LateNotices += o.LateNotices
	c.Other += o.Other
}

// Kind of a violation.
const (
	SilentGap = "silent_gap"
	Reorder   = "reorder"
)

// Violation is one breach of the guarantee.
type Violation struct {
	Kind       string `json:"kind"`
	Subscriber string `json:"subscriber"`
	Publisher  string `json:"publisher"`
	Node       string `json:"node"`
	Group      uint32 `json:"group"`
	// Prev is the highest sequence number received before, Got the one
	// received (for a tail gap, Got is what the publisher sent last + 1).
	Prev uint64 `json:"prev"`
	Got  uint64 `json:"got"`
	// Index is the position of the message in the subscriber's stream.
	Index int64 `json:"index"`
}

func (v Violation) String() string {
	return fmt.Sprintf("%s: subscriber %s, publisher %s (node %s group %d): after %d got %d (message #%d)",
		v.Kind, v.Subscriber, v.Publisher, v.Node, v.Group, v.Prev, v.Got, v.Index)
}

type streamKey struct {
	node  string
	group uint32
}

type subState struct {
	late       bool
	n          int64               // events seen; an event's index
	expiredAt  map[streamKey]int64 // last CursorExpired per producer stream
	droppingAt int64               // last BackPressure DROPPING (0: none)
	lastGapAt  int64               // index of the last silent gap (0: none)
	pubs       map[string]*pubState
}

type pubState struct {
	high   uint64 // highest seq received
	lastAt int64  // index of the publisher's last new (non-repeated) delivery
	seen   []span // received seqs, as sorted disjoint spans
	stream streamKey
}

type span struct{ lo, hi uint64 }

// NewChecker returns an empty checker that keeps up to 100 violations.
func NewChecker() *Checker {
	return &Checker{subs: map[string]*subState{}, MaxViolations: 100, reorders: map[string]int{}, dups: map[string]int{}}
}

// AddSubscriber declares a subscriber before its first message. late: it
// subscribed after publishers began, so the first message of each
// publisher is its baseline. An undeclared subscriber is not late.
func (c *Checker) AddSubscriber(sub string, late bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sub(sub).late = late
}

func (c *Checker) sub(name string) *subState {
	s := c.subs[name]
	if s == nil {
		s = &subState{expiredAt: map[streamKey]int64{}, pubs: map[string]*pubState{}}
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
		s.expiredAt[streamKey{m.Node, m.Group}] = s.n
	case *messages.BackPressure:
		switch m.State {
		case messages.BackPressureState_BACK_PRESSURE_STATE_DROPPING:
			c.counts.Dropping++
			if s.lastGapAt > 0 && s.n-s.lastGapAt <= 3 {
				c.counts.LateNotices++
				s.lastGapAt = 0
			}
			s.droppingAt = s.n
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
		c.stamp(sub, s, streamKey{m.Node, m.Group}, st)
	default:
		c.counts.Other++
	}
}

// covered reports whether a notice for stream reached s after index at.
func (s *subState) covered(stream streamKey, at int64) bool {
	return s.expiredAt[stream] > at || s.droppingAt > at
}

func (c *Checker) stamp(subName string, s *subState, stream streamKey, st *testpb.Stamp) {
	c.counts.Delivered++
	p := s.pubs[st.Publisher]
	if p == nil {
		p = &pubState{stream: stream}
		s.pubs[st.Publisher] = p
		if s.late && st.Seq > 0 {
			p.high = st.Seq - 1 // the baseline
		}
	}
	p.stream = stream
	seq := st.Seq
	switch {
	case seq == p.high+1:
	case seq > p.high+1:
		if s.covered(stream, p.lastAt) {
			c.counts.CoveredGaps++
		} else {
			s.lastGapAt = s.n
			c.violate(Violation{Kind: SilentGap, Subscriber: subName, Publisher: st.Publisher, Node: stream.node,
				Group: stream.group, Prev: p.high, Got: seq, Index: s.n})
		}
	case p.has(seq):
		c.counts.Duplicates++
		c.dups[subName]++
		return // a redelivery does not consume a notice
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
	if v.Kind == SilentGap {
		c.counts.SilentGaps++
	} else {
		c.counts.Reorders++
	}
	if len(c.violations) < c.MaxViolations {
		c.violations = append(c.violations, v)
	}
	if c.OnViolation != nil {
		c.OnViolation(v)
	}
}

// Finish checks the tail: publisher (broadcasting through node, group) sent
// up to lastSent. Every subscriber that is not late must have received up to
// lastSent, or have been told (a notice after the publisher's last
// delivery); a late subscriber that never heard of the publisher is not
// checked. It returns the tail gaps found (also counted as silent gaps).
// Call it once per publisher, when the system is quiet.
func (c *Checker) Finish(publisher, node string, group uint32, lastSent uint64) []Violation {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Violation
	for _, name := range c.subNames() {
		s := c.subs[name]
		p := s.pubs[publisher]
		if p == nil {
			if s.late || lastSent == 0 {
				continue
			}
			p = &pubState{stream: streamKey{node, group}}
		}
		if p.high >= lastSent || s.covered(p.stream, p.lastAt) {
			continue
		}
		v := Violation{Kind: SilentGap, Subscriber: name, Publisher: publisher, Node: p.stream.node,
			Group: p.stream.group, Prev: p.high, Got: lastSent + 1, Index: s.n}
		c.violate(v)
		out = append(out, v)
	}
	return out
}

// Behind reports, for the caller's drain loop, how many subscribers have
// neither received up to lastSent from publisher nor been told.
func (c *Checker) Behind(publisher string, lastSent uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, s := range c.subs {
		p := s.pubs[publisher]
		if p == nil {
			// As in Finish: a DROPPING notice covers a publisher never heard of.
			if !s.late && lastSent > 0 && s.droppingAt == 0 {
				n++
			}
			continue
		}
		if p.high < lastSent && !s.covered(p.stream, p.lastAt) {
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
}

// Report returns a copy of the totals and the violations kept.
func (c *Checker) Report() Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := Report{Counts: c.counts, Violations: append([]Violation(nil), c.violations...),
		Reorders: map[string]int{}, Duplicates: map[string]int{}}
	for k, v := range c.reorders {
		r.Reorders[k] = v
	}
	for k, v := range c.dups {
		r.Duplicates[k] = v
	}
	return r
}

// OK reports whether no silent gap and no reorder was found.
func (r Report) OK() bool { return r.Counts.SilentGaps == 0 && r.Counts.Reorders == 0 }

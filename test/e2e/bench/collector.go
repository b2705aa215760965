package main

import (
	"sort"
	"sync/atomic"
	"time"
)

// Sequence numbers carry the repetition and the publisher, so a collector
// can count exactly: seq = rep<<48 | pub<<40 | i, i counting from 0.
func makeSeq(rep, pub, i int) uint64 { return uint64(rep)<<48 | uint64(pub)<<40 | uint64(i) }

func splitSeq(seq uint64) (rep, pub, i int) {
	return int(seq >> 48), int(seq >> 40 & 0xff), int(seq & (1<<40 - 1))
}

// collState is one repetition's expectation and count. It is written by the
// one goroutine that delivers (an actor, a NATS callback) and read by the
// control loop through atomics.
type collState struct {
	rep, pubs, perPub, n int
	seen                 [][]uint64 // per publisher: a bitmap of i
	last                 []int      // per publisher: the highest i seen, -1 none
	latency              []int64    // ns, when recording
	recs                 []tailRec  // each message, when tracing (-trace-tail)

	unique, dups, stray, reorders, outOfRange atomic.Int64
	notices                                   atomic.Int64
	doneAt                                    atomic.Int64 // unix ns
}

// Collector counts what one node's subscriber received.
type Collector struct {
	st     atomic.Pointer[collState]
	record atomic.Bool
	trace  bool // record each message of a latency run (set before the first Reset that counts)
}

func newCollector() *Collector {
	c := &Collector{}
	c.Reset(0, 1, 0, false)
	return c
}

// Reset starts repetition rep: n messages from pubs publishers.
func (c *Collector) Reset(rep, pubs, n int, latency bool) {
	per := (n + pubs - 1) / pubs
	s := &collState{rep: rep, pubs: pubs, perPub: per, n: n, seen: make([][]uint64, pubs), last: make([]int, pubs)}
	for p := range s.seen {
		s.seen[p] = make([]uint64, per/64+1)
		s.last[p] = -1
	}
	if latency {
		s.latency = make([]int64, 0, n)
		if c.trace {
			s.recs = make([]tailRec, 0, n)
		}
	}
	c.record.Store(latency)
	c.st.Store(s)
}

// Add counts one message; sent is its publish time (unix ns, 0 unknown).
func (c *Collector) Add(seq uint64, sent int64) {
	s := c.st.Load()
	rep, pub, i := splitSeq(seq)
	if rep != s.rep {
		s.stray.Add(1)
		return
	}
	if pub >= s.pubs || i >= s.perPub {
		s.outOfRange.Add(1)
		return
	}
	w, b := i/64, uint64(1)<<(i%64)
	if s.seen[pub][w]&b != 0 {
		s.dups.Add(1)
		return
	}
	s.seen[pub][w] |= b
	if i != s.last[pub]+1 {
		s.reorders.Add(1)
	}
	if i > s.last[pub] {
		s.last[pub] = i
	}
	// The clock is read only when needed: per message it would cost the
	// receiving node ~10% of its CPU (measured), charged to the system
	// under test.
	if s.latency != nil && sent > 0 {
		now := time.Now().UnixNano()
		s.latency = append(s.latency, now-sent)
		if s.recs != nil {
			s.recs = append(s.recs, tailRec{Seq: seq, Sent: sent, Recv: now})
		}
	}
	if s.unique.Add(1) == int64(s.n) {
		s.doneAt.Store(time.Now().UnixNano())
	}
}

// Notice counts a message that is not a payload: CursorExpired,
// BackPressure, Undecodable. Any makes the run invalid.
func (c *Collector) Notice() { c.st.Load().notices.Add(1) }

// CollStatus is what a node reports of its collector.
type CollStatus struct {
	Rep        int   `json:"rep"`
	Unique     int64 `json:"unique"`
	Dups       int64 `json:"dups"`
	Stray      int64 `json:"stray"`
	Reorders   int64 `json:"reorders"`
	OutOfRange int64 `json:"out_of_range"`
	Notices    int64 `json:"notices"`
	DoneAt     int64 `json:"done_at"`
}

func (c *Collector) Status() CollStatus {
	s := c.st.Load()
	return CollStatus{Rep: s.rep, Unique: s.unique.Load(), Dups: s.dups.Load(), Stray: s.stray.Load(),
		Reorders: s.reorders.Load(), OutOfRange: s.outOfRange.Load(), Notices: s.notices.Load(),
		DoneAt: s.doneAt.Load()}
}

// Traced returns the messages recorded when tracing. Call it only once the
// repetition is over.
func (c *Collector) Traced() []tailRec { return c.st.Load().recs }

// Latencies returns a sorted copy of the recorded latencies. Call it only
// once the repetition is over (the slice is written by the deliverer).
func (c *Collector) Latencies() []int64 {
	s := c.st.Load()
	out := append([]int64(nil), s.latency...)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

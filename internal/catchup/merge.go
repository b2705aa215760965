// Package catchup is the stored/live merge of a WithFrom subscription: the
// rule that turns rows read from a durable stream's store and live
// envelopes of the same stream into one sequence, every row once, in
// cursor order, with the handover to live (where the session is told
// CaughtUp) in its place.
//
// A Merge decides; it does no I/O, keeps no clock and sends nothing. The
// session actor (session_actor.go and catchup.go in the root package)
// owns one per WithFrom subscription, reads the store, arms the timers
// and hands what the Merge lets through to the session.
//
// The store is the truth. Next is the cursor of the row the session is to
// get next.
//
//   - Reading (the catch-up, and after any hole in the live stream): the
//     rows of a page advance Next one by one (Row, Truncated); live
//     envelopes are dropped meanwhile (Live says Drop: each was appended
//     before it was delivered, so the reading reaches it). Page ends the
//     page: a full page reads on (More); a short one is the stream's end
//     and hands over to live (Live), unless a live envelope claimed a row
//     the reading did not see yet (Wait). The first handover of a Merge
//     owes the session one CaughtUp, placed behind the last row read and
//     before the first live envelope.
//   - Live: an envelope whose cursor is Next is delivered (Deliver); one
//     below Next, or one already aside, is a duplicate (Drop); one above
//     Next waits aside (Aside) until the hole before it fills (Released),
//     or, with too many aside, the Merge drops them all and reads from
//     Next (Read). A hole that stays open is read too (HoleStayed).
//
// Gap rows and rows the store no longer keeps are rows like the others
// here: the actor turns them into StreamGap and StreamTruncated notices at
// their cursors.
//
// Cost: every call is O(1) but Released, which is O(rows released). A
// Merge is owned by one actor; it is not safe for concurrent use.
package catchup

// Verdict is what a Merge does with a live envelope.
type Verdict int

const (
	// Drop: a duplicate (already delivered or already aside) or a row the
	// reading reaches.
	Drop Verdict = iota
	// Deliver: the envelope is next; deliver it, then what Released lets out.
	Deliver
	// Aside: above Next; keep it (Aside) until the hole before it fills.
	Aside
	// Read: one envelope too many would wait aside; the Merge dropped what
	// was aside and reads from Next (the reading reaches them all).
	Read
)

func (v Verdict) String() string {
	switch v {
	case Drop:
		return "drop"
	case Deliver:
		return "deliver"
	case Aside:
		return "aside"
	case Read:
		return "read"
	}
	return "?"
}

// End is what a Merge does at the end of a page read from the store.
type End int

const (
	// More: a full page; read the next one.
	More End = iota
	// Wait: the stream's end as the store has it now, but a live envelope
	// claimed a row at or past Next: read again after a pause.
	Wait
	// Live: the handover: live from Next.
	Live
	// LiveUnseen: the handover although a live envelope claimed a row the
	// store did not show (the caller ran out of patience; worth a log).
	LiveUnseen
)

func (e End) String() string {
	switch e {
	case More:
		return "more"
	case Wait:
		return "wait"
	case Live:
		return "live"
	case LiveUnseen:
		return "live-unseen"
	}
	return "?"
}

// Merge is the merge state of one WithFrom subscription; T is what a live
// envelope is to the caller. Make one with New.
type Merge[T any] struct {
	next    uint64
	reading bool
	// claimed is the highest cursor a live envelope carried: a reading
	// that ends below it has not seen every row yet.
	claimed  uint64
	ahead    map[uint64]T
	maxAhead int
	// caughtUp: the session took this Merge's CaughtUp.
	caughtUp bool
}

// New returns a Merge that reads from cursor from (at least 1) and keeps
// at most maxAhead live envelopes aside.
func New[T any](from uint64, maxAhead int) *Merge[T] {
	return &Merge[T]{next: max(from, 1), reading: true, maxAhead: maxAhead}
}

// Next is the cursor of the row the session is to get next.
func (m *Merge[T]) Next() uint64 { return m.next }

// Reading reports whether the rows come from the store now.
func (m *Merge[T]) Reading() bool { return m.reading }

// Claimed is the highest cursor a live envelope carried since the last
// handover (0: none).
func (m *Merge[T]) Claimed() uint64 { return m.claimed }

// Ahead is how many live envelopes wait aside.
func (m *Merge[T]) Ahead() int { return len(m.ahead) }

// Live decides a live envelope with cursor c. Deliver advances Next past
// it; Read drops what was aside and starts reading.
func (m *Merge[T]) Live(c uint64) Verdict {
	m.claimed = max(m.claimed, c)
	switch {
	case m.reading, c < m.next:
		return Drop
	case c == m.next:
		m.next++
		return Deliver
	}
	if _, dup := m.ahead[c]; dup {
		return Drop
	}
	if len(m.ahead) >= m.maxAhead {
		m.Read()
		return Read
	}
	return Aside
}

// Aside keeps v, the envelope at cursor c that Live said Aside to.
func (m *Merge[T]) Aside(c uint64, v T) {
	if m.ahead == nil {
		m.ahead = map[uint64]T{}
	}
	m.ahead[c] = v
}

// Released returns the envelopes aside that are now next, in cursor
// order, advancing Next past them.
func (m *Merge[T]) Released() []T {
	var out []T
	for v, ok := m.ahead[m.next]; ok; v, ok = m.ahead[m.next] {
		delete(m.ahead, m.next)
		out = append(out, v)
		m.next++
	}
	return out
}

// HoleStayed decides a hole that opened at cursor at and stayed open for
// the caller's wait: true, that hole filled and a later one is open (give
// it its own wait); false, the Merge reads from Next (what was aside is
// dropped).
func (m *Merge[T]) HoleStayed(at uint64) (newer bool) {
	if m.next != at && len(m.ahead) > 0 {
		return true
	}
	m.Read()
	return false
}

// Read makes the Merge read from Next; what was aside is dropped.
func (m *Merge[T]) Read() {
	m.ahead = nil
	m.reading = true
}

// Rewind makes the Merge read again from c, a row or envelope the session
// had no room for (it is handed again from the store). What is aside is
// dropped: the reading reaches it.
func (m *Merge[T]) Rewind(c uint64) {
	m.next = c
	m.Read()
}

// Truncated: the store no longer keeps the rows from Next up to first;
// the reading goes on from first.
func (m *Merge[T]) Truncated(first uint64) { m.next = first }

// Row: the reading hands over the stored row at cursor c (a message or a
// gap row); Next moves past it, before it is handed, so that Stale tells a
// row the session refused from the ones after it.
func (m *Merge[T]) Row(c uint64) { m.next = c + 1 }

// Page ends a page read from the store: storeNext is the cursor the store
// said to read from next, short whether it held fewer rows than asked for
// (the stream's end, as the store has it now), patient whether the caller
// would still wait for a row a live envelope claimed. owed: the handover
// owes the session its CaughtUp, at cursor mark (the last row read,
// Next - 1), to be handed behind the rows read and before anything live.
func (m *Merge[T]) Page(storeNext uint64, short, patient bool) (end End, mark uint64, owed bool) {
	m.next = max(m.next, storeNext)
	if !short {
		return More, 0, false
	}
	end = Live
	if m.claimed >= m.next {
		if patient {
			return Wait, 0, false
		}
		end = LiveUnseen
	}
	m.claimed, m.reading = 0, false
	return end, m.next - 1, !m.caughtUp
}

// Stale reports whether an item at cursor c, handed earlier and held for
// the session's room, is to be dropped now: a stored row (stored) at or
// past Next was read before the Merge went back (it is read again), and a
// live envelope at or past Next while reading is reached by the reading.
func (m *Merge[T]) Stale(c uint64, stored bool) bool {
	return c >= m.next && (stored || m.reading)
}

// TakeCaughtUp records that the session takes the Merge's CaughtUp; false:
// it already took one (a CaughtUp handed twice, parked with the rows
// before it, is dropped).
func (m *Merge[T]) TakeCaughtUp() bool {
	if m.caughtUp {
		return false
	}
	m.caughtUp = true
	return true
}

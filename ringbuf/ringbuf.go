// Package ringbuf is the bounded buffer of recent messages that a producer
// keeps, and the one place that decides what a node needs on a flush.
//
// Cursors are absolute and monotonic; the buffer is bounded and wraps. The
// message with cursor c lives in slot c mod Cap(), so after Cap() further
// writes its slot is reused and the message is gone. Subtracting a node's
// next-needed cursor from the write cursor (the lag) tells both where the
// node is and whether its messages still exist:
//
//	lag == 0         -> CaughtUp: send nothing
//	lag <= Cap()     -> Messages: replay next..write-1, in order
//	lag >  Cap()     -> Expired:  the node's cursor moves to write; it
//	                              misses all lag messages: lag-Cap() were
//	                              overwritten, the Cap() still buffered
//	                              are skipped
//
// An expired node skips what is still buffered too: it is told to reload
// from a source of truth, and older messages arriving after that reload
// would roll its state back. So Missed is the whole lag, everything the
// node will never receive from this ring, and Overwritten the part of it
// that was gone.
//
// Nothing else in EchoPubSub computes lag: callers ask Decide.
//
// A node that joins has no next-needed cursor yet. It is owed every message
// written after it started, and nothing from before; Join turns that instant
// into the same three answers. Each message carries the time it was written
// (WriteAt; any monotonic clock, non-decreasing in cursor order), and the
// ring remembers the time of the newest message it overwrote:
//
//	first buffered message written at or after since = c
//	no overwritten message was written at or after since -> Messages [c, write) (or CaughtUp)
//	an overwritten message was written at or after since -> Expired: the node is owed a message that is gone
//
// A Ring is owned by one actor and is not safe for concurrent use. The zero
// value is not usable; build one with New. Write and Decide are O(1) and do
// not allocate; At is O(1).
//
// The cursor is a uint64. At one billion writes per second it reaches its
// limit after about 584 years; Write then returns ErrCursorExhausted instead
// of wrapping, because a wrapped cursor would make lag meaningless.
package ringbuf

import (
	"errors"
	"fmt"
	"math"
)

// ErrCursorExhausted is returned by Write once the write cursor reached
// math.MaxUint64.
var ErrCursorExhausted = errors.New("ringbuf: write cursor exhausted")

// ErrAhead is returned by Decide for a next-needed cursor beyond the write
// cursor: no node can have acknowledged a message that was never written.
var ErrAhead = errors.New("ringbuf: next-needed cursor is ahead of the write cursor")

// ErrNotBuffered is returned by At for a cursor outside the buffered window.
var ErrNotBuffered = errors.New("ringbuf: cursor not buffered")

// Kind is the outcome of a flush decision for one node.
type Kind uint8

const (
	// CaughtUp: the node acknowledged everything written.
	CaughtUp Kind = iota + 1
	// Messages: the node needs [From, To), all still buffered.
	Messages
	// Expired: the node needed messages that were overwritten.
	Expired
)

func (k Kind) String() string {
	switch k {
	case CaughtUp:
		return "caught_up"
	case Messages:
		return "messages"
	case Expired:
		return "expired"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Decision is what one node needs, from Decide.
type Decision struct {
	Kind Kind
	// Lag is write cursor minus the node's next-needed cursor.
	Lag uint64
	// From and To bound the messages to send, [From, To), for Messages.
	// For Expired, To is the write cursor: the node's cursor moves there.
	From, To uint64
	// Missed is, for Expired, the number of messages the node will never
	// receive: every one from its cursor to To (the lag). Overwritten of
	// them were overwritten; the other Missed - Overwritten were still
	// buffered and are skipped. For an Expired of Join both are 0: not
	// known.
	Missed, Overwritten uint64
}

// Ring is a fixed-capacity ring buffer of T indexed by absolute cursor.
type Ring[T any] struct {
	slots []T
	times []int64 // write time of each slot's message
	write uint64
	// lastAt is the newest write time; evictedAt the write time of the
	// newest overwritten message (valid once write > len(slots)).
	lastAt, evictedAt int64
}

// New returns an empty Ring holding at most capacity messages. Its memory
// is touched here, once: a large ring otherwise takes a page fault every few
// hundred writes until its first wrap, on the producer's hot path (12 % of a
// publishing node's CPU in the harness, docs/benchmarks.md). It is resident
// from the start, as it would be after the first wrap.
func New[T any](capacity int) (*Ring[T], error) {
	if capacity <= 0 {
		return nil, fmt.Errorf("ringbuf: capacity must be > 0, got %d", capacity)
	}
	r := &Ring[T]{slots: make([]T, capacity), times: make([]int64, capacity), lastAt: math.MinInt64}
	clear(r.slots) // make's memory is zero but untouched: clear faults it in
	clear(r.times)
	return r, nil
}

// Cap is the number of messages the ring holds.
func (r *Ring[T]) Cap() int { return len(r.slots) }

// WriteCursor is the cursor the next Write will use: the count of all writes.
func (r *Ring[T]) WriteCursor() uint64 { return r.write }

// Write stores v at the write cursor, overwriting the message Cap() writes
// older, and returns v's cursor. It carries the previous write's time (see
// WriteAt); a ring written only with Write answers Join by cursor alone.
func (r *Ring[T]) Write(v T) (uint64, error) {
	at := r.lastAt
	if r.write == 0 {
		at = 0
	}
	return r.WriteAt(v, at)
}

// WriteAt is Write for a message written at time at (any monotonic clock, in
// the unit the caller passes to Join). Times must not decrease: an earlier
// time than the previous write's is taken as the previous write's.
func (r *Ring[T]) WriteAt(v T, at int64) (uint64, error) {
	if r.write == math.MaxUint64 {
		return 0, ErrCursorExhausted
	}
	if at < r.lastAt {
		at = r.lastAt
	}
	c := r.write
	i := c % uint64(len(r.slots))
	if c >= uint64(len(r.slots)) {
		r.evictedAt = r.times[i]
	}
	r.slots[i], r.times[i] = v, at
	r.lastAt = at
	r.write++
	return c, nil
}

// Decide is the flush decision for a node whose next-needed cursor is next.
func (r *Ring[T]) Decide(next uint64) (Decision, error) {
	if next > r.write {
		return Decision{}, fmt.Errorf("%w: next %d, write %d", ErrAhead, next, r.write)
	}
	lag := r.write - next
	switch {
	case lag == 0:
		return Decision{Kind: CaughtUp, From: next, To: next}, nil
	case lag > uint64(len(r.slots)):
		return Decision{Kind: Expired, Lag: lag, From: next, To: r.write, Missed: lag, Overwritten: lag - uint64(len(r.slots))}, nil
	default:
		return Decision{Kind: Messages, Lag: lag, From: next, To: r.write}, nil
	}
}

// Span returns the messages with cursors from to to (exclusive), all still
// buffered, as a then b (b empty unless the range wraps around the ring's
// end), without copying: they alias the ring, so read them before the next
// write. It is At for a run of cursors, without At's checks per cursor.
func (r *Ring[T]) Span(from, to uint64) (a, b []T, err error) {
	if from > to || to > r.write || r.write-from > uint64(len(r.slots)) {
		return nil, nil, fmt.Errorf("%w: cursors %d to %d, window [%d, %d)", ErrNotBuffered, from, to, r.oldest(), r.write)
	}
	n := uint64(len(r.slots))
	i, j := from%n, to%n
	if to-from == 0 {
		return nil, nil, nil
	}
	if i < j {
		return r.slots[i:j], nil, nil
	}
	return r.slots[i:], r.slots[:j], nil
}

// At returns the message with the given cursor while it is still buffered.
func (r *Ring[T]) At(cursor uint64) (T, error) {
	if cursor >= r.write || r.write-cursor > uint64(len(r.slots)) {
		var zero T
		return zero, fmt.Errorf("%w: cursor %d, window [%d, %d)", ErrNotBuffered, cursor, r.oldest(), r.write)
	}
	return r.slots[cursor%uint64(len(r.slots))], nil
}

// oldest is the smallest cursor still buffered.
func (r *Ring[T]) oldest() uint64 {
	if r.write < uint64(len(r.slots)) {
		return 0
	}
	return r.write - uint64(len(r.slots))
}

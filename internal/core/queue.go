package core

import "sync"

// WritesReady tells a producer that its WriteQueue holds writes. It is sent
// only when the queue goes from taken to non-empty, so a busy producer takes
// many writes per mailbox message.
type WritesReady struct{}

// WriteQueue carries one producer's writes from Broadcast (any goroutine)
// to the producer actor in groups: Push copies a write in under a mutex, the
// producer Takes them in order, a batch's worth at a time. The writes are
// held by value, in arrays reused take after take: a Broadcast allocates no
// Write (an allocation per message cost more than the copy). Its length is
// bounded (MaxPendingWrites): Push refuses when full and hands out a
// channel closed at the next Take, to wait on for room.
type WriteQueue struct {
	mu sync.Mutex
	// writes[head:] are queued; writes[:head] were taken (cleared once the
	// taker is done with them, at its next Take).
	writes []Write
	head   int
	// taken is what the last Take returned; lent is its array when that
	// Take emptied the queue (the array is free again at the next Take).
	taken    []Write
	lent     []Write
	spare    []Write       // an empty array for the queue to continue in
	notified bool          // a WritesReady is on its way or being handled
	room     chan struct{} // closed at the next Take; nil when nobody waits
	max      int
	reserved int // room taken by Reserve, not pushed yet
}

// NewWriteQueue returns a queue holding at most max writes.
func NewWriteQueue(max int) *WriteQueue { return &WriteQueue{max: max} }

// Push copies *w into the queue unless it holds max writes (w may be reused
// afterwards). notify: the caller must send the producer a WritesReady (the
// queue was taken since the last one). When full, room is closed at the
// next Take.
func (q *WriteQueue) Push(w *Write) (ok, notify bool, room <-chan struct{}) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.writes)-q.head+q.reserved >= q.max {
		if q.room == nil {
			q.room = make(chan struct{})
		}
		return false, false, q.room
	}
	q.add(w)
	notify = !q.notified
	q.notified = true
	return true, notify, nil
}

// add appends a copy of *w. When the array is full while the taker holds
// writes[:head] (a part Take), the queued writes move to a new array of
// their own: append would copy the whole array, reading the writes the
// taker may still read and change (a data race), and leave copies of them
// in the new array that the next Take would not clear.
func (q *WriteQueue) add(w *Write) {
	if q.head > 0 && len(q.writes) == cap(q.writes) {
		n := len(q.writes) - q.head
		ws := make([]Write, n, max(2*n, 8))
		copy(ws, q.writes[q.head:])
		q.writes, q.head = ws, 0
	}
	q.writes = append(q.writes, *w)
}

// Take returns the queued writes, in Push order, up to max of them, and
// removes them from the queue. The caller may read (and change) them until
// its next Take, which clears them. It wakes the pushers waiting for room.
// more: writes are left; the queue stays notified (Push sends no
// WritesReady for them), so the caller takes them itself, after whatever
// else it has to handle (the producer sends itself a WritesReady).
func (q *WriteQueue) Take(max int) (ws []Write, more bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	// The last Take's writes are done with: drop what they reference. The
	// pushers append past len(writes), never over them.
	clear(q.taken)
	if q.lent != nil {
		q.spare, q.lent = q.lent[:0], nil
	}
	if q.head > 0 && q.head >= len(q.writes)-q.head {
		// More taken than queued: move the queued ones to the front, so
		// the array does not grow while the queue never empties. Each
		// write is moved at most once per time it is queued, on average.
		n := copy(q.writes, q.writes[q.head:])
		clear(q.writes[n:])
		q.writes, q.head = q.writes[:n], 0
	}
	if len(q.writes)-q.head <= max {
		ws = q.writes[q.head:]
		q.lent = q.writes
		q.writes, q.head, q.spare = q.spare, 0, nil
		q.notified = false
	} else {
		ws = q.writes[q.head : q.head+max : q.head+max]
		q.head += max
		more = true
	}
	q.taken = ws
	if q.room != nil {
		close(q.room)
		q.room = nil
	}
	return ws, more
}

// Len is the number of queued writes.
func (q *WriteQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.writes) - q.head
}

// Reserve takes room for one write without queueing it (a durable write is
// appended to its store in between): PushReserved queues it, Release gives
// the room back. When full, room is closed at the next Take (or Release).
func (q *WriteQueue) Reserve() (ok bool, room <-chan struct{}) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.writes)-q.head+q.reserved >= q.max {
		if q.room == nil {
			q.room = make(chan struct{})
		}
		return false, q.room
	}
	q.reserved++
	return true, nil
}

// PushReserved queues a copy of *w in the room Reserve took; notify as for
// Push.
func (q *WriteQueue) PushReserved(w *Write) (notify bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.reserved--
	q.add(w)
	notify = !q.notified
	q.notified = true
	return notify
}

// Release gives back the room Reserve took, waking the pushers waiting.
func (q *WriteQueue) Release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.reserved--
	if q.room != nil {
		close(q.room)
		q.room = nil
	}
}

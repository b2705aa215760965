package core

import "sync"

// WritesReady tells a producer that its WriteQueue holds writes. It is sent
// only when the queue goes from taken to non-empty, so a busy producer takes
// many writes per mailbox message.
type WritesReady struct{}

// WriteQueue carries one producer's writes from Broadcast (any goroutine)
// to the producer actor in groups: Push appends under a mutex, the producer
// Takes everything at once. Its length is bounded (MaxPendingWrites): Push
// refuses when full and hands out a channel closed at the next Take, to
// wait on for room.
type WriteQueue struct {
	mu       sync.Mutex
	writes   []*Write
	notified bool          // a WritesReady is on its way or being handled
	room     chan struct{} // closed at the next Take; nil when nobody waits
	max      int
	reserved int // room taken by Reserve, not pushed yet
}

// NewWriteQueue returns a queue holding at most max writes.
func NewWriteQueue(max int) *WriteQueue { return &WriteQueue{max: max} }

// Push appends w unless the queue holds max writes. notify: the caller must
// send the producer a WritesReady (the queue was taken since the last one).
// When full, room is closed at the next Take.
func (q *WriteQueue) Push(w *Write) (ok, notify bool, room <-chan struct{}) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.writes)+q.reserved >= q.max {
		if q.room == nil {
			q.room = make(chan struct{})
		}
		return false, false, q.room
	}
	q.writes = append(q.writes, w)
	notify = !q.notified
	q.notified = true
	return true, notify, nil
}

// Take returns the queued writes, in Push order, up to max of them, and
// removes them from the queue, reusing spare (the slice the previous Take
// returned, done with) for the next writes. It wakes the pushers waiting
// for room. more: writes are left; the queue stays notified (Push sends no
// WritesReady for them), so the caller takes them itself, after whatever
// else it has to handle (the producer sends itself a WritesReady).
func (q *WriteQueue) Take(spare []*Write, max int) (ws []*Write, more bool) {
	clear(spare)
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.writes) <= max {
		ws = q.writes
		q.writes = spare[:0]
		q.notified = false
	} else {
		// Copied out rather than resliced: the rest stays at the front of
		// the queue's array, which the next Push appends to.
		ws = append(spare[:0], q.writes[:max]...)
		n := copy(q.writes, q.writes[max:])
		clear(q.writes[n:])
		q.writes, more = q.writes[:n], true
	}
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
	return len(q.writes)
}

// Reserve takes room for one write without queueing it (a durable write is
// appended to its store in between): PushReserved queues it, Release gives
// the room back. When full, room is closed at the next Take (or Release).
func (q *WriteQueue) Reserve() (ok bool, room <-chan struct{}) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.writes)+q.reserved >= q.max {
		if q.room == nil {
			q.room = make(chan struct{})
		}
		return false, q.room
	}
	q.reserved++
	return true, nil
}

// PushReserved queues w in the room Reserve took; notify as for Push.
func (q *WriteQueue) PushReserved(w *Write) (notify bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.reserved--
	q.writes = append(q.writes, w)
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

package gateway

import "sync"

// outQueue is a socket's frames waiting for its writer: a FIFO that grows
// as frames arrive (a ring that doubles, from outQueueMin slots up to max)
// and gives its memory back once the writer emptied it, so an idle socket
// keeps at most outQueueKeep slots (3 KiB), not OutboundQueue. Safe for one pusher side (the owner actor, the
// handler goroutine) and one popper (the writer) at once.
type outQueue struct {
	mu   sync.Mutex
	buf  []outFrame // a ring: n frames from head; nil when empty and shrunk
	head int
	n    int
	max  int
	// ready has room for one signal: push signals it when the queue was
	// empty, so the writer, which drains the queue on each signal, never
	// misses a frame.
	ready chan struct{}
}

// outQueueMin is the first allocation: a few frames (an answer, a
// notice, a short burst) fit without growing.
const outQueueMin = 16

// outQueueKeep is the most slots an empty queue keeps; a larger ring (a
// burst made it grow) is released when the writer drained it.
const outQueueKeep = 64

func newOutQueue(max int) *outQueue {
	return &outQueue{max: max, ready: make(chan struct{}, 1)}
}

// push appends f; false when max frames are waiting (nothing is added).
func (q *outQueue) push(f outFrame) bool {
	q.mu.Lock()
	if q.n == q.max {
		q.mu.Unlock()
		return false
	}
	if q.n == len(q.buf) {
		q.grow()
	}
	q.buf[(q.head+q.n)%len(q.buf)] = f
	q.n++
	first := q.n == 1
	q.mu.Unlock()
	if first {
		select {
		case q.ready <- struct{}{}:
		default: // a signal is pending: the writer drains what is here
		}
	}
	return true
}

// grow doubles the ring (at most max slots), keeping the frames in order.
// Caller holds q.mu.
func (q *outQueue) grow() {
	size := min(max(2*len(q.buf), outQueueMin), q.max)
	buf := make([]outFrame, size)
	for i := 0; i < q.n; i++ {
		buf[i] = q.buf[(q.head+i)%len(q.buf)]
	}
	q.buf, q.head = buf, 0
}

// pop removes the oldest frame; false when the queue is empty (then a
// ring larger than outQueueKeep is released).
func (q *outQueue) pop() (outFrame, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		if len(q.buf) > outQueueKeep {
			q.buf, q.head = nil, 0
		}
		return outFrame{}, false
	}
	f := q.buf[q.head]
	q.buf[q.head] = outFrame{} // the writer is done with it: let it go
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	return f, true
}

// len is the number of frames waiting.
func (q *outQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

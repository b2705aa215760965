package core

import "sync"

// NodeStatus is what one node did with an awaited write (Await), as its
// producer learnt it.
type NodeStatus uint8

// The statuses of a node in an Await. Delivered, Expired and NotOwed are
// final; Pending and Unreachable may still change.
const (
	// Pending: no answer covers the write yet.
	Pending NodeStatus = iota
	// Delivered: the node's worker acknowledged the write, which it does
	// after handing it to every subscriber's mailbox there (and, for a
	// durable topic, after its store took it). This node: at write time.
	Delivered
	// Unreachable: the last call to the node failed, or it left the
	// membership; the write is still owed to it while the buffer holds it.
	Unreachable
	// Expired: the node was told CursorExpired for a range holding the
	// write (it fell behind the buffer, or was joined past it).
	Expired
	// NotOwed: the node (re)started after the write and was joined past
	// it without a notice: it was not owed it (see "Joined").
	NotOwed
	// NotStored: asked to store (Await.Stored), the node delivered the
	// write, but its answer does not say its durable store appended it:
	// the store failed (its rows become gap rows), the node has none, it
	// is of an earlier build, or the answer covering it was not the
	// batch's own ack.
	NotStored
	// Unknown: the node's answers cannot tell whether it got the write:
	// an Expire answered by a worker that does not say where it stood
	// (a retried Expire, or an earlier build), after a lost batch ack.
	Unknown
)

// Final reports whether s can no longer change.
func (s NodeStatus) Final() bool {
	return s == Delivered || s == Expired || s == NotOwed || s == NotStored || s == Unknown
}

// AwaitNode is one asked node of an Await: its address and status.
type AwaitNode struct {
	Addr   string
	Status NodeStatus
}

// Await is one BroadcastAwait call waiting on its write (Write.Await):
// the caller makes it, the write's producer fills it in (under its lock)
// and closes Done once it is settled: every asked node's status is final,
// or Quorum of them delivered. The caller may read it (Snapshot) at any
// time and Cancel it when it stops waiting; the producer then drops it.
type Await struct {
	mu sync.Mutex
	// Set by Taken: the producer's node, group, incarnation and the write's
	// cursor (0 and false before the producer took it).
	node        string
	group       uint32
	incarnation uint64
	cursor      uint64
	taken       bool
	nodes       []AwaitNode
	quorum      int // 0: every node
	stored      bool
	done        chan struct{}
	finished    bool // done closed, or cancelled
}

// NewAwait returns an Await on nodes (addresses, each once), settled when
// quorum of them delivered (0: when every one is final).
func NewAwait(nodes []string, quorum int) *Await {
	a := &Await{quorum: quorum, done: make(chan struct{})}
	for _, n := range nodes {
		a.nodes = append(a.nodes, AwaitNode{Addr: n})
	}
	return a
}

// AskStored makes the Await ask for the durable append: a node whose
// answer does not say it stored the write is NotStored, not Delivered.
// Call it before the write is sent.
func (a *Await) AskStored() { a.stored = true }

// Stored reports whether the Await asks for the durable append.
func (a *Await) Stored() bool { return a.stored }

// Done is closed once the Await is settled.
func (a *Await) Done() <-chan struct{} { return a.done }

// Cancel stops the Await: its producer drops it at its next look.
func (a *Await) Cancel() {
	a.mu.Lock()
	a.finished = true
	a.mu.Unlock()
}

// AwaitSnapshot is a copy of an Await's state.
type AwaitSnapshot struct {
	Node        string
	Group       uint32
	Incarnation uint64
	Cursor      uint64
	Taken       bool
	Nodes       []AwaitNode
}

// Snapshot copies the Await's state.
func (a *Await) Snapshot() AwaitSnapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
	return AwaitSnapshot{Node: a.node, Group: a.group, Incarnation: a.incarnation, Cursor: a.cursor, Taken: a.taken,
		Nodes: append([]AwaitNode(nil), a.nodes...)}
}

// Taken records the write's place (the producer calls it when it buffers
// the write) and reports the nodes asked, for the producer to look up.
func (a *Await) Taken(node string, group uint32, incarnation, cursor uint64) {
	a.mu.Lock()
	a.node, a.group, a.incarnation, a.cursor, a.taken = node, group, incarnation, cursor, true
	a.mu.Unlock()
}

// Cursor is the write's cursor (valid once Taken).
func (a *Await) Cursor() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cursor
}

// Finished reports whether the Await is settled or cancelled: its producer
// drops it.
func (a *Await) Finished() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.finished
}

// Set gives node addr status s, unless its status is final already (a
// final status never changes: the first answer covering the write decides),
// and settles the Await when that completes it. It reports whether the
// Await is finished.
func (a *Await) Set(addr string, s NodeStatus) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.finished {
		return true
	}
	for i := range a.nodes {
		if a.nodes[i].Addr == addr && !a.nodes[i].Status.Final() {
			a.nodes[i].Status = s
		}
	}
	a.settle()
	return a.finished
}

// settle closes done when the Await is complete. Called under mu.
func (a *Await) settle() {
	final, delivered := 0, 0
	for _, n := range a.nodes {
		if n.Status.Final() {
			final++
		}
		if n.Status == Delivered {
			delivered++
		}
	}
	if final == len(a.nodes) || (a.quorum > 0 && delivered >= a.quorum) {
		a.finished = true
		close(a.done)
	}
}

package messages

import "time"

// Local reports: telemetry events published on the actor system's event
// stream, and the per-producer statistics of PubSub.Stats. They never
// cross the wire.

// Telemetry events, published on the actor system's event stream like
// EchoPubSub's :telemetry events (subscribe with
// system.EventStream.Subscribe). Each names the pubsub, the producer's pool
// group and the peer node concerned. CapacityWarning is the fifth.
type (
	// Flushed: a node acknowledged batches. One answer may acknowledge
	// several (the batches its worker had queued together): Messages counts
	// the entries of all of them, RoundTrip is the last one's.
	Flushed struct {
		Pubsub    string
		Group     uint32
		Node      string
		Messages  int
		RoundTrip time.Duration
	}
	// Expired: a node was told CursorExpired by this producer (it fell
	// behind the buffer, or messages it was owed at its join were gone).
	// Missed is every message the node will never receive from this
	// producer, counted from the cursor it last acknowledged, 0 when not
	// known (a join). Overwritten of them were overwritten in the buffer;
	// the others (Missed - Overwritten) were still buffered and are skipped:
	// the node's cursor moves to the write cursor, so that nothing older
	// arrives after its subscribers reloaded.
	Expired struct {
		Pubsub      string
		Group       uint32
		Node        string
		Missed      uint64
		Overwritten uint64
	}
	// SyncFailed: a call to a node failed (unreachable, timed out, refused).
	SyncFailed struct {
		Pubsub   string
		Group    uint32
		Node     string
		Err      string
		Failures int // consecutive
	}
	// RetryScheduled: the producer will try the node again after After.
	RetryScheduled struct {
		Pubsub string
		Group  uint32
		Node   string
		After  time.Duration
	}
)

// CapacityWarning is published on the actor system's event stream when the
// slowest node's lag reaches Config.CapacityWarningThreshold of BufferSize.
type CapacityWarning struct {
	Pubsub   string
	Group    uint32
	Node     string
	Lag      uint64
	Capacity int
}

// GroupStats is one producer's view of the cluster.
type GroupStats struct {
	Group       uint32
	Incarnation uint64
	WriteCursor uint64
	Capacity    int
	Nodes       []NodeStats
	// Listed: the producer had the membership's first complete list (see
	// cluster.Listed), so Nodes holds every member listed then.
	Listed bool
}

// NodeStats is one node as a producer sees it. The own node is always
// caught up (its subscribers get each message at write time).
type NodeStats struct {
	Node string
	// Next is the next cursor the node needs; Lag is how many messages the
	// producer holds for it (from ringbuf's decision).
	Next       uint64
	Lag        uint64
	Expired    bool // its lag exceeds the buffer: it will be told CursorExpired
	Registered bool
	InFlight   bool
	Absent     bool // left the membership; cursor kept until ForgetAfter
	Failures   int  // consecutive failed calls
	// LastAck is when the node last answered a call (zero: never);
	// Expirations counts the CursorExpired it was told by this producer.
	LastAck     time.Time
	Expirations int
	// LagUnknown: the node never answered a probe, so when it started, and
	// so what it is owed, is not known yet; Lag is then the most it can be
	// owed (everything this producer incarnation wrote), Next 0.
	LagUnknown bool
	// Stalled: the node is owed messages (Lag > 0) and its read cursor has
	// not moved for StallAfter (2 CallTimeout + BatchInterval), so its lag
	// only grows; StallReason says why, as far as the producer knows (its
	// calls fail, and the last error; it is not joined; or its worker
	// answers but takes nothing). Also the metric echopubsub.peer.stalled.
	Stalled     bool
	StallReason string
}

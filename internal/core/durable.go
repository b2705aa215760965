package core

import (
	"context"
	"time"

	"github.com/echopubsub/echopubsub/messages"
)

// Durable is the durable-stream side of a pubsub (internal/durable's
// Engine implements it; Runtime.Durable is nil without a store). Enqueue
// calls Publish for every write of this node; a worker calls the others
// for what it receives, so that a node-local store holds every durable
// message the node got and marks what it did not get (gap rows). For a
// shared store only Publish does anything.
type Durable interface {
	// IsDurable reports whether topic is a durable stream.
	IsDurable(topic string) bool
	// Publish appends w when it is durable. An error fails the write: it
	// is not queued.
	Publish(ctx context.Context, w *Write) error
	// Received appends rows (the batch's new durable entries, in cursor
	// order; may be empty; a node-local store sets each one's Cursor) and
	// records p (the producer's next cursor after the batch), before the
	// batch is delivered and acknowledged. An error refuses the batch (the
	// producer sends it again). A node-local store that fails to write
	// does not refuse it: Received counts the rows for gap rows written
	// once the store recovers, leaves their Cursor 0 and returns nil, so
	// that the node's traffic goes on (internal/durable/fault.go).
	Received(p ProducerPos, rows []Row) error
	// Lost records that messages of p's producer were lost for this node
	// (the worker tells its subscribers ce next: a node-local store's gap
	// row carries its count, reason and range), and p, the cursor it goes
	// on from.
	Lost(p ProducerPos, ce *messages.CursorExpired) error
	// Joined records that p's producer incarnation joined at p.Next. told:
	// the worker already told (or had no need to tell, knowing the
	// previous incarnation) about what came before; otherwise the store
	// compares with what it recorded of this producer before this node
	// started; predInc and predFinal are the producer's previous
	// incarnation and where it ended (Register.predecessor_*; 0: unknown).
	// It returns the cursor the worker goes on from: p.Next, or further
	// when the store already holds more of this producer incarnation (an
	// earlier incarnation of this node got further than the join, which
	// may reach back a little before this node started: see "Joined" in
	// the root package doc); what it holds is not stored twice.
	Joined(p ProducerPos, told bool, predInc, predFinal uint64) (next uint64, err error)
	// Retired records that p's producer incarnation ended gracefully at
	// p.Next with nothing left untold.
	Retired(p ProducerPos) error
	// Predecessor is this node's previous incarnation of group's producer
	// and the write cursor it ended at gracefully (0, 0: unknown).
	Predecessor(group uint32) (incarnation, final uint64)
	// Leases reports whether this node records its producers' leases (a
	// node-local store): without, Lease and Earlier do nothing.
	Leases() bool
	// Lease records that group's producer incarnation writes nothing after
	// until without recording a new lease first. A position-only write: not
	// fsynced (a process crash keeps it, a power loss may not).
	Lease(group uint32, incarnation uint64, until time.Time) error
	// Earlier is the last lease recorded for group's producer (ok false:
	// none): read by a producer incarnation before it records its own, it
	// bounds when the incarnation before it last wrote.
	Earlier(group uint32) (incarnation uint64, until time.Time, ok bool)
}

// ProducerPos is one producer incarnation's position in a worker.
type ProducerPos struct {
	Node        string
	Group       uint32
	Incarnation uint64
	Next        uint64
}

// Row is one received durable entry.
type Row struct {
	Topic, PayloadType string
	Payload            []byte
	// Cursor is the row's cursor in this node's store: the worker passes
	// the one the batch carried (a shared store's row, appended by its
	// publisher: Write.SharedCursor, or 0) and Received sets it when it
	// appends the row here (a node-local store).
	Cursor uint64
	// Unstored is set by Received for a row a failing node-local store
	// could not take (Cursor 0): a gap row counts it once the store
	// recovers.
	Unstored bool
}

package store

import "context"

// LocalStore is what a node-local Store (Shared false) adds so that its
// node records, in the transaction that stores what it received, how far
// it got in each producer's stream, and marks what it lost with gap rows
// (see "Durable streams" in the root package doc). store/bolt and
// store/seglog implement it. A node-local Store without it holds what its
// node published and received, and has no gap rows.
type LocalStore interface {
	// AppendAt appends recs (may be empty) and records pos, in one
	// transaction. A transaction that only records a position need not be
	// fsynced: after a power loss an older position makes a gap row that
	// was not needed (an alarm, never a silent loss).
	AppendAt(ctx context.Context, recs []Record, pos ProducerPosition) error
	// MarkGap appends gap (its Stream ignored) to every stream the store
	// holds and records pos, in one transaction.
	MarkGap(ctx context.Context, gap Record, pos ProducerPosition) error
	// Position is what was recorded for the producer of node's pool group
	// (ok false: nothing).
	Position(ctx context.Context, node string, group uint32) (pos ProducerPosition, ok bool, err error)
}

// ProducerPosition is how far a node got in one producer incarnation's
// stream: every durable message below Next is stored or marked lost. A
// LocalStore keeps the last one recorded per (Node, Group) and hands it
// back as it was given: the node keys its own bookkeeping there too (Node
// values that begin with a NUL byte).
type ProducerPosition struct {
	Node        string
	Group       uint32
	Incarnation uint64
	Next        uint64
	// Retired: the incarnation ended gracefully at Next.
	Retired bool
}

// Package store is the contract of durable streams: what a Store keeps
// (Record), how it numbers rows (cursors), what a node-local store adds to
// write producer positions and gap rows (LocalStore), what a Store adds to
// keep a Retention (Trimmer, and the one retention rule: Retention.Cut),
// and how a read tells that rows below it were removed (Truncation).
//
// The root package echopubsub keeps aliases of every name here
// (echopubsub.Store is store.Store, and so on) and uses a Store through
// WithStore. A Store written outside this repository implements this
// package and nothing else; package store/storekit has what the stores of
// this repository share (group commit, the record codec) and package
// store/storetest the conformance suite every Store must pass.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Store keeps durable streams: for each stream (a topic named durable with
// echopubsub.WithDurableTopics), the rows appended to it, numbered by a
// cursor. Three implementations ship: package store/seglog (embedded, a
// segmented log in one directory per node, one fdatasync per commit: the
// default, and the demo's), module store/bolt (embedded, one bbolt file
// per node, which opens in constant time) and module store/postgres
// (PostgreSQL shared by the cluster). Package store/storetest is the
// conformance suite every Store must pass. A Store validates what it is
// given: a record needs a Stream, a Kind of RecordMessage or RecordGap,
// and a message record its PayloadType (storekit.ValidateRecord).
//
// A node-local Store (Shared false) holds what its node published and
// received. Marking what the node missed with gap rows also needs the
// producer positions that store/bolt and store/seglog record with their
// rows: LocalStore. A node-local Store without it has no gap rows.
//
// Cursors: a stream's first row has cursor 1 and each row the previous
// cursor + 1, with no hole: a row is visible to Read only once every row
// below it is. Append is all or nothing.
//
// Implementations must be safe for concurrent use.
type Store interface {
	// Append stores recs (all or none) and sets each one's Cursor. Records
	// of one stream get consecutive cursors in slice order. When Append
	// returns nil the rows are durable (they survive a crash of the
	// process and of the machine, as far as the storage's fsync does).
	Append(ctx context.Context, recs []Record) error
	// Read returns up to limit (> 0) rows of stream whose cursor is >=
	// from (0 reads from the start), in cursor order, and next, the cursor
	// after the last row returned. With no row: next is from (1 for from
	// 0) when nothing at or after from was appended yet, and the stream's
	// end + 1 when every row from from on was removed (Trimmer). A from
	// past the stream's end + 1 is ErrCursorBeyondEnd: such a cursor was
	// not handed out by this store. A stream never appended to is empty:
	// reading it from 0 or 1 returns no rows and next 1. A first row above
	// from, or a next above from with no row, means rows below were
	// removed (Truncation): the replay and catch-up tell the session
	// (echopubsub.StreamTruncated).
	Read(ctx context.Context, stream string, from uint64, limit int) (recs []Record, next uint64, err error)
	// Shared reports whether every node of the cluster uses this store (a
	// shared database: the publishing node appends each row once, and a
	// cursor means the same row on every node) or it belongs to one node
	// (an embedded file: each node appends what it receives, and a cursor
	// is meaningful only on the node that handed it out).
	Shared() bool
	// Close releases the store. Calls after Close fail.
	Close() error
}

// RecordKind is what a stream row holds.
type RecordKind uint8

const (
	// RecordMessage is a broadcast message.
	RecordMessage RecordKind = 1
	// RecordGap marks messages of the stream this node's store does not
	// hold (a node-local store that missed them: see the root package
	// doc, "Durable streams"). echopubsub.ReplaySession hands the session
	// a *echopubsub.StreamGap.
	RecordGap RecordKind = 2
)

func (k RecordKind) String() string {
	switch k {
	case RecordMessage:
		return "message"
	case RecordGap:
		return "gap"
	}
	return fmt.Sprintf("RecordKind(%d)", uint8(k))
}

// Record is one row of a stream.
type Record struct {
	Stream string
	// Cursor is set by Append.
	Cursor uint64
	Kind   RecordKind
	// Origin is the node that published the message (for a gap: the
	// producer node whose messages are missing).
	Origin string
	// PayloadType and Payload are the message's full protobuf name and
	// wire bytes (RecordMessage).
	// A gap row whose range is known (which producer cursors it stands
	// for: StreamGap's From and To) carries it here, as a
	// messages.GapRange of PayloadType "echopubsub.v1.GapRange" (a few
	// bytes, counted by Retention.MaxBytes like any payload); one without
	// (written by an earlier build, or counting rows a failing store could
	// not take) has an unknown range.
	PayloadType string
	Payload     []byte
	// Missed is, for a gap, the number of messages missing (0: unknown).
	Missed uint64
	// Reason says why a gap is there.
	Reason string
	// Time is when the row was appended: Append sets it (the store's
	// clock, UTC, to the microsecond: storekit.Stamp) when it is zero.
	// Retention.MaxAge reads it. Rows a store wrote before it recorded
	// times read back with the zero Time (see Trimmer).
	Time time.Time
}

// Store errors. The root package's names for them (echopubsub.ErrStoreClosed
// and so on) are the same values.
var (
	// ErrCursorBeyondEnd: a replay cursor past the stream's end + 1. It was
	// not handed out by this store: a cursor of another node's embedded
	// store, or a store that was deleted and created anew. Nothing is
	// skipped on its account: replay from a cursor this store handed out
	// (or from 0 after reloading from a source of truth).
	ErrCursorBeyondEnd = errors.New("echopubsub: replay cursor is beyond the stream's end")
	// ErrStoreClosed: the store was closed.
	ErrStoreClosed = errors.New("echopubsub: store closed")
	// ErrBadLimit: a Read (or echopubsub.ReplayOptions) limit must be > 0.
	ErrBadLimit = errors.New("echopubsub: replay limit must be positive")
)

package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// This file is the one home of retention: what to keep (Retention), what
// a Store adds to keep it (Trimmer), the rule that decides which rows go
// (Retention.Cut) and the rule that tells a reader rows below it went
// (Truncation). Every implementation applies Cut (store/postgres says the
// same in SQL, held to Cut by the conformance suite, store/storetest),
// and store/storetest checks the rules below. What applies them: the
// pubsub's trim loop (internal/durable/trimmer.go, started by
// echopubsub.WithRetention) and each store's Trim (its trim.go).

// Retention bounds what the store keeps of each durable stream. A zero
// field is no limit; the zero Retention keeps everything (the default).
// The oldest rows go first, and a stream's cursors are never reused: a
// replay or a catch-up (echopubsub.WithFrom) from a cursor below what is
// kept gets a *echopubsub.StreamTruncated first, then the rows from its
// FirstKept.
type Retention struct {
	// MaxAge drops rows appended longer ago than this.
	MaxAge time.Duration
	// MaxRows keeps at most this many rows per stream.
	MaxRows uint64
	// MaxBytes keeps at most this many payload bytes per stream.
	MaxBytes uint64
}

// Validate reports a negative MaxAge.
func (r Retention) Validate() error {
	if r.MaxAge < 0 {
		return fmt.Errorf("echopubsub: Retention.MaxAge must be >= 0, got %s", r.MaxAge)
	}
	return nil
}

// String names the limits set ("MaxAge 1h0m0s, MaxRows 1000"; "none").
func (r Retention) String() string {
	var parts []string
	if r.MaxAge != 0 {
		parts = append(parts, fmt.Sprintf("MaxAge %s", r.MaxAge))
	}
	if r.MaxRows != 0 {
		parts = append(parts, fmt.Sprintf("MaxRows %d", r.MaxRows))
	}
	if r.MaxBytes != 0 {
		parts = append(parts, fmt.Sprintf("MaxBytes %d", r.MaxBytes))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// Trimmer is what a Store adds to enforce a Retention
// (echopubsub.WithRetention): it is an interface of its own, not a method
// of Store, so that a Store written for an earlier release still compiles
// and runs unchanged when nobody asks for retention; Start refuses
// WithRetention with a store that lacks it, naming the store's type,
// rather than keep rows it was told to drop. store/bolt, store/seglog,
// store/postgres and test.MemStore implement it.
//
// The rules every implementation follows (store/storetest checks them):
//
//   - Only the oldest rows of a stream go: Trim removes, per stream, every
//     row at or below one cursor (Retention.Cut). The rows kept are a
//     contiguous run that ends at the stream's last row, so Read from a
//     removed cursor returns the first kept row, or, with every row
//     removed, no row and next = the stream's end + 1.
//   - Cursors are never reused: the stream's end survives its rows (and a
//     reopen); the next Append continues after it.
//   - MaxRows counts every row (gap rows too); MaxBytes counts the
//     payload bytes (len(Payload)) of the rows kept, and keeps at most that
//     many, even when that leaves no row; MaxAge removes the rows appended
//     more than MaxAge before now. A row with the zero Time (written before
//     the store recorded times) is as old as the first timed row after it:
//     it goes when a later row goes for its age, never on its own.
//   - Appends are never blocked for long: an implementation removes rows in
//     bounded chunks (TrimChunk), each its own transaction, and rows of the
//     stream appended meanwhile are kept (they are above the cut).
//   - A store that keeps named consumers (ConsumerStore) holds their
//     rows: MaxAge and MaxRows remove no row above the lowest committed
//     cursor of the stream's consumers; MaxBytes is a hard cap and
//     removes what it removes (CutHeld).
//   - A node-local store keeps its producer positions and its gap rows
//     working: MarkGap still writes a gap row into a stream whose rows were
//     all removed.
type Trimmer interface {
	// Trim removes from every stream the rows r does not keep (now is
	// the store's clock) and reports, per stream it removed rows from,
	// what it removed. With ctx ended it stops between chunks and returns
	// what it removed so far with ctx's error. A zero r removes nothing.
	Trim(ctx context.Context, r Retention) ([]Trimmed, error)
}

// Trimmed is what one Trim removed from one stream.
type Trimmed struct {
	Stream string
	// Rows and Bytes (payload bytes) removed.
	Rows, Bytes uint64
	// FirstKept is the stream's first cursor still kept: its end + 1 when
	// every row was removed.
	FirstKept uint64
}

// TrimChunk is the most rows one trim transaction removes (store/bolt,
// store/postgres): a chunk costs an append queued behind it a few
// milliseconds, however many rows the trim removes in all.
const TrimChunk = 1000

// TrimRow is what a trim decision needs of one row.
type TrimRow struct {
	Cursor uint64
	Time   time.Time
	Bytes  uint64 // len(Payload)
}

// Cut is the highest cursor of a stream that r removes (0: none): the
// Trimmer rules, for a store that walks its rows in Go (store/bolt,
// store/seglog, test.MemStore; store/postgres says the same in SQL).
// first and end are the stream's first kept and last cursors (first > end:
// no row). forward yields the rows from the first kept up, until it
// returns false or yield does; backward from the last down.
func (r Retention) Cut(now time.Time, first, end uint64, forward, backward func(yield func(TrimRow) bool)) uint64 {
	return r.CutHeld(now, first, end, NoHold, forward, backward)
}

// CutHeld is Cut for a stream whose named consumers hold held (Held of
// its consumers; NoHold: none): MaxAge and MaxRows remove no row above
// held (a row a consumer has not committed stays), MaxBytes, the hard
// cap, removes what it removes regardless; a consumer whose rows it
// removed is told with a StreamTruncated when it resumes
// (echopubsub.WithConsumer).
func (r Retention) CutHeld(now time.Time, first, end, held uint64, forward, backward func(yield func(TrimRow) bool)) uint64 {
	if first > end {
		return 0
	}
	var cut uint64
	if r.MaxRows > 0 && end-first+1 > r.MaxRows {
		cut = end - r.MaxRows
	}
	if r.MaxAge > 0 {
		cut = max(cut, ageCut(now.Add(-r.MaxAge), forward))
	}
	cut = min(cut, held)
	if r.MaxBytes > 0 {
		cut = max(cut, bytesCut(r.MaxBytes, backward))
	}
	return cut
}

// ageCut is the highest cursor appended before cutoff, walking rows from
// the first kept up and stopping at the first timed row at or after
// cutoff (rows are kept as a contiguous tail). A row with the zero Time
// goes only with a timed row after it.
func ageCut(cutoff time.Time, forward func(yield func(TrimRow) bool)) uint64 {
	var cut uint64
	forward(func(r TrimRow) bool {
		if r.Time.IsZero() {
			return true
		}
		if !r.Time.Before(cutoff) {
			return false
		}
		cut = r.Cursor
		return true
	})
	return cut
}

// bytesCut is the highest cursor to remove so that the rows kept hold at
// most maxBytes payload bytes, walking rows from the last down.
func bytesCut(maxBytes uint64, backward func(yield func(TrimRow) bool)) uint64 {
	var sum, cut uint64
	backward(func(r TrimRow) bool {
		sum += r.Bytes
		if sum > maxBytes {
			cut = r.Cursor
			return false
		}
		return true
	})
	return cut
}

// Truncation is the one rule that tells a read of a stream from `from`
// began past it: rows (in cursor order) and next are what Store.Read
// returned. A store's cursors have no hole, so a first row above from, or
// no row and a next above from, means rows below were removed by
// retention; firstKept is the first cursor still kept.
func Truncation(from uint64, rows []Record, next uint64) (firstKept uint64, truncated bool) {
	from = max(from, 1)
	if len(rows) > 0 {
		return rows[0].Cursor, rows[0].Cursor > from
	}
	return next, next > from
}

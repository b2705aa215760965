package echopubsub

import (
	"fmt"
	"time"
)

// Retention bounds what the store keeps of each durable stream. A zero
// field is no limit; the zero Retention keeps everything (the default).
// The oldest rows go first, and a stream's cursors are never reused: a
// replay or a catch-up (WithFrom) from a cursor below what is kept gets a
// *StreamTruncated first, then the rows from its FirstKept.
type Retention struct {
	// MaxAge drops rows appended longer ago than this.
	MaxAge time.Duration
	// MaxRows keeps at most this many rows per stream.
	MaxRows uint64
	// MaxBytes keeps at most this many payload bytes per stream.
	MaxBytes uint64
}

// validate reports a negative MaxAge.
func (r Retention) validate() error {
	if r.MaxAge < 0 {
		return fmt.Errorf("echopubsub: Retention.MaxAge must be >= 0, got %s", r.MaxAge)
	}
	return nil
}

// WithRetention makes the pubsub trim its durable streams to r. Defaults
// to the zero Retention (keep everything).
func WithRetention(r Retention) Option { return func(o *options) { o.retention = r } }

// StreamTruncated tells a session that rows of Stream it asked for (from
// From, in ReplaySession or a WithFrom catch-up) are no longer kept: the
// store removed everything below FirstKept under its Retention. The rows
// from FirstKept follow. As for CursorExpired, reload what the forgotten
// rows carried from a source of truth.
type StreamTruncated struct {
	SessionID string
	Stream    string
	From      uint64
	FirstKept uint64
}

// truncation is the one rule that tells a read of stream from `from` began
// past it: rows (in cursor order) and next are what Store.Read returned.
// A store's cursors have no hole, so a first row above from, or no row and
// a next above from, means rows below were removed by retention.
func truncation(from uint64, rows []Record, next uint64) (firstKept uint64, truncated bool) {
	from = max(from, 1)
	if len(rows) > 0 {
		return rows[0].Cursor, rows[0].Cursor > from
	}
	return next, next > from
}

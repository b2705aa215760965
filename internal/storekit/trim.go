package storekit

import (
	"time"

	"github.com/echopubsub/echopubsub"
)

// TrimChunk is the most rows one trim transaction removes (store/bolt,
// store/postgres): a chunk costs an append queued behind it a few
// milliseconds, however many rows the trim removes in all.
const TrimChunk = 1000

// Stamp sets the Time of each record that has none: now, in UTC, to the
// microsecond (what PostgreSQL's timestamptz keeps, so that every store
// reads back the same Time). Append calls it before it stores recs.
func Stamp(recs []echopubsub.Record) {
	now := time.Now().UTC().Truncate(time.Microsecond)
	for i := range recs {
		if recs[i].Time.IsZero() {
			recs[i].Time = now
		}
	}
}

// Row is what a trim decision needs of one row.
type Row struct {
	Cursor uint64
	Time   time.Time
	Bytes  uint64 // len(Payload)
}

// Cut is the highest cursor of a stream that r removes (0: none), the
// Trimmer rules of package echopubsub, for a store that walks its rows in
// Go (store/bolt, test.MemStore; store/postgres says the same in SQL).
// first and end are the stream's first kept and last cursors (first > end:
// no row). forward yields the rows from the first kept up, until it
// returns false or yield does; backward from the last down.
func Cut(r echopubsub.Retention, now time.Time, first, end uint64,
	forward, backward func(yield func(Row) bool)) uint64 {
	if first > end {
		return 0
	}
	var cut uint64
	if r.MaxRows > 0 && end-first+1 > r.MaxRows {
		cut = end - r.MaxRows
	}
	if r.MaxAge > 0 {
		cut = max(cut, AgeCut(now.Add(-r.MaxAge), forward))
	}
	if r.MaxBytes > 0 {
		cut = max(cut, BytesCut(r.MaxBytes, backward))
	}
	return cut
}

// AgeCut is the highest cursor appended before cutoff, walking rows from
// the first kept up and stopping at the first timed row at or after
// cutoff (rows are kept as a contiguous tail). A row with the zero Time
// goes only with a timed row after it.
func AgeCut(cutoff time.Time, forward func(yield func(Row) bool)) uint64 {
	var cut uint64
	forward(func(r Row) bool {
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

// BytesCut is the highest cursor to remove so that the rows kept hold at
// most maxBytes payload bytes, walking rows from the last down.
func BytesCut(maxBytes uint64, backward func(yield func(Row) bool)) uint64 {
	var sum, cut uint64
	backward(func(r Row) bool {
		sum += r.Bytes
		if sum > maxBytes {
			cut = r.Cursor
			return false
		}
		return true
	})
	return cut
}

package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/echopubsub/echopubsub/store"
)

// Trim implements store.Trimmer. Per stream, it finds the highest
// cursor r removes (the rules of store.Retention.CutHeld, in SQL, held by the
// stream's consumers: MaxRows from the
// counter, MaxAge walking the primary key from the oldest row, MaxBytes a
// running sum from the newest, whose cost grows with the rows kept), then
// deletes at most store.TrimChunk rows per statement, each statement its
// own transaction. A DELETE locks only the rows it removes, never a
// stream's counter row, so appends (which lock that row) go on meanwhile;
// the counter stays, so cursors are never reused. Rows with a NULL
// appended_at (tables from before) are the zero Time of the rules.
func (s *Store) Trim(ctx context.Context, r store.Retention) ([]store.Trimmed, error) {
	if r == (store.Retention{}) {
		return nil, nil
	}
	if s.closed.Load() {
		return nil, store.ErrStoreClosed
	}
	type stream struct {
		name        string
		first, last int64
	}
	rows, err := s.pool.Query(ctx, `SELECT s.stream, s.last_cursor,
		(SELECT min(cursor) FROM `+s.records+` r WHERE r.stream = s.stream) FROM `+s.streams+` s ORDER BY s.stream`)
	if err != nil {
		return nil, s.trimErr(err)
	}
	var streams []stream
	for rows.Next() {
		var st stream
		var first *int64
		if err := rows.Scan(&st.name, &st.last, &first); err != nil {
			rows.Close()
			return nil, s.trimErr(err)
		}
		if first != nil {
			st.first = *first
			streams = append(streams, st)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, s.trimErr(err)
	}
	now := time.Now()
	var out []store.Trimmed
	for _, st := range streams {
		cut, err := s.cut(ctx, r, now, st.name, st.first, st.last)
		if err != nil {
			return out, err
		}
		if cut < st.first {
			continue
		}
		t := store.Trimmed{Stream: st.name, FirstKept: uint64(cut) + 1}
		for lo := st.first; lo <= cut; lo += store.TrimChunk {
			var n, bytes int64
			if err := s.pool.QueryRow(ctx, `WITH d AS (DELETE FROM `+s.records+`
				WHERE stream = $1 AND cursor >= $2 AND cursor <= $3 RETURNING octet_length(payload) AS n)
				SELECT count(*), coalesce(sum(n), 0) FROM d`, st.name, lo, min(lo+store.TrimChunk-1, cut)).Scan(&n, &bytes); err != nil {
				if t.Rows > 0 {
					out = append(out, t)
				}
				return out, s.trimErr(err)
			}
			t.Rows, t.Bytes = t.Rows+uint64(n), t.Bytes+uint64(bytes)
		}
		if t.Rows > 0 {
			out = append(out, t)
		}
	}
	return out, nil
}

// cut is the highest cursor of stream that r removes (first - 1: none).
func (s *Store) cut(ctx context.Context, r store.Retention, now time.Time, stream string, first, last int64) (int64, error) {
	cut := first - 1
	if r.MaxRows > 0 && uint64(last-first+1) > r.MaxRows {
		cut = last - int64(r.MaxRows)
	}
	if r.MaxAge > 0 {
		var c *int64
		if err := s.pool.QueryRow(ctx, `SELECT max(cursor) FROM `+s.records+`
			WHERE stream = $1 AND appended_at < $2 AND cursor < coalesce(
				(SELECT min(cursor) FROM `+s.records+` WHERE stream = $1 AND appended_at >= $2), 9223372036854775807)`,
			stream, now.Add(-r.MaxAge)).Scan(&c); err != nil {
			return 0, s.trimErr(err)
		}
		if c != nil {
			cut = max(cut, *c)
		}
	}
	// Named consumers hold rows above their lowest committed cursor from
	// MaxRows and MaxAge, not from MaxBytes (store.Retention.CutHeld).
	var held *int64
	if err := s.pool.QueryRow(ctx, `SELECT min(cursor) FROM `+s.consumers+` WHERE stream = $1`, stream).Scan(&held); err != nil {
		return 0, s.trimErr(err)
	}
	if held != nil {
		cut = min(cut, *held)
	}
	if r.MaxBytes > 0 {
		var c *int64
		err := s.pool.QueryRow(ctx, `SELECT max(cursor) FROM (SELECT cursor,
			sum(octet_length(payload)) OVER (ORDER BY cursor DESC) AS kept FROM `+s.records+` WHERE stream = $1) k
			WHERE kept > $2`, stream, int64(min(r.MaxBytes, 1<<62))).Scan(&c)
		if err != nil {
			return 0, s.trimErr(err)
		}
		if c != nil {
			cut = max(cut, *c)
		}
	}
	return cut, nil
}

func (s *Store) trimErr(err error) error {
	if isClosed(err) {
		return fmt.Errorf("echopubsub postgres: trim: %w: %w", store.ErrStoreClosed, err)
	}
	return fmt.Errorf("echopubsub postgres: trim: %w", err)
}

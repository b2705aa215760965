package bolt

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	bbolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/echopubsub/echopubsub/store"
	"github.com/echopubsub/echopubsub/store/storekit"
)

// Trim implements store.Trimmer. It decides what to remove in a read
// transaction (which does not hold appends back: bbolt runs readers beside
// its one writer), walking a stream's rows from the oldest for MaxAge and
// from the newest for MaxBytes, so its cost grows with the rows it keeps
// when MaxBytes is set. It then deletes at most store.TrimChunk rows per
// write transaction, each queued with the appends (group commit): an
// append waits for at most about one chunk, however large the trim. Only
// rows go; each stream's bucket (its sequence: the stream's end) and the
// producer positions stay.
func (s *Store) Trim(ctx context.Context, r store.Retention) ([]store.Trimmed, error) {
	if r == (store.Retention{}) {
		return nil, nil
	}
	cuts, err := s.cuts(r, time.Now())
	if err != nil {
		return nil, err
	}
	var out []store.Trimmed
	for _, c := range cuts {
		t := store.Trimmed{Stream: c.stream}
		for {
			if err := ctx.Err(); err != nil {
				return appendTrimmed(out, t), err
			}
			chunk := &trimChunk{stream: c.stream, upTo: c.cut}
			if err := s.commits.Submit(ctx, &boltAppend{trim: chunk}); err != nil {
				if !errors.Is(err, store.ErrStoreClosed) {
					err = fmt.Errorf("echopubsub: bolt trim %q: %w", c.stream, err)
				}
				return appendTrimmed(out, t), err
			}
			t.Rows, t.Bytes, t.FirstKept = t.Rows+chunk.rows, t.Bytes+chunk.bytes, chunk.firstKept
			if chunk.rows < store.TrimChunk || chunk.firstKept > c.cut {
				break
			}
		}
		out = appendTrimmed(out, t)
	}
	return out, nil
}

func appendTrimmed(out []store.Trimmed, t store.Trimmed) []store.Trimmed {
	if t.Rows > 0 {
		out = append(out, t)
	}
	return out
}

type streamCut struct {
	stream string
	cut    uint64 // the highest cursor to remove
}

// cuts is, for each stream with rows to remove, the highest cursor r
// removes (store.Retention.CutHeld, held by the stream's consumers), read
// in one read transaction.
func (s *Store) cuts(r store.Retention, now time.Time) ([]streamCut, error) {
	var out []streamCut
	err := s.db.View(func(tx *bbolt.Tx) error {
		root := tx.Bucket(bucketStreams)
		return root.ForEachBucket(func(name []byte) error {
			b := root.Bucket(name)
			k, _ := b.Cursor().First()
			if k == nil {
				return nil
			}
			var walkErr error
			walk := func(down bool) func(func(store.TrimRow) bool) {
				return func(yield func(store.TrimRow) bool) {
					c := b.Cursor()
					k, v := c.First()
					if down {
						k, v = c.Last()
					}
					for ; k != nil; k, v = step(c, down) {
						p, err := storekit.ParseChecked(v)
						if err != nil {
							walkErr = fmt.Errorf("stream %q cursor %d: %w", name, binary.BigEndian.Uint64(k), err)
							return
						}
						if !yield(store.TrimRow{Cursor: binary.BigEndian.Uint64(k), Time: p.Time, Bytes: uint64(len(p.Fields[2]))}) {
							return
						}
					}
				}
			}
			cs, err := consumersTx(tx, string(name))
			if err != nil {
				return err
			}
			cut := r.CutHeld(now, binary.BigEndian.Uint64(k), b.Sequence(), store.Held(cs), walk(false), walk(true))
			if walkErr != nil {
				return walkErr
			}
			if cut >= binary.BigEndian.Uint64(k) {
				out = append(out, streamCut{stream: string(name), cut: cut})
			}
			return nil
		})
	})
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return nil, store.ErrStoreClosed
	}
	if err != nil {
		return nil, fmt.Errorf("echopubsub: bolt trim: %w", err)
	}
	return out, nil
}

func step(c *bbolt.Cursor, down bool) ([]byte, []byte) {
	if down {
		return c.Prev()
	}
	return c.Next()
}

// trimChunk deletes, in the committer's transaction, at most
// store.TrimChunk of stream's oldest rows, none above upTo. Its results
// are set (not added to) by run: a group commit that failed runs it again
// alone.
type trimChunk struct {
	stream    string
	upTo      uint64
	rows      uint64 // removed
	bytes     uint64 // their payload bytes
	firstKept uint64 // the stream's first cursor left (end + 1: none)
}

func (t *trimChunk) run(tx *bbolt.Tx) error {
	t.rows, t.bytes, t.firstKept = 0, 0, 0
	b := tx.Bucket(bucketStreams).Bucket([]byte(t.stream))
	if b == nil {
		return nil
	}
	var keys [][]byte
	c := b.Cursor()
	for k, v := c.First(); k != nil && len(keys) < store.TrimChunk && binary.BigEndian.Uint64(k) <= t.upTo; k, v = c.Next() {
		p, err := storekit.ParseChecked(v)
		if err != nil {
			return fmt.Errorf("stream %q cursor %d: %w", t.stream, binary.BigEndian.Uint64(k), err)
		}
		t.bytes += uint64(len(p.Fields[2]))
		keys = append(keys, append([]byte(nil), k...))
	}
	for _, k := range keys { // not through the cursor: bbolt's Cursor.Delete can skip the next key
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	t.rows = uint64(len(keys))
	t.firstKept = b.Sequence() + 1
	if k, _ := b.Cursor().First(); k != nil {
		t.firstKept = binary.BigEndian.Uint64(k)
	}
	return nil
}

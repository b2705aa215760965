package bolt

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	bbolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/echopubsub/echopubsub/store"
	"github.com/echopubsub/echopubsub/store/storekit"
)

// Streams implements store.StreamLister in one read transaction. It
// reads every row kept (its payload length is inside the record), so its
// cost grows with the rows: an operator's look, not a hot path.
func (s *Store) Streams(ctx context.Context) ([]store.StreamInfo, error) {
	var out []store.StreamInfo
	err := s.db.View(func(tx *bbolt.Tx) error {
		root := tx.Bucket(bucketStreams)
		return root.ForEachBucket(func(name []byte) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			b := root.Bucket(name)
			info := store.StreamInfo{Stream: string(name), Last: b.Sequence(), First: b.Sequence() + 1}
			c := b.Cursor()
			for k, v := c.First(); k != nil; k, v = c.Next() {
				cur := binary.BigEndian.Uint64(k)
				p, err := storekit.ParseChecked(v)
				if err != nil {
					return fmt.Errorf("stream %q cursor %d: %w", name, cur, err)
				}
				if info.Rows == 0 {
					info.First = cur
				}
				info.Rows++
				info.Bytes += uint64(len(p.Fields[2]))
			}
			out = append(out, info)
			return nil
		})
	})
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return nil, store.ErrStoreClosed
	}
	if err != nil {
		return nil, fmt.Errorf("echopubsub: bolt streams: %w", err)
	}
	return out, nil
}

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
)

var _ store.ConsumerStore = (*Store)(nil)

// Named consumers live in bucket "consumers": one bucket per stream, whose
// keys are the consumer names and values the committed cursor and the
// commit time (unix microseconds), 8 bytes big-endian each. They are
// written through the group commit, fsynced, like rows.

// consumerOp sets (or, with del, deletes) one consumer in the committer's
// transaction.
type consumerOp struct {
	stream, name string
	cursor       uint64
	at           time.Time
	del          bool
}

func (o *consumerOp) run(tx *bbolt.Tx) error {
	root := tx.Bucket(bucketConsumers)
	if o.del {
		b := root.Bucket([]byte(o.stream))
		if b == nil {
			return nil
		}
		return b.Delete([]byte(o.name))
	}
	b, err := root.CreateBucketIfNotExists([]byte(o.stream))
	if err != nil {
		return fmt.Errorf("consumers of stream %q: %w", o.stream, err)
	}
	v := binary.BigEndian.AppendUint64(nil, o.cursor)
	v = binary.BigEndian.AppendUint64(v, uint64(o.at.UnixMicro()))
	return b.Put([]byte(o.name), v)
}

// CommitConsumer implements store.ConsumerStore.
func (s *Store) CommitConsumer(ctx context.Context, stream, name string, cursor uint64) error {
	return s.consumerOp(ctx, &consumerOp{stream: stream, name: name, cursor: cursor, at: time.Now()})
}

// DeleteConsumer implements store.ConsumerStore.
func (s *Store) DeleteConsumer(ctx context.Context, stream, name string) error {
	return s.consumerOp(ctx, &consumerOp{stream: stream, name: name, del: true})
}

func (s *Store) consumerOp(ctx context.Context, op *consumerOp) error {
	if err := s.commits.Submit(ctx, &boltAppend{consumer: op}); err != nil {
		if !errors.Is(err, store.ErrStoreClosed) {
			err = fmt.Errorf("echopubsub: bolt consumer %q of %q: %w", op.name, op.stream, err)
		}
		return err
	}
	return nil
}

// Consumers implements store.ConsumerStore.
func (s *Store) Consumers(ctx context.Context, stream string) (cs []store.Consumer, end uint64, err error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	err = s.db.View(func(tx *bbolt.Tx) error {
		if b := tx.Bucket(bucketStreams).Bucket([]byte(stream)); b != nil {
			end = b.Sequence()
		}
		cs, err = consumersTx(tx, stream)
		return err
	})
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return nil, 0, store.ErrStoreClosed
	}
	if err != nil {
		return nil, 0, fmt.Errorf("echopubsub: bolt consumers of %q: %w", stream, err)
	}
	return cs, end, nil
}

// consumersTx lists stream's consumers, by name.
func consumersTx(tx *bbolt.Tx, stream string) ([]store.Consumer, error) {
	b := tx.Bucket(bucketConsumers).Bucket([]byte(stream))
	if b == nil {
		return nil, nil
	}
	var cs []store.Consumer
	err := b.ForEach(func(k, v []byte) error {
		if len(v) != 16 {
			return fmt.Errorf("consumer %q: %d bytes", k, len(v))
		}
		cs = append(cs, store.Consumer{Name: string(k), Cursor: binary.BigEndian.Uint64(v),
			Time: time.UnixMicro(int64(binary.BigEndian.Uint64(v[8:]))).UTC()})
		return nil
	})
	return cs, err
}

package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/echopubsub/echopubsub/store"
)

var _ store.ConsumerStore = (*Store)(nil)

// CommitConsumer implements store.ConsumerStore: one upsert into
// <prefix>consumers, committed when it returns.
func (s *Store) CommitConsumer(ctx context.Context, stream, name string, cursor uint64) error {
	if s.closed.Load() {
		return store.ErrStoreClosed
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO `+s.consumers+` (stream, name, cursor, committed_at)
		VALUES ($1, $2, $3, $4) ON CONFLICT (stream, name) DO UPDATE SET cursor = $3, committed_at = $4`,
		stream, name, int64(cursor), time.Now().UTC().Truncate(time.Microsecond)); err != nil {
		return s.consumerErr("commit", stream, name, err)
	}
	return nil
}

// DeleteConsumer implements store.ConsumerStore.
func (s *Store) DeleteConsumer(ctx context.Context, stream, name string) error {
	if s.closed.Load() {
		return store.ErrStoreClosed
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM `+s.consumers+` WHERE stream = $1 AND name = $2`, stream, name); err != nil {
		return s.consumerErr("delete", stream, name, err)
	}
	return nil
}

// Consumers implements store.ConsumerStore: the stream's end, then its
// consumers (two statements: a commit between them makes a lag read one
// row short, never a cursor wrong).
func (s *Store) Consumers(ctx context.Context, stream string) ([]store.Consumer, uint64, error) {
	if s.closed.Load() {
		return nil, 0, store.ErrStoreClosed
	}
	var end int64
	if err := s.pool.QueryRow(ctx, `SELECT coalesce((SELECT last_cursor FROM `+s.streams+` WHERE stream = $1), 0)`,
		stream).Scan(&end); err != nil {
		return nil, 0, s.consumerErr("list", stream, "", err)
	}
	rows, err := s.pool.Query(ctx, `SELECT name, cursor, committed_at FROM `+s.consumers+`
		WHERE stream = $1 ORDER BY name COLLATE "C"`, stream)
	if err != nil {
		return nil, 0, s.consumerErr("list", stream, "", err)
	}
	defer rows.Close()
	var cs []store.Consumer
	for rows.Next() {
		var c store.Consumer
		var cursor int64
		if err := rows.Scan(&c.Name, &cursor, &c.Time); err != nil {
			return nil, 0, s.consumerErr("list", stream, "", err)
		}
		c.Cursor, c.Time = uint64(cursor), c.Time.UTC()
		cs = append(cs, c)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, s.consumerErr("list", stream, "", err)
	}
	return cs, uint64(end), nil
}

func (s *Store) consumerErr(op, stream, name string, err error) error {
	if isClosed(err) {
		return fmt.Errorf("echopubsub postgres: consumer %s %q of %q: %w: %w", op, name, stream, store.ErrStoreClosed, err)
	}
	return fmt.Errorf("echopubsub postgres: consumer %s %q of %q: %w", op, name, stream, err)
}

package seglog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/echopubsub/echopubsub/store"
	"github.com/echopubsub/echopubsub/store/storekit"
)

var _ store.ConsumerStore = (*Store)(nil)

// consumersFile holds the named consumers (store.ConsumerStore) of every
// stream, apart from the segments: a small file rewritten whole at each
// commit (written to consumersFile + ".tmp", fdatasynced, renamed over
// it, the directory synced), so a crash leaves the old or the new table,
// never a torn one. The pubsub coalesces commits, so it is written at most
// a few times a second per consumer.
const consumersFile = "consumers.json"

// loadConsumers reads the table (Open; none yet: empty).
func (s *Store) loadConsumers() (storekit.ConsumerTable, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, consumersFile))
	if errors.Is(err, os.ErrNotExist) {
		return storekit.NewConsumerTable(), nil
	}
	if err != nil {
		return nil, err
	}
	t, err := storekit.ParseConsumerTable(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", consumersFile, err)
	}
	return t, nil
}

// CommitConsumer implements store.ConsumerStore.
func (s *Store) CommitConsumer(ctx context.Context, stream, name string, cursor uint64) error {
	return s.changeConsumers(ctx, func(t storekit.ConsumerTable) { t.Commit(stream, name, cursor, time.Now()) })
}

// DeleteConsumer implements store.ConsumerStore.
func (s *Store) DeleteConsumer(ctx context.Context, stream, name string) error {
	return s.changeConsumers(ctx, func(t storekit.ConsumerTable) { t.Delete(stream, name) })
}

// changeConsumers applies change to a copy of the table, writes it, and
// keeps it once it is on disk.
func (s *Store) changeConsumers(ctx context.Context, change func(storekit.ConsumerTable)) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	s.cmu.Lock()
	defer s.cmu.Unlock()
	next := storekit.NewConsumerTable()
	for stream, m := range s.consumers {
		for _, c := range m {
			next.Commit(stream, c.Name, c.Cursor, c.Time)
		}
	}
	change(next)
	b, err := next.Marshal()
	if err != nil {
		return fmt.Errorf("echopubsub: seglog consumers: %w", err)
	}
	path := filepath.Join(s.dir, consumersFile)
	err = s.writeFile(path+".tmp", b)
	if err == nil {
		err = s.fs.Rename(path+".tmp", path)
	}
	if err == nil {
		err = s.fs.SyncDir(s.dir)
	}
	if err != nil {
		return fmt.Errorf("echopubsub: seglog consumers: %w", err)
	}
	s.consumers = next
	return nil
}

// Consumers implements store.ConsumerStore.
func (s *Store) Consumers(ctx context.Context, stream string) ([]store.Consumer, uint64, error) {
	if err := s.usable(ctx); err != nil {
		return nil, 0, err
	}
	var end uint64
	s.mu.RLock()
	if st := s.streams[stream]; st != nil {
		end = st.end()
	}
	s.mu.RUnlock()
	s.cmu.Lock()
	defer s.cmu.Unlock()
	return s.consumers.List(stream), end, nil
}

// held is store.Held of stream's consumers (the trim's decision).
func (s *Store) held(stream string) uint64 {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	return s.consumers.Held(stream)
}

// usable fails on a closed store or an ended ctx.
func (s *Store) usable(ctx context.Context) error {
	s.mu.RLock()
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return store.ErrStoreClosed
	}
	return ctx.Err()
}

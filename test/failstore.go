package test

import (
	"context"
	"sync/atomic"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store"
)

// FailingStore is a MemStore whose writes can be made to fail, as a full
// or failing disk's do: while Fail is in force, Append, AppendAt and
// MarkGap return its error and store nothing; Read and Position go on
// working. Heal ends it. Safe for concurrent use.
type FailingStore struct {
	*MemStore
	err atomic.Pointer[error]
}

// NewFailingStore returns an empty store that works until Fail.
func NewFailingStore() *FailingStore { return &FailingStore{MemStore: NewMemStore()} }

// Fail makes every later write return err (wrapped as a store's would be).
func (s *FailingStore) Fail(err error) { s.err.Store(&err) }

// Heal makes writes work again.
func (s *FailingStore) Heal() { s.err.Store(nil) }

func (s *FailingStore) failure() error {
	if e := s.err.Load(); e != nil {
		return *e
	}
	return nil
}

// Append implements echopubsub.Store.
func (s *FailingStore) Append(ctx context.Context, recs []echopubsub.Record) error {
	if err := s.failure(); err != nil {
		return err
	}
	return s.MemStore.Append(ctx, recs)
}

// AppendAt implements the module's LocalStore.
func (s *FailingStore) AppendAt(ctx context.Context, recs []echopubsub.Record, pos store.ProducerPosition) error {
	if err := s.failure(); err != nil {
		return err
	}
	return s.MemStore.AppendAt(ctx, recs, pos)
}

// MarkGap implements the module's LocalStore.
func (s *FailingStore) MarkGap(ctx context.Context, gap echopubsub.Record, pos store.ProducerPosition) error {
	if err := s.failure(); err != nil {
		return err
	}
	return s.MemStore.MarkGap(ctx, gap, pos)
}

package test

import (
	"testing"

	"github.com/echopubsub/echopubsub"
)

// Stores holds one test's in-memory stores (MemStore), one per name, so
// that a node stopped and started again (StopPubSub) finds its rows, as
// it would on its file.
type Stores struct {
	t    testing.TB
	open map[string]*MemStore
}

// NewStores returns t's stores.
func NewStores(t testing.TB) *Stores {
	return &Stores{t: t, open: map[string]*MemStore{}}
}

// Option returns WithStore of the store called name: a new one the first
// time; later, a new handle on the same rows (the previous handle is
// closed, as a file is before it is opened again).
func (s *Stores) Option(name string) echopubsub.Option {
	st := NewMemStore()
	if old, ok := s.open[name]; ok {
		_ = old.Close()
		st = old.Reopen()
	}
	s.open[name] = st
	return echopubsub.WithStore(st)
}

// Store is the handle Option last gave for name (nil: none yet): the
// node's rows, to read them.
func (s *Stores) Store(name string) *MemStore { return s.open[name] }

// WithMemStore is WithStore of a new in-memory store.
func WithMemStore() echopubsub.Option { return echopubsub.WithStore(NewMemStore()) }

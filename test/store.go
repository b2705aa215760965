package test

import (
	"testing"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store/bolt"
)

// Stores opens embedded stores (store/bolt) for one test, one per path,
// and closes them when the test ends: a pubsub does not close the store it
// was given (WithStore).
type Stores struct {
	t    testing.TB
	open map[string]echopubsub.Store
}

// NewStores returns t's stores.
func NewStores(t testing.TB) *Stores {
	s := &Stores{t: t, open: map[string]echopubsub.Store{}}
	t.Cleanup(func() {
		for _, st := range s.open {
			_ = st.Close()
		}
	})
	return s
}

// Option opens the store at path and returns WithStore of it. A path
// already open is closed first: a test that stopped a node's pubsub
// (StopPubSub) starts it again on the same file this way.
func (s *Stores) Option(path string) echopubsub.Option {
	s.t.Helper()
	if old, ok := s.open[path]; ok {
		if err := old.Close(); err != nil {
			s.t.Fatalf("close store %s: %v", path, err)
		}
	}
	st, err := bolt.Open(path)
	if err != nil {
		s.t.Fatal(err)
	}
	s.open[path] = st
	return echopubsub.WithStore(st)
}

// WithBoltStore is WithStore of an embedded store at path, closed when t
// ends.
func WithBoltStore(t testing.TB, path string) echopubsub.Option { return NewStores(t).Option(path) }

package echopubsub_test

import (
	"testing"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/test"
)

// TestWithFromHandoverNodeLocalStores: each node keeps its own store (its
// cursors are its own): a session's catch-up hands over to live with no gap
// and no duplicate while both nodes publish.
func TestWithFromHandoverNodeLocalStores(t *testing.T) {
	stores := []*test.MemStore{test.NewMemStore(), test.NewMemStore()}
	test.CatchUpHandover(t, func(i int) echopubsub.Store { return stores[i] })
}

// TestWithFromHandoverSharedStore: one store for the cluster, whose
// cursors travel with the messages (store/postgres runs the same check on
// PostgreSQL).
func TestWithFromHandoverSharedStore(t *testing.T) {
	shared := test.NewSharedMemStore()
	test.CatchUpHandover(t, func(int) echopubsub.Store { return shared })
}

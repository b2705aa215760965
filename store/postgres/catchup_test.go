package postgres_test

import (
	"testing"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/test"
)

// TestWithFromHandoverPostgres: the cluster shares one PostgreSQL store; a
// session's catch-up hands over to live with no gap and no duplicate while
// both nodes publish (the root runs the same check on node-local stores).
func TestWithFromHandoverPostgres(t *testing.T) {
	prefix := newPrefix()
	stores := []echopubsub.Store{open(t, prefix), open(t, prefix)} // one database, a connection pool per node
	for _, s := range stores {
		t.Cleanup(func() { _ = s.Close() })
	}
	test.CatchUpHandover(t, func(i int) echopubsub.Store { return stores[i] })
}

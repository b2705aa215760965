package postgres_test

import (
	"testing"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store/storetest"
)

// TestPostgresStreams: the PostgreSQL store lists its streams
// (echopubsub.StreamLister), also from a new connection pool.
func TestPostgresStreams(t *testing.T) {
	p := newPrefix()
	storetest.Streams(t, storetest.Harness{
		Open: func(t *testing.T) echopubsub.Store { return open(t, p) },
		Reopen: func(t *testing.T, s echopubsub.Store) echopubsub.Store {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			return open(t, p)
		},
	})
}

package postgres_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store/postgres"
	"github.com/echopubsub/echopubsub/store/postgres/pgtest"
	"github.com/echopubsub/echopubsub/store/storetest"
)

// server is the package's one PostgreSQL server (TestMain); each test
// uses its own table prefix.
var server *pgtest.Server

func TestMain(m *testing.M) {
	var err error
	if server, err = pgtest.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	server.Stop()
	os.Exit(code)
}

var prefixes atomic.Int64

func newPrefix() string { return fmt.Sprintf("t%d_", prefixes.Add(1)) }

func open(t testing.TB, prefix string) *postgres.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := postgres.New(ctx, server.DSN(), postgres.WithTablePrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestPostgresStoreConformance(t *testing.T) {
	prefix := map[echopubsub.Store]string{}
	storetest.Run(t, storetest.Harness{
		Open: func(t *testing.T) echopubsub.Store {
			p := newPrefix()
			s := open(t, p)
			prefix[s] = p
			return s
		},
		Twin: func(t *testing.T, s echopubsub.Store) echopubsub.Store { return open(t, prefix[s]) },
		Reopen: func(t *testing.T, s echopubsub.Store) echopubsub.Store {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s2 := open(t, prefix[s])
			prefix[s2] = prefix[s]
			return s2
		},
	})
}

func TestPostgresStoreOptions(t *testing.T) {
	ctx := context.Background()
	for _, p := range []string{"", "1abc", "a-b", "a;drop"} {
		if _, err := postgres.New(ctx, server.DSN(), postgres.WithTablePrefix(p)); err == nil {
			t.Fatalf("prefix %q accepted", p)
		}
	}
	if _, err := postgres.New(ctx, "not a dsn ::"); err == nil {
		t.Fatal("bad dsn accepted")
	}
}

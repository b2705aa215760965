package bolt_test

import (
	"path/filepath"
	"testing"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store/bolt"
	"github.com/echopubsub/echopubsub/store/storetest"
)

// TestBoltStreams: bolt lists its streams (echopubsub.StreamLister),
// also after a reopen.
func TestBoltStreams(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.db")
	open := func(t *testing.T) echopubsub.Store {
		s, err := bolt.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	storetest.Streams(t, storetest.Harness{Open: open, Reopen: func(t *testing.T, s echopubsub.Store) echopubsub.Store {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return open(t)
	}})
}

package bolt_test

import (
	"path/filepath"
	"testing"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store/bolt"
	"github.com/echopubsub/echopubsub/store/storetest"
)

func TestBoltStoreConformance(t *testing.T) {
	paths := map[echopubsub.Store]string{}
	storetest.Run(t, storetest.Harness{
		GapRows: true,
		Open: func(t *testing.T) echopubsub.Store {
			p := filepath.Join(t.TempDir(), "node.db")
			s, err := bolt.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			paths[s] = p
			return s
		},
		Reopen: func(t *testing.T, s echopubsub.Store) echopubsub.Store {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s2, err := bolt.Open(paths[s])
			if err != nil {
				t.Fatal(err)
			}
			paths[s2] = paths[s]
			return s2
		},
	})
}

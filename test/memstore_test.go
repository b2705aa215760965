package test_test

import (
	"testing"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store/storetest"
	"github.com/echopubsub/echopubsub/test"
)

// TestMemStoreConformance: the tests' in-memory store keeps the Store
// contract (the suite every backend passes).
func TestMemStoreConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		GapRows: true,
		Open:    func(t *testing.T) echopubsub.Store { return test.NewMemStore() },
		Reopen: func(t *testing.T, s echopubsub.Store) echopubsub.Store {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			return s.(*test.MemStore).Reopen()
		},
	})
}

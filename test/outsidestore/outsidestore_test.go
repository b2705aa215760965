package outsidestore_test

import (
	"testing"

	"example.com/outsidestore"
	"github.com/echopubsub/echopubsub/store"
	"github.com/echopubsub/echopubsub/store/storetest"
)

// TestOutsideStoreConformance: a store written on the public contract
// alone passes the conformance suite, producer positions and gap rows
// (GapRows: the suite fails if it had none) and retention included.
func TestOutsideStoreConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		GapRows: true,
		Open:    func(t *testing.T) store.Store { return outsidestore.New() },
		Reopen: func(t *testing.T, s store.Store) store.Store {
			return s.(*outsidestore.Store).Reopen()
		},
	})
}

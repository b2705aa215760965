package bolt_test

import (
	"path/filepath"
	"testing"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store/bolt"
	"github.com/echopubsub/echopubsub/test"
)

// TestWithFromHandoverBolt: each node keeps its own bolt file; a session's
// catch-up hands over to live with no gap and no duplicate, and one
// CaughtUp between the last stored row and the first live one, while both
// nodes publish (the root runs the same check on its in-memory stores,
// store/seglog and store/postgres on theirs).
func TestWithFromHandoverBolt(t *testing.T) {
	stores := make([]echopubsub.Store, 2)
	for i := range stores {
		s, err := bolt.Open(filepath.Join(t.TempDir(), "node.db"))
		if err != nil {
			t.Fatalf("bolt.Open: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		stores[i] = s
	}
	test.CatchUpHandover(t, func(i int) echopubsub.Store { return stores[i] })
}

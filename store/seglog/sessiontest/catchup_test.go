package sessiontest_test

import (
	"path/filepath"
	"testing"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store/seglog"
	"github.com/echopubsub/echopubsub/test"
)

// TestWithFromHandoverSeglog: each node keeps its own segment log; a
// session's catch-up hands over to live with no gap and no duplicate, and
// one CaughtUp between the last stored row and the first live one, while
// both nodes publish (the root runs the same check on its in-memory
// stores, store/bolt and store/postgres on theirs).
func TestWithFromHandoverSeglog(t *testing.T) {
	stores := make([]echopubsub.Store, 2)
	for i := range stores {
		s, err := seglog.Open(filepath.Join(t.TempDir(), "log"))
		if err != nil {
			t.Fatalf("seglog.Open: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		stores[i] = s
	}
	test.CatchUpHandover(t, func(i int) echopubsub.Store { return stores[i] })
}

package bolt_test

import (
	"path/filepath"
	"testing"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store/bolt"
	"github.com/echopubsub/echopubsub/store/storetest"
)

func openStore(path string) (echopubsub.Store, error) { return bolt.Open(path) }

func init() { storetest.RunKillChild(openStore) }

// TestBoltStoreSurvivesKill9: storetest.SurvivesKill9 on one bbolt file.
func TestBoltStoreSurvivesKill9(t *testing.T) {
	storetest.SurvivesKill9(t, filepath.Join(t.TempDir(), "node.db"), openStore)
}

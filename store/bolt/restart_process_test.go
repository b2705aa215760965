package bolt_test

import (
	"testing"

	"github.com/echopubsub/echopubsub/store/storetest"
)

func init() { storetest.RunRestartChild(openStore) }

// TestFullClusterRestartProcessByProcessWritesNoGapRow: storetest's
// FullClusterRestart on a bbolt file per node: three node processes
// stopped one by one with SIGTERM and started again on their files replay
// every message and no gap row.
func TestFullClusterRestartProcessByProcessWritesNoGapRow(t *testing.T) {
	storetest.FullClusterRestart(t, openStore)
}

package bolt_test

import (
	"path/filepath"
	"testing"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store/bolt"
	"github.com/echopubsub/echopubsub/store/storetest"
)

// The durable benchmarks (store/storetest) on the embedded store: one
// bbolt file, fsynced per commit.

func openBench(b *testing.B) echopubsub.Store {
	s, err := bolt.Open(filepath.Join(b.TempDir(), "n.db"))
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func BenchmarkDurableBroadcast(b *testing.B) { storetest.BenchDurableBroadcast(b, openBench) }

func BenchmarkReplayPage(b *testing.B) { storetest.BenchReplayPage(b, openBench) }

package bolt_test

import (
	"path/filepath"
	"testing"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store/bolt"
	"github.com/echopubsub/echopubsub/store/storetest"
)

// The durable benchmarks (store/storetest) on the embedded store: one
// bbolt file, fsynced per commit, with the disk's fdatasync probe in the
// same run (BenchmarkDurableBroadcast).

func openBench(b *testing.B, dir string) echopubsub.Store {
	s, err := bolt.Open(filepath.Join(dir + ".db"))
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func BenchmarkDurableBroadcast(b *testing.B) { storetest.BenchLocalDurable(b, openBench) }

func BenchmarkReplayPage(b *testing.B) {
	storetest.BenchReplayPage(b, func(b *testing.B) echopubsub.Store { return openBench(b, filepath.Join(b.TempDir(), "n")) })
}

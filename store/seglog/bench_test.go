package seglog_test

import (
	"testing"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store/seglog"
	"github.com/echopubsub/echopubsub/store/storetest"
)

// The durable benchmarks (store/storetest) on the segmented log, with the
// disk's fdatasync probe in the same run (BenchmarkDurableBroadcast).

func openBench(b *testing.B, dir string) echopubsub.Store {
	s, err := seglog.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func BenchmarkDurableBroadcast(b *testing.B) { storetest.BenchLocalDurable(b, openBench) }

func BenchmarkReplayPage(b *testing.B) {
	storetest.BenchReplayPage(b, func(b *testing.B) echopubsub.Store { return openBench(b, b.TempDir()) })
}

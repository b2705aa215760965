package postgres_test

import (
	"testing"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store/storetest"
)

// The durable benchmarks (store/storetest) on PostgreSQL: one committed
// INSERT per append, concurrent appends sharing a commit.

func openBench(b *testing.B) echopubsub.Store { return open(b, newPrefix()) }

func BenchmarkDurableBroadcast(b *testing.B) { storetest.BenchDurableBroadcast(b, openBench) }

func BenchmarkReplayPage(b *testing.B) { storetest.BenchReplayPage(b, openBench) }

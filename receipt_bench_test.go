package echopubsub_test

import (
	"context"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// BenchmarkBroadcastTwoNodes: plain Broadcasts from node 0 to a counting
// subscriber on node 1; one op is one message delivered there. It is the
// path receipts must not slow down (compare it with the same benchmark on
// a build without receipts: docs/benchmarks.md, "Receipts").
func BenchmarkBroadcastTwoNodes(b *testing.B) {
	cfg := echopubsub.DefaultConfig("bench")
	cfg.BufferSize = 1 << 20  // the burst of b.N stays buffered: no expiry
	cfg.MaxQueueLen = 1 << 21 // and queued: no back-pressure drop
	nodes := test.StartCluster(b, 2, cfg)
	c := test.SpawnCounter(nodes[1].System)
	if err := nodes[1].PS.Subscribe(c.PID, "t"); err != nil {
		b.Fatal(err)
	}
	m := &testpb.Stamp{Pad: []byte("0123456789")}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := nodes[0].PS.Broadcast(nil, "t", m); err != nil {
			b.Fatal(err)
		}
	}
	test.Eventually(b, time.Minute, func() bool { return c.Count() == int64(b.N) }, test.Sprintf("%d delivered", b.N))
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msg/s")
}

// BenchmarkBroadcastAwaitTwoNodes: one BroadcastAwait at a time from node
// 0, waiting for both nodes; one op is one receipt (a round trip, plus
// the batch interval the producer waits for more writes).
func BenchmarkBroadcastAwaitTwoNodes(b *testing.B) {
	cfg := echopubsub.DefaultConfig("bench")
	cfg.BatchInterval = 0 // a lone message goes at once
	nodes := test.StartCluster(b, 2, cfg)
	m := &testpb.Stamp{Pad: []byte("0123456789")}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := nodes[0].PS.BroadcastAwait(ctx, nil, "t", m); err != nil {
			b.Fatal(err)
		}
	}
}

package echopubsub_test

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// BenchmarkClusterScale measures what a cluster of N full-mesh nodes costs
// on this machine, every node in this one process (docs/scaling.md):
//
//   - join_ms: the Nth node starts last, into N-1 nodes formed and already
//     naming it (static membership): the time until every node is
//     registered with it and it with every node;
//   - heap_MiB/node, goroutines/node: after a GC, with the cluster formed
//     and idle (the process's totals over N, the test harness included);
//   - idle_cpu_ms/s/node: CPU the idle cluster burns (RetryInterval probes,
//     protoactor's endpoint upkeep), per node per second;
//   - deliveries/s: one op is one 10 B message broadcast from node 0 and
//     counted by a subscriber on every node (N deliveries per op).
//
// ECHOPUBSUB_SCALE_NODES overrides the node counts ("4,8,16,32").
func BenchmarkClusterScale(b *testing.B) {
	counts := []int{4, 8, 16}
	if s := os.Getenv("ECHOPUBSUB_SCALE_NODES"); s != "" {
		counts = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 2 {
				b.Fatalf("ECHOPUBSUB_SCALE_NODES: %q is not a node count >= 2", f)
			}
			counts = append(counts, n)
		}
	}
	for _, n := range counts {
		b.Run(fmt.Sprint("nodes=", n), func(b *testing.B) { benchScale(b, n) })
	}
}

func benchScale(b *testing.B, n int) {
	cfg := echopubsub.DefaultConfig("bench")
	cfg.BatchInterval = 100 * time.Millisecond
	cfg.BufferSize = max(2*b.N, 1000)
	cfg.MaxPendingWrites = 100_000
	nodes, addrs := test.NewNodes(b, n, test.Logger(b, zerolog.WarnLevel))
	member := echopubsub.WithMembership(cluster.NewStatic(addrs...))
	for _, nd := range nodes[:n-1] {
		nd.Start(b, cfg, member)
	}
	waitJoinedB(b, nodes[:n-1])
	t0 := time.Now()
	nodes[n-1].Start(b, cfg, member)
	waitJoinedB(b, nodes)
	join := time.Since(t0)

	var cs []*test.Collector
	for _, nd := range nodes {
		c := test.SpawnCounter(nd.System)
		if err := nd.PS.Subscribe(c.PID, "bench", echopubsub.WithMaxQueueLen(1<<30)); err != nil {
			b.Fatal(err)
		}
		cs = append(cs, c)
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	goroutines := runtime.NumGoroutine()
	const idle = 3 * time.Second
	cpu0 := processCPU()
	time.Sleep(idle) // the measurement window of idle CPU, not a wait for state
	idleCPU := processCPU() - cpu0

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := nodes[0].PS.Broadcast(nil, "bench", &testpb.Stamp{Seq: uint64(i), Pad: []byte("0123456789")}); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range cs {
		test.Eventually(b, 2*time.Minute, func() bool { return c.Count() >= int64(b.N) }, c.Describe)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "deliveries/s")
	b.ReportMetric(float64(join.Milliseconds()), "join_ms")
	b.ReportMetric(float64(ms.HeapInuse)/float64(n)/(1<<20), "heap_MiB/node")
	b.ReportMetric(float64(goroutines)/float64(n), "goroutines/node")
	b.ReportMetric(float64(idleCPU.Milliseconds())/idle.Seconds()/float64(n), "idle_cpu_ms/s/node")
}

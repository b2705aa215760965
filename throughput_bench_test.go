package echopubsub_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// BenchmarkThroughput3Nodes: 3 in-process nodes, 4 publishers on node 0,
// every node's collector must count every message. One op is one message
// delivered to all three nodes. (The multi-process harness is test/e2e/bench.)
func BenchmarkThroughput3Nodes(b *testing.B) {
	for _, interval := range []time.Duration{0, 100 * time.Millisecond} {
		b.Run("interval="+interval.String(), func(b *testing.B) {
			cfg := echopubsub.DefaultConfig("bench")
			cfg.BatchInterval = interval
			cfg.BufferSize = 2 * b.N
			if cfg.BufferSize < 1000 {
				cfg.BufferSize = 1000
			}
			cfg.MaxPendingWrites = 100_000
			nodes := test.StartCluster(b, 3, cfg)
			var cs []*test.Collector
			for _, nd := range nodes {
				c := test.SpawnCounter(nd.System)
				if err := nd.PS.Subscribe(c.PID, "bench", echopubsub.WithMaxQueueLen(1<<30)); err != nil {
					b.Fatal(err)
				}
				cs = append(cs, c)
			}
			waitJoinedB(b, nodes)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			const publishers = 4
			done := make(chan error, publishers)
			for p := 0; p < publishers; p++ {
				go func(p int) {
					for i := p; i < b.N; i += publishers {
						if err := nodes[0].PS.Broadcast(nil, "bench", &testpb.Stamp{Seq: uint64(i), Pad: []byte("0123456789")}); err != nil {
							done <- err
							return
						}
					}
					done <- nil
				}(p)
			}
			for p := 0; p < publishers; p++ {
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
			for _, c := range cs {
				test.Eventually(b, time.Minute, func() bool { return c.Count() >= int64(b.N) }, c.Describe)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			// CPU time (user+sys of the whole process: the three nodes) per
			// message: on a shared machine a steadier figure than wall time.
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/msg")
		})
	}
}

// processCPU is the user+sys CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func waitJoinedB(b *testing.B, nodes []*test.Node) {
	for _, nd := range nodes {
		for _, other := range nodes {
			if other != nd {
				test.Eventually(b, 10*time.Second, func() bool { return nd.NodeStats(b, other.Addr).Registered },
					test.Sprintf("%s registered with %s", nd.Addr, other.Addr))
			}
		}
	}
}

package echopubsub_test

import (
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/internal/proc"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// BenchmarkThroughput3Nodes: 3 in-process nodes, 4 publishers on node 0,
// every node's collector must count every message. One op is one message
// delivered to all three nodes. raw is protoactor fire-and-forget in the
// harness's shape (node 0 sends each payload as its own remote message to
// each node's collector); it runs first, so that each EchoPubSub run
// reports x-raw, its msg/s over the raw run just before it (with -count,
// the sub-benchmarks interleave: raw, 0s, 100ms, raw, ...). cpu-bound-% is
// msg/s over the bound the machine's cores put on it at this run's CPU per
// message (NumCPU / cpu-s per msg): below 100, the pipeline waited while a
// core was idle, or the machine's other work had the cores: runq-wait-% is
// the time this process's threads were runnable but waiting for a core, in
// the same units (100 = all cores' worth of the run's wall time; summed
// over threads, it can pass 100). Near 0, a run below 100 cpu-bound-%
// waited in its own pipeline with a core free. (The multi-process harness
// is test/e2e/bench.)
func BenchmarkThroughput3Nodes(b *testing.B) {
	var raw float64 // msg/s of the last raw run
	b.Run("raw", func(b *testing.B) {
		nodes := test.StartCluster(b, 3, echopubsub.DefaultConfig("bench"))
		var counts [3]atomic.Int64
		var pids []*actor.PID
		for i, nd := range nodes {
			c := &counts[i]
			pid, err := nd.System.Root.SpawnNamed(actor.PropsFromFunc(func(ctx actor.Context) {
				if _, ok := ctx.Message().(*testpb.Stamp); ok {
					c.Add(1)
				}
			}), "raw-collector")
			if err != nil {
				b.Fatal(err)
			}
			if i > 0 { // as node 0 sees it: through its remote
				pid = actor.NewPID(nd.Addr, "raw-collector")
			}
			pids = append(pids, pid)
		}
		root := nodes[0].System.Root
		// One message each first: the connections are up before the clock starts.
		for _, pid := range pids {
			root.Send(pid, &testpb.Stamp{})
		}
		for i := range counts {
			test.Eventually(b, 10*time.Second, func() bool { return counts[i].Load() == 1 }, test.Sprintf("raw collector %d reached", i))
		}
		raw = measure(b, func(i int) error {
			m := &testpb.Stamp{Seq: uint64(i), Pad: []byte("0123456789")}
			for _, pid := range pids {
				root.Send(pid, m)
			}
			return nil
		}, func(n int64) bool {
			for i := range counts {
				if counts[i].Load() < n+1 {
					return false
				}
			}
			return true
		})
	})
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
			v := measure(b, func(i int) error {
				return nodes[0].PS.Broadcast(nil, "bench", &testpb.Stamp{Seq: uint64(i), Pad: []byte("0123456789")})
			}, func(n int64) bool {
				for _, c := range cs {
					if c.Count() < n {
						return false
					}
				}
				return true
			})
			if raw > 0 {
				b.ReportMetric(v/raw, "x-raw")
			}
		})
	}
}

// measure times b.N messages sent by 4 publishers (send(i) for their share
// of i < b.N) until received(b.N) holds, and reports msgs/s, the CPU per
// message and cpu-bound-%; it returns msgs/s.
func measure(b *testing.B, send func(i int) error, received func(n int64) bool) float64 {
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, runq0 := processCPU(), proc.RunQueueWait(os.Getpid())
	const publishers = 4
	done := make(chan error, publishers)
	for p := 0; p < publishers; p++ {
		go func(p int) {
			for i := p; i < b.N; i += publishers {
				if err := send(i); err != nil {
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
	test.Eventually(b, time.Minute, func() bool { return received(int64(b.N)) }, test.Sprintf("every node received %d", b.N))
	b.StopTimer()
	rate := float64(b.N) / b.Elapsed().Seconds()
	// CPU time (user+sys of the whole process: the three nodes) per
	// message: on a shared machine a steadier figure than wall time.
	cpu := float64(processCPU()-cpu0) / float64(b.N)
	cores := float64(runtime.NumCPU()) * b.Elapsed().Seconds()
	b.ReportMetric(rate, "msgs/s")
	b.ReportMetric(cpu, "cpu-ns/msg")
	b.ReportMetric(100*rate*cpu/(float64(runtime.NumCPU())*1e9), "cpu-bound-%")
	b.ReportMetric(100*(proc.RunQueueWait(os.Getpid())-runq0).Seconds()/cores, "runq-wait-%")
	return rate
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

package storetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store/storekit"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// The durable benchmarks, written once: every Store backend runs them on
// its storage (store/bolt and store/postgres: BenchmarkDurableBroadcast,
// BenchmarkReplayPage), so that their figures have the same shapes; the
// comparison with NATS JetStream is in test/e2e/jetstream.

// BenchDurableBroadcast measures Broadcast of a durable topic (the append,
// group-committed with the other publishers', then the queueing), from 1
// and from 16 concurrent publishers, on one node whose store open returns
// (closed by the benchmark).
func BenchDurableBroadcast(b *testing.B, open func(b *testing.B) echopubsub.Store) {
	for _, pubs := range []int{1, 16} {
		b.Run(fmt.Sprint("publishers=", pubs), func(b *testing.B) { benchBroadcast(b, pubs, open) })
	}
}

// BenchLocalDurable is BenchDurableBroadcast for a store on a local disk,
// measured against the disk: open returns a store in dir (a new directory
// of the benchmark's temporary directory, on the disk the probe measures).
// The sub-benchmark fdatasync-probe is that disk's rate of small durable
// appends (BenchFsyncProbe, in the same directory, in the same run): what
// one fdatasync per commit would give a lone publisher. The disk's pace
// drifts (a shared machine): each publishers=N also probes it for
// probeTime just before and just after its timed loop (outside it) and
// reports the mean as probe-fsyncs/s, and its msgs/s as probe-% (100 x
// msgs/s / that mean); 16 publishers report x-one (their msgs/s / one
// publisher's, of the same count).
func BenchLocalDurable(b *testing.B, open func(b *testing.B, dir string) echopubsub.Store) {
	dir := b.TempDir()
	b.Run("fdatasync-probe", func(b *testing.B) { BenchFsyncProbe(b, dir) })
	n := 0
	opener := func(b *testing.B) echopubsub.Store {
		n++
		return open(b, filepath.Join(dir, fmt.Sprint("store-", n)))
	}
	var one float64
	for _, pubs := range []int{1, 16} {
		b.Run(fmt.Sprint("publishers=", pubs), func(b *testing.B) {
			before := probeFor(b, dir, probeTime)
			rate := benchBroadcast(b, pubs, opener)
			b.StopTimer()
			probe := (before + probeFor(b, dir, probeTime)) / 2
			b.ReportMetric(probe, "probe-fsyncs/s")
			b.ReportMetric(100*rate/probe, "probe-%")
			if pubs == 1 {
				one = rate
			} else if one > 0 {
				b.ReportMetric(rate/one, "x-one")
			}
		})
	}
}

// probeTime is how long BenchLocalDurable probes the disk on each side of
// a timed loop.
const probeTime = 300 * time.Millisecond

// probeFor is BenchFsyncProbe's loop for d, untimed: fsyncs/s.
func probeFor(b *testing.B, dir string, d time.Duration) float64 {
	f, err := os.CreateTemp(dir, "fsync-probe-*")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = f.Close(); _ = os.Remove(f.Name()) }()
	rec := make([]byte, 64)
	start, n := time.Now(), 0
	for ; time.Since(start) < d; n++ {
		if err := probeAppend(f, rec); err != nil {
			b.Fatal(err)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

func probeAppend(f *os.File, rec []byte) error {
	if _, err := f.Write(rec); err != nil {
		return err
	}
	return storekit.Fdatasync(f)
}

// BenchFsyncProbe measures the disk under dir: b.N appends of 64 bytes
// to one file, each followed by fdatasync(2) (fsync outside Linux), as a
// log store's lone commit does. It reports and returns fsyncs/s.
func BenchFsyncProbe(b *testing.B, dir string) float64 {
	f, err := os.CreateTemp(dir, "fsync-probe-*")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = f.Close(); _ = os.Remove(f.Name()) }()
	rec := make([]byte, 64)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := probeAppend(f, rec); err != nil {
			b.Fatal(err)
		}
	}
	rate := float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(rate, "fsyncs/s")
	return rate
}

// benchBroadcast runs b.N durable broadcasts from pubs publishers and
// returns (and reports) msgs/s, and reports the CPU it used as cpu-cores.
func benchBroadcast(b *testing.B, pubs int, open func(b *testing.B) echopubsub.Store) float64 {
	nd := benchNode(b, test.FastConfig(), open)
	msg := &testpb.Stamp{Publisher: "bench", Seq: 1}
	var wg sync.WaitGroup
	b.ResetTimer()
	cpu := cpuTime()
	for p := 0; p < pubs; p++ {
		n := b.N / pubs
		if p < b.N%pubs {
			n++
		}
		wg.Add(1)
		go func(n int) {
			defer wg.Done()
			for i := 0; i < n; i++ {
				if err := nd.PS.Broadcast(nil, "room:1", msg); err != nil {
					b.Error(err)
					return
				}
			}
		}(n)
	}
	wg.Wait()
	rate := float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(rate, "msgs/s")
	// The cores the process kept busy: near GOMAXPROCS, the publishers
	// wait for the CPU, not for the disk.
	b.ReportMetric((cpuTime()-cpu).Seconds()/b.Elapsed().Seconds(), "cpu-cores")
	return rate
}

// BenchReplayPage measures ReplaySession pages of 50 rows from a
// 2,000-row stream (cycling through it), into a session whose owner
// acknowledges each envelope.
func BenchReplayPage(b *testing.B, open func(b *testing.B) echopubsub.Store) {
	cfg := test.FastConfig()
	cfg.SoftQueue, cfg.HardQueue = 10_000, 20_000
	nd := benchNode(b, cfg, open)
	ctx := context.Background()
	var wg sync.WaitGroup
	for p := 0; p < 20; p++ { // 20 publishers: group commit makes the set-up short
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				if err := nd.PS.Broadcast(nil, "room:1", &testpb.Stamp{Publisher: fmt.Sprint(p), Seq: uint64(i + 1)}); err != nil {
					b.Error(err)
					return
				}
			}
		}(p)
	}
	wg.Wait()
	pid := nd.System.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if e, ok := c.Message().(*echopubsub.Envelope); ok {
			_, _ = nd.PS.Ack(e.SessionID, e.DeliveryID)
		}
	}))
	s, err := nd.PS.OpenSession(pid)
	if err != nil {
		b.Fatal(err)
	}
	from, rows := uint64(1), 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		st, err := nd.PS.ReplaySession(ctx, s.ID(), "room:1", echopubsub.ReplayOptions{Limit: 50, From: from})
		if err != nil {
			b.Fatal(err)
		}
		rows += st.Delivered
		from = st.ResumeCursor
		if st.NextCursor > 1950 {
			from = 1
		}
		if i%64 == 0 { // the owner must not fall behind by more than the hard queue: let it drain
			test.Eventually(b, 30e9, func() bool { return nd.PS.Pending(s.ID()) < 1000 }, test.Sprintf("pending"))
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pages/s")
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
}

func benchNode(b *testing.B, cfg echopubsub.Config, open func(b *testing.B) echopubsub.Store) *test.Node {
	s := open(b)
	b.Cleanup(func() { _ = s.Close() })
	return test.StartCluster(b, 1, cfg, echopubsub.WithStore(s), echopubsub.WithDurableTopics("room:*"))[0]
}

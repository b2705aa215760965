//go:build !race

package presence_test

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/presence"
	"github.com/echopubsub/echopubsub/test"
)

// BenchmarkPresence100k is the cost of presence at scale (docs/benchmarks.md,
// "Presence"): 3 nodes in one process, 100,000 presences (33,334 tracked on
// each node, over 100 topics, by 100 processes per node), and then
//
//   - heap per presence (each is held on all 3 nodes) and per node;
//   - diff latency: Track on node 0 to the *Diff in a subscriber's mailbox
//     on node 2, p50 and p99 of 200, one at a time, at 100k;
//   - resync after a cut: node 2 cut off while node 0 makes more changes
//     than the pubsub's buffer holds (CursorExpired on the heal): from the
//     heal until node 2 lists node 0's latest change.
//
// One run is the measurement: go test -run '^$' -bench Presence100k
// -benchtime 1x ./presence/ (about a minute; not part of make test).
func BenchmarkPresence100k(b *testing.B) {
	for i := 0; i < b.N; i++ {
		presenceScale(b)
	}
}

func presenceScale(b *testing.B) {
	const total, topics, procs = 100_000, 100, 100
	cfg := echopubsub.DefaultConfig("presence-bench")
	cfg.BatchInterval = 10 * time.Millisecond
	nodes := test.StartCluster(b, 3, cfg)
	test.WaitJoined(b, nodes)
	pcfg := presence.DefaultConfig()
	pcfg.DownAfter = time.Hour // the cut below must be told as CursorExpired, not as a silent node
	pcfg.HeartbeatInterval = time.Minute
	trs := make([]*presence.Tracker, 3)
	for i, nd := range nodes {
		tr, err := presence.New(nd.PS, pcfg)
		if err != nil {
			b.Fatal(err)
		}
		trs[i] = tr
		b.Cleanup(func() { _ = tr.Stop(context.Background()) })
	}
	before := heap()

	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for i := range nodes {
		wg.Add(1)
		go func(i int) { // ends when its tracks are done
			defer wg.Done()
			pids := make([]*actor.PID, procs)
			for p := range pids {
				pids[p] = spawnProc(nodes[i])
			}
			for k := i; k < total; k += 3 {
				meta := map[string]string{"node": strconv.Itoa(i), "at": "2026-12-06T12:00:00Z"}
				if err := trs[i].Track(pids[k%procs], fmt.Sprint("room:", k%topics), fmt.Sprint("user-", k), meta); err != nil {
					errs <- err
					return
				}
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	test.Eventually(b, 5*time.Minute, func() bool {
		return trs[0].Count() == total && trs[1].Count() == total && trs[2].Count() == total
	}, func() string { return fmt.Sprint(trs[0].Count(), trs[1].Count(), trs[2].Count()) })
	b.ReportMetric(float64(time.Since(start).Milliseconds()), "ms_to_track_100k")
	grown := heap() - before
	b.ReportMetric(float64(grown)/(3*total), "heap_B/presence/replica")
	b.ReportMetric(float64(grown)/3/(1<<20), "heap_MiB/node")

	// Diff latency at 100k.
	var mu sync.Mutex
	var lat []time.Duration
	got := make(chan struct{}, 1)
	watcher := nodes[2].System.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if d, ok := ctx.Message().(*presence.Diff); ok {
			for _, metas := range d.Joins {
				sent, _ := strconv.ParseInt(metas[0].Meta["sent"], 10, 64)
				mu.Lock()
				lat = append(lat, time.Since(time.Unix(0, sent)))
				mu.Unlock()
				got <- struct{}{}
			}
		}
	}))
	if err := trs[2].Subscribe(watcher, "latency"); err != nil {
		b.Fatal(err)
	}
	p := spawnProc(nodes[0])
	for k := 0; k < 200; k++ {
		if err := trs[0].Track(p, "latency", fmt.Sprint("k", k), map[string]string{"sent": strconv.FormatInt(time.Now().UnixNano(), 10)}); err != nil {
			b.Fatal(err)
		}
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			b.Fatalf("no Diff for join %d within 10s", k)
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "diff_ms_p50")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "diff_ms_p99")

	// Resync after a cut: past the buffer, so the heal is a CursorExpired.
	test.Partition(nodes, 2)
	flip := spawnProc(nodes[0])
	must(b, trs[0].Track(flip, "flip", "f", map[string]string{"v": "0"}))
	for v := 1; v <= cfg.BufferSize+100; v++ {
		must(b, trs[0].Update(flip, "flip", "f", map[string]string{"v": strconv.Itoa(v)}))
	}
	want := strconv.Itoa(cfg.BufferSize + 100)
	test.Eventually(b, 30*time.Second, func() bool { return nodes[0].NodeStats(b, nodes[2].Addr).Expired },
		test.Sprintf("node 2 expired in node 0's view"))
	healed := time.Now()
	test.Heal(nodes)
	test.Eventually(b, 2*time.Minute, func() bool {
		l := trs[2].List("flip")["f"]
		return len(l) == 1 && l[0].Meta["v"] == want && trs[2].Count() == trs[0].Count()
	}, func() string { return fmt.Sprint(trs[2].List("flip"), trs[2].Count(), trs[0].Count()) })
	b.ReportMetric(float64(time.Since(healed).Milliseconds()), "resync_ms_after_cut")
}

// heap is the live heap after a collection.
func heap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/echopubsub/echopubsub"
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
		b.Run(fmt.Sprint("publishers=", pubs), func(b *testing.B) {
			nd := benchNode(b, test.FastConfig(), open)
			msg := &testpb.Stamp{Publisher: "bench", Seq: 1}
			var wg sync.WaitGroup
			b.ResetTimer()
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
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
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

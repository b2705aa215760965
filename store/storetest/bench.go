package echopubsub_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// Durable publish and replay figures for the embedded store (the
// PostgreSQL ones are in cluster/pgstore; the comparison with NATS
// JetStream in test/bench).

// BenchmarkDurableBroadcastBolt: Broadcast of a durable topic (one fsynced
// append, group-committed with the other publishers', then queued), from 1
// and from 16 concurrent publishers.
func BenchmarkDurableBroadcastBolt(b *testing.B) {
	for _, pubs := range []int{1, 16} {
		b.Run(fmt.Sprint("publishers=", pubs), func(b *testing.B) {
			nd := test.StartCluster(b, 1, fastConfig(), echopubsub.WithStorePath(filepath.Join(b.TempDir(), "n.db")),
				echopubsub.WithDurableTopics("room:*"))[0]
			benchDurableBroadcast(b, nd, pubs)
		})
	}
}

func benchDurableBroadcast(b *testing.B, nd *test.Node, pubs int) {
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
}

// BenchmarkReplayPageBolt: ReplaySession pages of 50 rows from a 2,000-row
// stream, into a session whose owner acknowledges each envelope.
func BenchmarkReplayPageBolt(b *testing.B) {
	cfg := fastConfig()
	cfg.SoftQueue, cfg.HardQueue = 10_000, 20_000
	nd := test.StartCluster(b, 1, cfg, echopubsub.WithStorePath(filepath.Join(b.TempDir(), "n.db")),
		echopubsub.WithDurableTopics("room:*"))[0]
	benchReplayPages(b, nd)
}

// benchReplayPages fills room:1 with 2,000 durable broadcasts and replays
// pages of 50 (cycling through the stream) into a session whose owner
// acknowledges each envelope.
func benchReplayPages(b *testing.B, nd *test.Node) {
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
	o := spawnOwner(b, nd, func(e *echopubsub.Envelope) { _, _ = nd.PS.Ack(e.SessionID, e.DeliveryID) })
	s, err := nd.PS.OpenSession(o.PID)
	if err != nil {
		b.Fatal(err)
	}
	from := uint64(1)
	rows := 0
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
		if i%64 == 0 { // the owner must not pile up envelopes: let it drain
			test.Eventually(b, 30e9, func() bool { return nd.PS.Pending(s.ID()) < 1000 }, test.Sprintf("pending"))
			o.mu.Lock()
			o.got = nil
			o.mu.Unlock()
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pages/s")
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
}

package echopubsub_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// BenchmarkSessionDeliveriesWithAcks: one node, 1 or 8 sessions on one
// topic, each owner acking every envelope (by its DeliveryID) as it
// handles it. One op is one broadcast; deliveries/s counts envelopes
// delivered and acknowledged across all sessions. The queues are set high
// so that nothing is refused: this measures the path, not the limits.
// BenchmarkPlainSubscriberBaseline is the same load into one plain
// subscriber, for comparison.
func BenchmarkSessionDeliveriesWithAcks(b *testing.B) {
	for _, sessions := range []int{1, 8} {
		b.Run(fmt.Sprintf("sessions=%d", sessions), func(b *testing.B) {
			cfg := echopubsub.DefaultConfig("bench")
			cfg.BatchInterval = 0
			cfg.BufferSize = max(2*b.N, 1000)
			cfg.MaxPendingWrites = 100_000
			cfg.MaxQueueLen = 1 << 30
			cfg.SoftQueue, cfg.HardQueue = 1<<20, 1<<21
			cfg.MaxDeliveryReservations = echopubsub.ReservationsLarge
			nd := test.StartCluster(b, 1, cfg)[0]
			var acked atomic.Int64
			var ackErr atomic.Value
			for s := 0; s < sessions; s++ {
				pid := nd.System.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
					if env, ok := ctx.Message().(*echopubsub.Envelope); ok {
						if _, err := nd.PS.Ack(env.SessionID, env.DeliveryID); err != nil {
							ackErr.Store(err)
						}
						acked.Add(1)
					}
				}))
				openSession(b, nd, &owner{PID: pid}, []string{"bench"})
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := nd.PS.Broadcast(nil, "bench", &testpb.Stamp{Seq: uint64(i), Pad: []byte("0123456789")}); err != nil {
					b.Fatal(err)
				}
			}
			want := int64(b.N * sessions)
			test.Eventually(b, time.Minute, func() bool { return acked.Load() >= want },
				func() string { return fmt.Sprintf("acked %d of %d", acked.Load(), want) })
			b.StopTimer()
			if err := ackErr.Load(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(want)/b.Elapsed().Seconds(), "deliveries/s")
		})
	}
}

func BenchmarkPlainSubscriberBaseline(b *testing.B) {
	cfg := echopubsub.DefaultConfig("bench")
	cfg.BatchInterval = 0
	cfg.BufferSize = max(2*b.N, 1000)
	cfg.MaxPendingWrites = 100_000
	nd := test.StartCluster(b, 1, cfg)[0]
	c := test.SpawnCounter(nd.System)
	if err := nd.PS.Subscribe(c.PID, "bench", echopubsub.WithMaxQueueLen(1<<30)); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := nd.PS.Broadcast(nil, "bench", &testpb.Stamp{Seq: uint64(i), Pad: []byte("0123456789")}); err != nil {
			b.Fatal(err)
		}
	}
	test.Eventually(b, time.Minute, func() bool { return c.Count() >= int64(b.N) }, c.Describe)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deliveries/s")
}

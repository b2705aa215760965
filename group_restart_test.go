package echopubsub_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
)

// crashingProducerTimes crashes the producer it runs in on its first n
// batch sends (so while writes flow), then lets every send through.
type crashingProducerTimes struct{ left atomic.Int64 }

func (c *crashingProducerTimes) Send(_ string, req proto.Message) error {
	if _, ok := req.(*messages.Batch); ok && c.left.Add(-1) >= 0 {
		panic("test: producer crashes on this send")
	}
	return nil
}
func (*crashingProducerTimes) Receive(string, proto.Message) error { return nil }
func (*crashingProducerTimes) Delivered(string, uint64)            {}
func (*crashingProducerTimes) Acked(string, proto.Message)         {}

// TestBroadcastsAfterGroupRestart: a producer that exceeds its restart
// intensity is stopped and its pool group restarted by the root, with a new
// producer (and mailbox). Broadcasts made meanwhile (some accepted while no
// producer was registered) must not leave the write queue waiting for a
// WritesReady that was lost: once the crashes stop, a broadcast is
// delivered again.
func TestBroadcastsAfterGroupRestart(t *testing.T) {
	log := test.Logger(t, zerolog.Disabled) // every crash logs
	nodes, addrs := test.NewNodes(t, 2, log)
	hook := &crashingProducerTimes{}
	hook.left.Store(12) // past the producer's intensity (10 in 10 s), not the root's
	cfg := fastConfig()
	nodes[0].Start(t, cfg, echopubsub.WithMembership(cluster.NewStatic(addrs...)), test.WithFaultHook(hook))
	nodes[1].Start(t, cfg, echopubsub.WithMembership(cluster.NewStatic(addrs...)))
	c := test.SpawnCollector(nodes[0].System)
	if err := nodes[0].PS.Subscribe(c.PID, "marker"); err != nil {
		t.Fatal(err)
	}
	ps := nodes[0].PS
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() { // broadcasts through the crashes and the group's restart
		defer wg.Done()
		for seq := uint64(1); ; seq++ {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			_ = ps.BroadcastContext(ctx, nil, "busy", stamp(seq))
			cancel()
		}
	}()
	test.Eventually(t, 20*time.Second, func() bool { return hook.left.Load() < 0 },
		func() string { return fmt.Sprintf("the producer crashed %d of 12 times", 12-hook.left.Load()) })
	close(stop)
	wg.Wait()
	if err := ps.Err(); err != nil {
		t.Fatalf("pubsub died: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a broadcast after the group restarted was never delivered to this node's subscriber")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err := ps.BroadcastContext(ctx, nil, "marker", stamp(1))
		cancel()
		if err != nil && !errors.Is(err, echopubsub.ErrBusy) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // polling the subscriber between broadcasts
	}
}

package echopubsub_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/test"
)

// stallingProducer blocks the producer it runs in on its next send once
// armed, until released: a producer that cannot keep up, so its queue of
// writes fills.
type stallingProducer struct {
	mu       sync.Mutex
	armed    bool
	entered  chan struct{} // closed when a send blocked
	released chan struct{}
}

func newStallingProducer() *stallingProducer {
	return &stallingProducer{entered: make(chan struct{}), released: make(chan struct{})}
}

func (s *stallingProducer) arm() { s.mu.Lock(); s.armed = true; s.mu.Unlock() }

func (s *stallingProducer) Send(string, proto.Message) error {
	s.mu.Lock()
	armed := s.armed
	if armed {
		s.armed = false
		close(s.entered)
	}
	s.mu.Unlock()
	if armed {
		<-s.released
	}
	return nil
}
func (s *stallingProducer) Receive(string, proto.Message) error { return nil }
func (s *stallingProducer) Delivered(string, uint64)            {}
func (s *stallingProducer) Acked(string, proto.Message)         {}

// A full producer makes Broadcast wait CallTimeout and fail with ErrBusy;
// BroadcastContext waits only as long as its context, and says why; Stats
// honours cancellation. What was accepted is delivered, in order, once the
// producer moves again; what was refused is not.
func TestBroadcastContextBoundsTheWaitForRoom(t *testing.T) {
	log := test.Logger(t, zerolog.WarnLevel)
	nodes, addrs := test.NewNodes(t, 2, log)
	cfg := fastConfig()
	cfg.MaxPendingWrites = 2
	stall := newStallingProducer()
	nodes[0].Start(t, cfg, echopubsub.WithMembership(cluster.NewStatic(addrs...)), test.WithFaultHook(stall))
	nodes[1].Start(t, cfg, echopubsub.WithMembership(cluster.NewStatic(addrs...)))
	c := test.SpawnCollector(nodes[1].System)
	if err := nodes[1].PS.Subscribe(c.PID, "match"); err != nil {
		t.Fatal(err)
	}
	ps := nodes[0].PS

	release := sync.OnceFunc(func() { close(stall.released) })
	t.Cleanup(release) // a failed check must not leave the producer stuck (Stop would wait for it)
	stall.arm()
	if err := ps.Broadcast(nil, "match", stamp(1)); err != nil {
		t.Fatal(err)
	}
	select { // the producer is stuck in a send (message 1's batch, or a probe just before it)
	case <-stall.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the producer never sent")
	}
	// Fill MaxPendingWrites: 2 more writes, or 1 when message 1 itself is
	// still queued behind the stuck send.
	want := []uint64{1}
	for seq := uint64(2); ; seq++ {
		short, cancelShort := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err := ps.BroadcastContext(short, nil, "match", stamp(seq))
		cancelShort()
		if errors.Is(err, echopubsub.ErrBusy) {
			break
		}
		if err != nil {
			t.Fatalf("broadcast %d: %v", seq, err)
		}
		want = append(want, seq)
		if seq > uint64(cfg.MaxPendingWrites)+1 {
			t.Fatalf("%d writes accepted by a producer that is stuck, MaxPendingWrites %d", seq, cfg.MaxPendingWrites)
		}
	}
	if len(want) < cfg.MaxPendingWrites {
		t.Fatalf("accepted %v before ErrBusy, want at least MaxPendingWrites %d", want, cfg.MaxPendingWrites)
	}

	start := time.Now()
	if err := ps.Broadcast(nil, "match", stamp(99)); !errors.Is(err, echopubsub.ErrBusy) {
		t.Fatalf("Broadcast to a full producer: %v, want ErrBusy", err)
	}
	if waited := time.Since(start); waited < cfg.CallTimeout {
		t.Fatalf("Broadcast gave up after %v, before CallTimeout %v", waited, cfg.CallTimeout)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start = time.Now()
	err := ps.BroadcastContext(ctx, nil, "match", stamp(99))
	if !errors.Is(err, echopubsub.ErrBusy) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("BroadcastContext past its deadline: %v, want ErrBusy and DeadlineExceeded", err)
	}
	if waited := time.Since(start); waited >= cfg.CallTimeout {
		t.Fatalf("BroadcastContext waited %v: its 50ms context, not CallTimeout, bounds the wait", waited)
	}
	cancelled, cancelNow := context.WithCancel(context.Background())
	cancelNow()
	if err := ps.BroadcastContext(cancelled, nil, "match", stamp(99)); !errors.Is(err, context.Canceled) {
		t.Fatalf("BroadcastContext with a cancelled context: %v, want context.Canceled", err)
	}
	//lint:ignore SA1012 a nil context is the error under test
	if err := ps.BroadcastContext(nil, nil, "match", stamp(99)); err == nil {
		t.Fatal("BroadcastContext with a nil context: no error")
	}

	statsCtx, cancelStats := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancelStats)
	start = time.Now()
	if _, err := ps.Stats(statsCtx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Stats of a stuck producer, cancelled: %v, want context.Canceled", err)
	}
	if waited := time.Since(start); waited >= cfg.CallTimeout {
		t.Fatalf("Stats waited %v after its context was cancelled", waited)
	}

	release()
	if err := ps.Broadcast(nil, "match", stamp(50)); err != nil {
		t.Fatal(err)
	}
	wantStamps(t, c, append(want, 50)...)
}

// LocalBroadcastFrom and DirectBroadcastFrom skip the sender, like
// Phoenix's local_broadcast_from and direct_broadcast_from.
func TestBroadcastFromVariantsSkipTheSender(t *testing.T) {
	nodes := test.StartCluster(t, 2, fastConfig())
	var sender, other, remote *test.Collector
	sender = test.SpawnCollector(nodes[1].System)
	other = test.SpawnCollector(nodes[1].System)
	remote = test.SpawnCollector(nodes[0].System)
	for _, s := range []struct {
		nd *test.Node
		c  *test.Collector
	}{{nodes[1], sender}, {nodes[1], other}, {nodes[0], remote}} {
		if err := s.nd.PS.Subscribe(s.c.PID, "match"); err != nil {
			t.Fatal(err)
		}
	}
	ps := nodes[1].PS
	if err := ps.LocalBroadcastFrom(sender.PID, "match", stamp(1)); err != nil {
		t.Fatal(err)
	}
	if err := ps.DirectBroadcastFrom(sender.PID, nodes[1].Addr, "match", stamp(2)); err != nil {
		t.Fatal(err)
	}
	if err := ps.LocalBroadcastFrom(nil, "match", stamp(9)); err == nil {
		t.Fatal("LocalBroadcastFrom without a sender: no error")
	}
	if err := ps.DirectBroadcastFrom(sender.PID, "127.0.0.1:1", "match", stamp(9)); !errors.Is(err, echopubsub.ErrNotMember) {
		t.Fatalf("DirectBroadcastFrom to a non-member: %v, want ErrNotMember", err)
	}
	// A marker everybody gets, from the same sender (so the same producer,
	// after message 2): whoever got it has had its chance at 1 and 2.
	if err := ps.Broadcast(sender.PID, "match", stamp(3)); err != nil {
		t.Fatal(err)
	}
	wantStamps(t, other, 1, 2, 3)
	wantStamps(t, sender, 3)
	wantStamps(t, remote, 3)
}

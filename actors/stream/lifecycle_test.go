package stream_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// Stop is ordered and idempotent, and leaves none of the pubsub's
// goroutines behind (the actor system and remote belong to the caller).
func TestStopLeavesNoGoroutines(t *testing.T) {
	log := test.Logger(t, 0)
	system, r := test.StartRemote(t, log)
	defer func() { r.Shutdown(false); system.Shutdown() }()
	before := goleak.IgnoreCurrent()

	cfg := echopubsub.DefaultConfig("leak")
	cfg.BatchInterval = 5 * time.Millisecond
	cfg.PoolSize = 3
	ps, err := echopubsub.Start(system, cfg, echopubsub.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	c := test.SpawnCollector(system)
	if err := ps.Subscribe(c.PID, "t"); err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 100; i++ {
		if err := ps.Broadcast(nil, "t", &testpb.Stamp{Seq: i}); err != nil {
			t.Fatal(err)
		}
	}
	test.Eventually(t, 5*time.Second, func() bool { return c.Len() == 100 }, c.Describe)
	system.Root.Stop(c.PID)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ps.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ps.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := ps.Broadcast(nil, "t", &testpb.Stamp{}); err != echopubsub.ErrStopped {
		t.Fatalf("Broadcast after Stop: %v", err)
	}
	// protoactor's timed goroutines (the dead-letter throttle, owned by the
	// actor system, which the caller still runs) may be mid-period: not ours.
	test.VerifyNoLeaks(t, before)
}

package stream

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub/actors/delivery"
	"github.com/echopubsub/echopubsub/internal/core"
)

// A write Broadcast accepts while the group's producer does not exist (the
// root restarts a whole pool group when a child exceeds its restart
// intensity: the old producer, its mailbox and any WritesReady in it are
// gone, and a WritesReady sent before the new one registers is a dead
// letter) is taken by the new producer when it starts, and the queue goes
// on notifying: otherwise the notified flag stays set, no WritesReady is
// ever sent again, the write is never delivered and Broadcast ends in
// ErrBusy forever.
func TestNewProducerTakesWritesQueuedWhileItWasAway(t *testing.T) {
	system := actor.NewActorSystem()
	defer system.Shutdown()
	cfg := testConfig("away")
	cfg.BatchInterval = time.Millisecond
	rt := core.NewRuntime(cfg, system, system.Address(), nil, zerolog.Nop())
	d := delivery.NewDispatcher(system, rt.Node, zerolog.Nop())

	// No producer yet: the WritesReady this sends is a dead letter.
	if err := rt.Enqueue(core.Wait{}, nil, &core.Write{Topic: "t", PayloadType: "x", Payload: []byte{1}}); err != nil {
		t.Fatal(err)
	}
	root := system.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	if _, err := system.Root.SpawnNamed(actor.PropsFromProducer(NewProducer(rt, 0, root, d)), core.RootName(cfg.Name)+"/g0/producer"); err != nil {
		t.Fatal(err)
	}
	if err := rt.Enqueue(core.Wait{}, nil, &core.Write{Topic: "t", PayloadType: "x", Payload: []byte{2}}); err != nil {
		t.Fatal(err)
	}
	// Polls the queue (internal state): the only sign a producer took it.
	deadline := time.Now().Add(5 * time.Second)
	for rt.Queues[0].Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d writes still queued 5s after the producer started: never taken", rt.Queues[0].Len())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

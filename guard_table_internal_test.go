package echopubsub

import (
	"context"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"
)

// The guard's table names a pubsub before its tree exists (a request to an
// unknown pubsub passes to protoactor unchecked); a second Start of a name
// that runs fails and leaves the running one entered, checked as before.
func TestSecondStartKeepsTheRunningPubSubGuarded(t *testing.T) {
	system := actor.NewActorSystem()
	r := remote.NewRemote(system, RemoteConfig("127.0.0.1", 0, zerolog.Nop()))
	r.Start()
	defer func() { r.Shutdown(false); system.Shutdown() }()
	cfg := DefaultConfig("dup")
	ps, err := Start(system, cfg, WithLogger(zerolog.Nop()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = ps.Stop(ctx)
	}()
	if _, err := Start(system, cfg, WithLogger(zerolog.Nop())); err == nil {
		t.Fatal("a second Start of a running name succeeded")
	}
	if got := pubsubs.get(system.Address(), "dup"); got != ps.rt {
		t.Fatalf("after a failed second Start the guard's table holds %p, want the running pubsub %p", got, ps.rt)
	}
}

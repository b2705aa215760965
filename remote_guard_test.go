package echopubsub_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/test"
)

// startOn starts a remote with cfg on a fresh actor system, and Start on
// it; the remote stops when the test ends.
func startOn(t *testing.T, cfg *remote.Config, opts ...echopubsub.Option) (*echopubsub.PubSub, error) {
	t.Helper()
	system := actor.NewActorSystem(echopubsub.ActorSystemLogger(test.Logger(t, zerolog.WarnLevel)))
	r := remote.NewRemote(system, cfg)
	r.Start()
	t.Cleanup(func() { r.Shutdown(false); system.Shutdown() })
	ps, err := echopubsub.Start(system, fastConfig(), opts...)
	if err == nil {
		t.Cleanup(func() { _ = ps.Stop(t.Context()) })
	}
	return ps, err
}

// TestStartRefusesUnguardedRemote: a remote a protoactor user configured
// themselves, without the guard, is refused with an error that names both
// fixes; so is one whose guard a later remote.WithServerOptions replaced.
func TestStartRefusesUnguardedRemote(t *testing.T) {
	log := test.Logger(t, zerolog.WarnLevel)
	for name, cfg := range map[string]*remote.Config{
		"plain remote.Configure": remote.Configure("127.0.0.1", 0),
		"guard replaced by WithServerOptions": remote.Configure("127.0.0.1", 0, echopubsub.Guard(log),
			remote.WithServerOptions(grpc.MaxRecvMsgSize(1<<20))),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := startOn(t, cfg, echopubsub.WithLogger(log))
			if !errors.Is(err, echopubsub.ErrUnguardedRemote) {
				t.Fatalf("Start on an unguarded remote: %v, want ErrUnguardedRemote", err)
			}
			for _, fix := range []string{"echopubsub.RemoteConfig(", "echopubsub.Guard(log)", "WithUnguardedRemote"} {
				if !strings.Contains(err.Error(), fix) {
					t.Errorf("the error does not name %q: %v", fix, err)
				}
			}
		})
	}
}

// TestWithUnguardedRemote: the explicit opt-out starts, and says once what
// is exposed.
func TestWithUnguardedRemote(t *testing.T) {
	log, logs := test.CapturingLogger(t, zerolog.InfoLevel)
	if _, err := startOn(t, remote.Configure("127.0.0.1", 0), echopubsub.WithLogger(log), echopubsub.WithUnguardedRemote()); err != nil {
		t.Fatalf("Start with WithUnguardedRemote: %v", err)
	}
	const warning = "without the edge guard (WithUnguardedRemote)"
	if n := logs.Count(warning); n != 1 {
		t.Fatalf("the opt-out was warned about %d times, want once", n)
	}
	if !logs.Contains("forged system messages") {
		t.Error("the warning does not say what is exposed")
	}
}

// TestGuardOnOwnRemote: a remote built with remote.Configure plus
// echopubsub.Guard (after the user's own server options) resists the
// forged system messages that stop delivery on an unguarded one, and
// carries the guard's frame limit: a 5 MiB frame (over gRPC's 4 MiB
// default) is not refused for its size.
func TestGuardOnOwnRemote(t *testing.T) {
	own := func(log zerolog.Logger) *remote.Config {
		return remote.Configure("127.0.0.1", 0, remote.WithServerOptions(grpc.MaxConcurrentStreams(1000)), echopubsub.Guard(log))
	}
	system := hostilePeer(t)
	me := actor.NewPID(system.Address(), "hostile")
	h := startHostileTargetOn(t, own)
	addr := h.nodes[0].Addr
	for _, id := range treeActors {
		for _, m := range []proto.Message{&actor.Stop{}, &actor.PoisonPill{}, &actor.Unwatch{Watcher: me},
			&actor.Terminated{Who: h.cs[0].PID, Why: actor.TerminatedReason_Stopped}} {
			system.Root.Send(actor.NewPID(addr, id), m) // a fresh PID: over the wire
		}
	}
	barrier(t, system, addr)
	h.intact(t)

	big := &remote.MessageBatch{TypeNames: []string{"echopubsub.v1.Broadcast"}, Targets: []*actor.PID{actor.NewPID(addr, "nobody")},
		Envelopes: []*remote.MessageEnvelope{{TypeId: 0, Target: 0, MessageData: make([]byte, 5<<20)}}}
	if err := sendBatch(t, addr, big); status.Code(err) == codes.ResourceExhausted {
		t.Fatalf("a 5 MiB frame was refused for its size: the guard's frame limit is not installed: %v", err)
	}
	h.intact(t)
}

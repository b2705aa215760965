package echopubsub_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/test"
)

// TestDeadPubSubIsNeverSilent: once the tree can no longer deliver, Done is
// closed, Err says why, and every call fails with ErrStopped instead of
// accepting work that nobody will deliver.
func TestDeadPubSubIsNeverSilent(t *testing.T) {
	cases := []struct {
		name, kill, why string
	}{
		{"root stopped from inside", "echopubsub/scores", "root actor"},
		{"pool group stopped for good", "echopubsub/scores/g0", "echopubsub/scores/g0 stopped for good"},
		{"registry stopped for good", "echopubsub/scores/registry", "echopubsub/scores/registry stopped for good"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nd := test.StartCluster(t, 1, fastConfig())[0]
			c := nd.Subscribe(t, "match")
			ps := nd.PS
			select {
			case <-ps.Done():
				t.Fatal("Done closed on a running pubsub")
			default:
			}
			if err := ps.Err(); err != nil {
				t.Fatalf("Err on a running pubsub: %v", err)
			}
			// A local system Stop: nothing from the wire reaches the tree's
			// system messages (TestHostileSystemMessages).
			nd.System.Root.Stop(actor.NewPID(nd.Addr, tc.kill))
			select {
			case <-ps.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("Done not closed after the tree died")
			}
			err := ps.Err()
			if !errors.Is(err, echopubsub.ErrStopped) || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("Err = %v, want ErrStopped saying %q", err, tc.why)
			}
			calls := map[string]func() error{
				"Broadcast":       func() error { return ps.Broadcast(nil, "match", stamp(1)) },
				"BroadcastFrom":   func() error { return ps.BroadcastFrom(c.PID, "match", stamp(1)) },
				"LocalBroadcast":  func() error { return ps.LocalBroadcast("match", stamp(1)) },
				"DirectBroadcast": func() error { return ps.DirectBroadcast(nd.Addr, "match", stamp(1)) },
				"Subscribe":       func() error { return ps.Subscribe(c.PID, "other") },
				"Unsubscribe":     func() error { return ps.Unsubscribe(c.PID, "match") },
				"Stats":           func() error { _, err := ps.Stats(context.Background()); return err },
			}
			for name, call := range calls {
				if err := call(); !errors.Is(err, echopubsub.ErrStopped) {
					t.Errorf("%s on a dead pubsub: %v, want ErrStopped", name, err)
				}
			}
			if n := c.Len(); n != 0 {
				t.Errorf("the subscriber got %d messages from a dead pubsub", n)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := ps.Stop(ctx); err != nil {
				t.Errorf("Stop of a dead pubsub: %v", err)
			}
		})
	}
}

// TestDirectBroadcastToNonMember: a node that is not a member is an error,
// not a message that silently reaches nobody.
func TestDirectBroadcastToNonMember(t *testing.T) {
	nd := test.StartCluster(t, 1, fastConfig())[0]
	err := nd.PS.DirectBroadcast("127.0.0.1:1", "match", stamp(1))
	if !errors.Is(err, echopubsub.ErrNotMember) || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("DirectBroadcast to a non-member: %v, want ErrNotMember naming it", err)
	}
	if err := nd.PS.DirectBroadcast(nd.Addr, "match", stamp(1)); err != nil {
		t.Fatalf("DirectBroadcast to this node: %v", err)
	}
}

// crashingProducer crashes the producer it runs in on every send.
type crashingProducer struct{}

func (crashingProducer) Send(string, proto.Message) error {
	panic("test: producer crashes on every send")
}
func (crashingProducer) Receive(string, proto.Message) error { return nil }
func (crashingProducer) Delivered(string, uint64)            {}
func (crashingProducer) Acked(string, proto.Message)         {}

// TestDeadAfterRestartLimit: a producer that crashes on every send (it
// sends to its peer as soon as it starts) exceeds its restart intensity,
// its group then exceeds the root's, and the pubsub says it is dead instead
// of accepting broadcasts it cannot deliver.
func TestDeadAfterRestartLimit(t *testing.T) {
	log := test.Logger(t, zerolog.ErrorLevel) // every crash logs; the test reads Done and Err
	nodes, addrs := test.NewNodes(t, 2, log)
	nodes[0].Start(t, fastConfig(), echopubsub.WithMembership(cluster.NewStatic(addrs...)), test.WithFaultHook(crashingProducer{}))
	nodes[1].Start(t, fastConfig(), echopubsub.WithMembership(cluster.NewStatic(addrs...)))
	ps := nodes[0].PS
	select {
	case <-ps.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("Done not closed: the producer crashes on every send, so the root must give up on its group")
	}
	err := ps.Err()
	if !errors.Is(err, echopubsub.ErrStopped) || !strings.Contains(err.Error(), "stopped for good") {
		t.Fatalf("Err = %v, want ErrStopped saying a child stopped for good", err)
	}
	if err := ps.Broadcast(nil, "match", stamp(1)); !errors.Is(err, echopubsub.ErrStopped) {
		t.Fatalf("Broadcast on a dead pubsub: %v, want ErrStopped", err)
	}
}

package echopubsub_test

import (
	"testing"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/echopubsub/echopubsub/test/testpb"
)

// TestHostileStopsSessionManager: the session manager has a well-known
// name (echopubsub-sessions/<name>) and its session actors protoactor's
// sequential child names. A system message to them from the wire (a Stop,
// a forged Terminated of the owner) must be dropped at the edge like one to
// the tree: otherwise a Stop stops every session actor while the sessions
// stay open, and their owners get nothing more and are told nothing (a
// silent gap made from outside).
func TestHostileStopsSessionManager(t *testing.T) {
	h := startHostileTarget(t)
	system := hostilePeer(t)
	nd := h.nodes[0]
	o := spawnOwner(t, nd, nil)
	openSession(t, nd, o, []string{"sess"})
	for _, id := range []string{"echopubsub-sessions/scores", "echopubsub-sessions/scores/$1", "echopubsub-sessions/scores/$2"} {
		system.Root.Send(actor.NewPID(nd.Addr, id), &actor.Stop{})
		system.Root.Send(actor.NewPID(nd.Addr, id), &actor.Terminated{Who: o.PID})
	}
	barrier(t, system, nd.Addr)
	nd.Broadcast(t, "sess", &testpb.Stamp{Publisher: "honest", Seq: 1})
	waitEnvelopes(t, o, 1)
	if n := len(o.notices()); n != 0 {
		t.Fatalf("the owner got %d notices: %s", n, o.describe())
	}
}

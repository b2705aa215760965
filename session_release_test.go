package echopubsub_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/echopubsub/echopubsub/test"
)

// A closed session lets go of its owner: once the owners stopped and
// their sessions closed, nothing of theirs stays reachable (issue 37, item
// 9: the gateway's sockets, each a session's owner, stayed in the heap
// through stale protoactor references to the stopped session actors).
func TestClosedSessionsReleaseTheirOwners(t *testing.T) {
	const sessions = 50
	nd := test.StartCluster(t, 1, sessionConfig(100, 200))[0]
	owners := make([]weak.Pointer[owner], sessions)
	for i := range owners {
		o := spawnOwner(t, nd, nil)
		openSession(t, nd, o, []string{"room"})
		owners[i] = weak.Make(o)
	}
	nd.Broadcast(t, "room", stamp(1))
	for i, w := range owners {
		o := w.Value()
		waitEnvelopes(t, o, 1)
		if err := nd.System.Root.StopFuture(o.PID).Wait(); err != nil { // the session closes with its owner
			t.Fatalf("stop owner %d: %v", i, err)
		}
	}
	alive := func() int {
		runtime.GC()
		n := 0
		for _, w := range owners {
			if w.Value() != nil {
				n++
			}
		}
		return n
	}
	// Polls: the sessions close and their actors stop asynchronously after
	// the owners stopped.
	test.Eventually(t, 10*time.Second, func() bool { return alive() == 0 },
		func() string { return fmt.Sprintf("%d of %d stopped owners still reachable", alive(), sessions) })
}

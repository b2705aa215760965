package echopubsub_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// TestWithFromSessionToldOfALostDirectBroadcast: as in
// TestWithFromSessionToldByTheStoreOnly node 1 falls behind node 0's
// buffer, but among the messages it misses is a DirectBroadcast to node 1
// on the followed stream room:1 (or a request to the session's inbox). No
// store keeps a DirectBroadcast or a request, so the store cannot tell the
// WithFrom session of it: the session must get the node's CursorExpired
// (never a silent gap), with both a node-local and a shared store.
func TestWithFromSessionToldOfALostDirectBroadcast(t *testing.T) {
	for _, tc := range []struct {
		shared, request bool
	}{{false, false}, {true, false}, {true, true}} {
		shared := tc.shared
		t.Run(fmt.Sprintf("shared=%v,request=%v", shared, tc.request), func(t *testing.T) {
			const buffer, cut = 20, 30
			nodes := startWithFromPair(t, buffer, shared)
			c := nodes[1].Subscribe(t, "room:1")
			follower := spawnOwner(t, nodes[1], nil)
			id := openSession(t, nodes[1], follower, nil)
			if err := nodes[1].PS.SessionSubscribe(id, "room:1", echopubsub.WithFrom(1)); err != nil {
				t.Fatalf("SessionSubscribe WithFrom(1): %v", err)
			}
			publishStamps(t, nodes[0], "room:1", "a", 1, 3)
			wantStamps(t, c, 1, 2, 3)
			waitEnvelopes(t, follower, 3)
			// Not a settling wait: node 0 must have node 1's ack of 1..3 before
			// the cut, or the cut would fail that batch and the range start earlier.
			test.Eventually(t, 5*time.Second, func() bool { return nodes[0].NodeStats(t, nodes[1].Addr).Next == 3 },
				test.Sprintf("node 1 acknowledged 1..3"))
			nodes[0].Faults.Cut(nodes[1].Addr)
			publishStamps(t, nodes[0], "room:1", "a", 4, 10)
			if tc.request { // a request to the follower's inbox: a DirectBroadcast to node 1 too
				from := openSession(t, nodes[0], spawnOwner(t, nodes[0], nil), nil)
				if _, err := nodes[0].PS.RequestFromSession(from, id, &testpb.Stamp{Publisher: "request", Seq: 1}); err != nil {
					t.Fatalf("RequestFromSession: %v", err)
				}
			} else if err := nodes[0].PS.DirectBroadcast(nodes[1].Addr, "room:1", &testpb.Stamp{Publisher: "direct", Seq: 1}); err != nil {
				t.Fatalf("DirectBroadcast: %v", err)
			}
			publishStamps(t, nodes[0], "room:1", "a", 11, 3+cut)
			test.Eventually(t, 5*time.Second, func() bool { return nodes[0].NodeStats(t, nodes[1].Addr).Expired },
				test.Sprintf("node 1 expired in node 0's view"))
			nodes[0].Faults.HealAll()
			test.Eventually(t, 10*time.Second, func() bool { return test.Count[*messages.CursorExpired](c) == 1 }, c.Describe)
			// Told without anything more published: the notice is handed at once.
			test.Eventually(t, 10*time.Second, func() bool { return countOf[*messages.CursorExpired](follower) == 1 }, follower.describe)
			for _, m := range follower.all() {
				if ce, ok := m.(*messages.CursorExpired); ok && ce.AllStored {
					t.Fatalf("the follower's CursorExpired says every entry is stored, but a DirectBroadcast was lost: %v", ce)
				}
			}
		})
	}
}

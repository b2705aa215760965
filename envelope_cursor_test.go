package echopubsub_test

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// TestLiveEnvelopesCarryTheirStoreCursor: with a node-local store on each
// node, every live envelope of a durable topic carries the cursor of its row
// in the receiving node's store, for the node's own broadcasts (appended by
// Broadcast) and for a peer's (appended by the worker before delivery): the
// row at Envelope.Cursor is the envelope's message.
func TestLiveEnvelopesCarryTheirStoreCursor(t *testing.T) {
	cfg := replayConfig()
	cfg.SoftQueue, cfg.HardQueue = 50, 100
	nodes := test.StartCluster(t, 2, cfg)
	stores := []*test.MemStore{test.NewMemStore(), test.NewMemStore()}
	// StartCluster gives every node the same options: restart each on its
	// own store.
	for _, nd := range nodes {
		nd.StopPubSub(t)
	}
	for i, nd := range nodes {
		nd.Start(t, cfg, staticOf(addrsOf(nodes)), echopubsub.WithDurableTopics("room:*"), echopubsub.WithStore(stores[i]))
	}
	test.WaitJoined(t, nodes)
	owners := make([]*owner, len(nodes))
	for i, nd := range nodes {
		owners[i] = spawnOwner(t, nd, nil)
		openSession(t, nd, owners[i], []string{"room:1"})
	}
	publishStamps(t, nodes[0], "room:1", "a", 1, 10)
	publishStamps(t, nodes[1], "room:1", "b", 1, 10)
	for i, o := range owners {
		waitEnvelopes(t, o, 20)
		seen := map[uint64]bool{}
		for _, e := range o.envelopes() {
			if e.Cursor == 0 || seen[e.Cursor] {
				t.Fatalf("node %d: envelope %s with cursor %d (0 or repeated): %s", i, stampOf(e), e.Cursor, o.describe())
			}
			seen[e.Cursor] = true
			rows, _, err := stores[i].Read(replayCtx(t), "room:1", e.Cursor, 1)
			if err != nil || len(rows) != 1 || rows[0].Cursor != e.Cursor {
				t.Fatalf("node %d: row %d: %v %+v", i, e.Cursor, err, rows)
			}
			msg, err := messages.Decode(rows[0].PayloadType, rows[0].Payload)
			if err != nil || !proto.Equal(msg, e.Event) {
				t.Fatalf("node %d: envelope %s has cursor %d, whose row holds %v (%v)", i, stampOf(e), e.Cursor, msg, err)
			}
		}
	}
}

func stampOf(e *echopubsub.Envelope) string {
	if s, ok := e.Event.(*testpb.Stamp); ok {
		return fmt.Sprintf("%s#%d", s.Publisher, s.Seq)
	}
	return fmt.Sprintf("%T", e.Event)
}

package echopubsub_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/test"
)

// A receipt with AwaitStored says stored only where the node's store
// appended the message: node 1's store fails (its worker still delivers and
// acks, and writes a gap row later), so node 1 is NotStored, never
// Delivered-and-stored; node 0's store works: Delivered and Stored.
func TestBroadcastAwaitStoredFailingStore(t *testing.T) {
	cfg := replayConfig()
	nodes := test.StartCluster(t, 2, cfg)
	failing := test.NewFailingStore()
	for i, nd := range nodes {
		nd.StopPubSub(t)
		opts := []echopubsub.Option{staticOf(addrsOf(nodes)), echopubsub.WithDurableTopics("room:*"), test.WithMemStore()}
		if i == 1 {
			opts = append(opts, echopubsub.WithStore(failing))
		}
		nd.Start(t, cfg, opts...)
	}
	r, err := nodes[0].PS.BroadcastAwait(awaitCtx(t, 10*time.Second), nil, "room:1", stamp(1), echopubsub.AwaitStored())
	if err != nil {
		t.Fatalf("BroadcastAwait(AwaitStored), both stores working: %v (receipt %+v)", err, r)
	}
	wantStatus(t, r, echopubsub.Delivered, nodes...)

	failing.Fail(fmt.Errorf("write store file: %w", syscall.ENOSPC))
	r, err = nodes[0].PS.BroadcastAwait(awaitCtx(t, 10*time.Second), nil, "room:1", stamp(2), echopubsub.AwaitStored())
	if err != nil {
		t.Fatalf("BroadcastAwait(AwaitStored), node 1's store failing: %v (receipt %+v)", err, r)
	}
	wantStatus(t, r, echopubsub.Delivered, nodes[0])
	wantStatus(t, r, echopubsub.NotStored, nodes[1])
	for i, nd := range nodes {
		k := indexOf(r, nd.Addr)
		if k < 0 || r.Nodes[k].Stored != (i == 0) {
			t.Fatalf("receipt with node 1's store failing: node %d Stored %v, want %v; receipt %+v", i, k >= 0 && r.Nodes[k].Stored, i == 0, r)
		}
	}
	if s := echopubsub.NotStored.String(); s != "not_stored" {
		t.Fatalf("NotStored.String() = %q", s)
	}
}

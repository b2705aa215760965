package echopubsub_test

import (
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// TestHostileNonhostTarget: protoactor delivers a message whose target
// address is "nonhost" (its local address) to the local actor of that id.
// A non-member's Broadcast to the root under that address must be refused
// at the edge like one to the node's own address; the guard finds no pubsub
// under "nonhost", and letting it pass to protoactor (as for a pubsub that
// does not run here) hands it to the live root, which delivers it.
func TestHostileNonhostTarget(t *testing.T) {
	h := startHostileTarget(t)
	system := hostilePeer(t)
	addr := h.nodes[0].Addr
	spy := h.nodes[0].Subscribe(t, "hostile", echopubsub.WithMetadata())
	any, err := anypb.New(&testpb.Stamp{Publisher: "hostile", Seq: 1})
	if err != nil {
		t.Fatal(err)
	}
	bc := payload(t, &messages.Broadcast{Topic: "hostile", Message: any})
	if err := sendBatch(t, addr, &remote.MessageBatch{
		TypeNames: []string{"echopubsub.v1.Broadcast"},
		Targets:   []*actor.PID{actor.NewPID("nonhost", "echopubsub/scores")},
		Senders:   []*actor.PID{actor.NewPID(system.Address(), "hostile")},
		Envelopes: []*remote.MessageEnvelope{{TypeId: 0, MessageData: bc, Target: 0, Sender: 1}},
	}); err != nil {
		t.Fatalf("the node closed the stream: %v", err)
	}
	// sendBatch kept the stream open for a second, in which the endpoint
	// reader handed the envelope on; intact then delivers honest broadcasts
	// through node 0's producer, behind the hostile one had it been queued.
	barrier(t, system, addr)
	h.intact(t)
	if spy.Len() != 0 {
		t.Fatalf("a non-member's broadcast to nonhost was delivered: %s", spy.Describe())
	}
}

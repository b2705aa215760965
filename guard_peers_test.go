package echopubsub_test

import (
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// intact checks that the node still does its job after an attack: an honest
// broadcast each way arrives, each node still has its one subscriber, and
// each subscriber got every honest broadcast in order with no notice (no
// silent gap, and no false alarm).
func (h *hostileTarget) intact(t *testing.T) {
	t.Helper()
	h.stillServes(t)
	for i, nd := range h.nodes {
		if n := nd.PS.SubscriberCount("match"); n != 1 {
			t.Fatalf("node %d: SubscriberCount %d, want 1", i, n)
		}
		if err := nd.PS.Err(); err != nil {
			t.Fatalf("node %d: pubsub died: %v", i, err)
		}
		var want []uint64
		for s := uint64(1); s <= h.seq; s++ {
			want = append(want, s)
		}
		c := h.cs[i]
		if got := c.Stamps(); !equal(got, want) {
			t.Fatalf("node %d: subscriber got %v, want %v", i, fmtU(got), fmtU(want))
		}
		if n := test.Count[*messages.CursorExpired](c) + test.Count[*messages.BackPressure](c); n != 0 {
			t.Fatalf("node %d: subscriber got %d notices: %s", i, n, c.Describe())
		}
	}
}

// treeActors is every well-known actor of the pubsub "scores" (PoolSize 1).
var treeActors = []string{"echopubsub/scores", "echopubsub/scores/registry", "echopubsub/scores/g0",
	"echopubsub/scores/g0/producer", "echopubsub/scores/g0/worker"}

// hostilePeer is a protoactor node that runs no pubsub.
func hostilePeer(t *testing.T) *actor.ActorSystem {
	system, r := test.StartRemote(t, test.Logger(t, zerolog.WarnLevel))
	t.Cleanup(func() { r.Shutdown(false); system.Shutdown() })
	return system
}

// barrier asks the target's root, over the hostile peer's connection, for
// something it answers: once the answer is back, everything the peer sent
// before it was handed to the target's actors (one connection, in order).
// A non-member's broadcast is refused with a reason.
func barrier(t *testing.T, system *actor.ActorSystem, addr string) string {
	t.Helper()
	any, err := anypb.New(&testpb.Stamp{Publisher: "hostile", Seq: 999})
	if err != nil {
		t.Fatal(err)
	}
	res, err := system.Root.RequestFuture(actor.NewPID(addr, "echopubsub/scores"),
		&messages.Broadcast{Topic: "match", Message: any}, 5*time.Second).Result()
	if err != nil {
		t.Fatalf("no answer to a broadcast: %v", err)
	}
	r, ok := res.(*messages.BroadcastResult)
	if !ok {
		t.Fatalf("broadcast answered %T", res)
	}
	return r.Error
}

// TestHostileSystemMessages: protoactor hands system messages from the wire
// to local actors. Forged ones to every well-known actor of the tree are
// dropped at the edge and logged; the node keeps every subscription and
// delivers. Each kind attacks fresh nodes, so that each is shown on its own.
func TestHostileSystemMessages(t *testing.T) {
	system := hostilePeer(t)
	me := actor.NewPID(system.Address(), "hostile")
	forged := []struct {
		name string
		msg  func(h *hostileTarget) proto.Message
	}{
		{"Stop", func(*hostileTarget) proto.Message { return &actor.Stop{} }},
		{"PoisonPill", func(*hostileTarget) proto.Message { return &actor.PoisonPill{} }},
		{"Terminated of the subscriber", func(h *hostileTarget) proto.Message {
			return &actor.Terminated{Who: h.cs[0].PID, Why: actor.TerminatedReason_Stopped}
		}},
		{"Terminated of a tree actor", func(h *hostileTarget) proto.Message {
			return &actor.Terminated{Who: workerPID(h.nodes[0].Addr)}
		}},
		{"Watch", func(*hostileTarget) proto.Message { return &actor.Watch{Watcher: me} }},
		{"Unwatch", func(*hostileTarget) proto.Message { return &actor.Unwatch{Watcher: me} }},
		{"Touch", func(*hostileTarget) proto.Message { return &actor.Touch{} }},
	}
	for _, f := range forged {
		t.Run(f.name, func(t *testing.T) {
			h := startHostileTarget(t)
			addr := h.nodes[0].Addr
			for _, id := range treeActors {
				for i := 0; i < 12; i++ { // past any restart limit (10 in 10 s)
					system.Root.Send(actor.NewPID(addr, id), f.msg(h))
				}
			}
			barrier(t, system, addr)
			h.intact(t)
			const dropped = "dropped a message from the wire to the pubsub tree"
			test.Eventually(t, 5*time.Second, func() bool { return h.logs.Contains(dropped) },
				test.Sprintf("the guard did not log what it dropped"))
			if n := h.logs.Count(dropped); n != 1 {
				t.Errorf("%d messages from one sender logged %d times, want once", 12*len(treeActors), n)
			}
		})
	}
	t.Run("Restart", func(t *testing.T) {
		// actor.Restart has no wire form: protoactor cannot decode it, the
		// guard ends the stream.
		h := startHostileTarget(t)
		addr := h.nodes[0].Addr
		for _, id := range treeActors {
			err := sendBatch(t, addr, &remote.MessageBatch{TypeNames: []string{"actor.Restart"},
				Targets: []*actor.PID{actor.NewPID(addr, id)}, Envelopes: []*remote.MessageEnvelope{{TypeId: 0, Target: 0}}})
			if err == nil {
				t.Fatalf("the node kept the stream open after a Restart to %s", id)
			}
		}
		h.intact(t)
	})
}

// TestHostileNonMember: Register, Batch, Expire and Broadcast from a node
// that is not a member are refused with a reason, and nothing of them is
// delivered.
func TestHostileNonMember(t *testing.T) {
	h := startHostileTarget(t)
	system := hostilePeer(t)
	addr := h.nodes[0].Addr
	spy := h.nodes[0].Subscribe(t, "hostile", echopubsub.WithMetadata())
	node := system.Address()
	typ, b, _ := messages.Encode(&testpb.Stamp{Publisher: "hostile", Seq: 1})
	bat := &messages.Batch{ProtocolVersion: 1, PubsubName: "scores", ProducerNode: node, ProducerIncarnation: 1}
	bat.AddEntry(&messages.Entry{Topic: "hostile", PayloadType: typ, Payload: b})
	for _, req := range []proto.Message{
		&messages.Register{ProtocolVersion: 1, PubsubName: "scores", ProducerNode: node, ProducerIncarnation: 1},
		bat,
		&messages.Expire{ProtocolVersion: 1, PubsubName: "scores", ProducerNode: node, ProducerIncarnation: 1, Missed: 5, NextCursor: 5},
	} {
		res, err := system.Root.RequestFuture(workerPID(addr), req, 5*time.Second).Result()
		if err != nil {
			t.Fatalf("%T unanswered: %v", req, err)
		}
		var st messages.AckStatus
		var reason string
		switch a := res.(type) {
		case *messages.RegisterAck:
			st, reason = a.Status, a.Error
		case *messages.BatchAck:
			st, reason = a.Status, a.Error
		}
		if st != messages.AckStatus_ACK_STATUS_REJECTED || !strings.Contains(reason, "is not a member") {
			t.Fatalf("%T answered %v %q, want REJECTED: not a member", req, st, reason)
		}
	}
	if reason := barrier(t, system, addr); !strings.Contains(reason, "is not a member") {
		t.Fatalf("a non-member's Broadcast answered %q, want: not a member", reason)
	}
	// A request without a sender cannot be checked (nor answered): dropped.
	// An ack naming a worker node that is no member: dropped.
	reg := payload(t, &messages.Register{ProtocolVersion: 1, PubsubName: "scores", ProducerNode: node, ProducerIncarnation: 1})
	ack := payload(t, &messages.BatchAck{Status: messages.AckStatus_ACK_STATUS_OK, NextCursor: 1 << 40, WorkerNode: "127.0.0.1:1"})
	if err := sendBatch(t, addr, &remote.MessageBatch{
		TypeNames: []string{"echopubsub.v1.Register", "echopubsub.v1.BatchAck"},
		Targets:   []*actor.PID{workerPID(addr), actor.NewPID(addr, "future$1")},
		Envelopes: []*remote.MessageEnvelope{{TypeId: 0, MessageData: reg, Target: 0}, {TypeId: 1, MessageData: ack, Target: 1}},
	}); err != nil {
		t.Fatalf("the node closed the stream: %v", err)
	}
	for _, want := range []string{"dropped a request without a sender", "dropped an ack"} {
		test.Eventually(t, 5*time.Second, func() bool { return h.logs.Contains(want) }, test.Sprintf("the node did not log %q", want))
	}
	h.intact(t)
	if spy.Len() != 0 {
		t.Fatalf("a non-member's messages were delivered: %s", spy.Describe())
	}
}

// TestHostileClaimsOtherNode: a member that claims another node's name in
// its requests is refused; without the check a Register with a new
// incarnation under nodes[1]'s name would tell node 0's subscribers that
// nodes[1]'s producer restarted (a false alarm made from outside).
func TestHostileClaimsOtherNode(t *testing.T) {
	system := hostilePeer(t)
	h := startHostileTarget(t, system.Address())
	addr, victim := h.nodes[0].Addr, h.nodes[1].Addr
	for _, req := range []proto.Message{
		&messages.Register{ProtocolVersion: 1, PubsubName: "scores", ProducerNode: victim, ProducerIncarnation: 7},
		&messages.Batch{ProtocolVersion: 1, PubsubName: "scores", ProducerNode: victim, ProducerIncarnation: 7},
		&messages.Expire{ProtocolVersion: 1, PubsubName: "scores", ProducerNode: victim, ProducerIncarnation: 7, Missed: 3, NextCursor: 3},
	} {
		res, err := system.Root.RequestFuture(workerPID(addr), req, 5*time.Second).Result()
		if err != nil {
			t.Fatalf("%T unanswered: %v", req, err)
		}
		var st messages.AckStatus
		var reason string
		switch a := res.(type) {
		case *messages.RegisterAck:
			st, reason = a.Status, a.Error
		case *messages.BatchAck:
			st, reason = a.Status, a.Error
		}
		if st != messages.AckStatus_ACK_STATUS_REJECTED || !strings.Contains(reason, "claims producer node") {
			t.Fatalf("%T answered %v %q, want REJECTED: claims producer node", req, st, reason)
		}
	}
	h.intact(t)
}

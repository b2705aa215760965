package echopubsub_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// A request from a session on node 0 to a session on node 1, and the reply
// back: both are durable deliveries with a context, acknowledged like any
// other.
func TestRequestReplyAcrossNodes(t *testing.T) {
	nodes := test.StartCluster(t, 2, fastConfig())
	asker := spawnOwner(t, nodes[0], nil)
	askerID := openSession(t, nodes[0], asker, nil)
	// The callee replies from its owner actor, then acks the request.
	var calleeID string
	callee := spawnOwner(t, nodes[1], func(env *echopubsub.Envelope) {
		rc, ok := echopubsub.RequestContextOf(env)
		if !ok || rc.Reply {
			return
		}
		q := env.Event.(*testpb.Stamp)
		if err := nodes[1].PS.Reply(rc.From, env, &testpb.Stamp{Publisher: "answer", Seq: q.Seq * 10}); err != nil {
			t.Errorf("Reply: %v", err)
			return
		}
		if _, err := nodes[1].PS.Ack(env.SessionID, env.DeliveryID); err != nil {
			t.Errorf("Ack of the request: %v", err)
		}
	})
	calleeID = openSession(t, nodes[1], callee, []string{"other"})

	var reqIDs []uint64
	for i := uint64(1); i <= 3; i++ {
		rid, err := nodes[0].PS.RequestFromSession(askerID, calleeID, &testpb.Stamp{Publisher: "question", Seq: i})
		if err != nil {
			t.Fatal(err)
		}
		reqIDs = append(reqIDs, rid)
	}
	waitEnvelopes(t, asker, 3)
	for i, env := range asker.envelopes() {
		rc, ok := echopubsub.RequestContextOf(env)
		if !ok || !rc.Reply || rc.RequestID != reqIDs[i] || rc.From != calleeID || rc.To != askerID {
			t.Fatalf("reply %d context %+v %v (env %+v)", i, rc, ok, env)
		}
		if s := env.Event.(*testpb.Stamp); s.Seq != uint64(i+1)*10 || env.DeliveryID != uint64(i+1) || env.Class != echopubsub.ClassDurable {
			t.Fatalf("reply %d: %+v", i, env)
		}
		if env.Topic != echopubsub.SessionInboxPrefix+askerID {
			t.Fatalf("reply topic %q", env.Topic)
		}
	}
	if p := nodes[0].PS.Pending(askerID); p != 3 {
		t.Fatalf("replies are durable deliveries: pending %d, want 3", p)
	}
	test.Eventually(t, 5*time.Second, func() bool { return nodes[1].PS.Pending(calleeID) == 0 },
		test.Sprintf("the callee acked its requests"))
	reqs := callee.envelopes()
	if len(reqs) != 3 || reqs[0].DeliveryID != 1 {
		t.Fatalf("callee got %s", callee.describe())
	}
	if rc, _ := echopubsub.RequestContextOf(reqs[0]); rc.From != askerID || rc.To != calleeID || rc.Reply {
		t.Fatalf("request context %+v", rc)
	}

	// Errors: an unknown from session, a malformed or closed target, a
	// reply to something that is not a request.
	if _, err := nodes[0].PS.RequestFromSession("nope", calleeID, stamp(1)); !errors.Is(err, echopubsub.ErrUnknownSession) {
		t.Fatalf("unknown from: %v", err)
	}
	if _, err := nodes[0].PS.RequestFromSession(askerID, "garbage", stamp(1)); !errors.Is(err, echopubsub.ErrUnknownSession) {
		t.Fatalf("malformed to: %v", err)
	}
	if _, err := nodes[0].PS.RequestFromSession(askerID, askerID, nil); err == nil {
		t.Fatal("nil event accepted")
	}
	if err := nodes[0].PS.Reply(calleeID, asker.envelopes()[0], stamp(1)); !errors.Is(err, echopubsub.ErrNotRequest) {
		t.Fatalf("Reply to a reply: %v", err)
	}
	if err := nodes[0].PS.Reply(calleeID, nil, stamp(1)); !errors.Is(err, echopubsub.ErrNotRequest) {
		t.Fatalf("Reply to nil: %v", err)
	}
	local := spawnOwner(t, nodes[0], nil)
	localID := openSession(t, nodes[0], local, nil)
	if err := nodes[0].PS.CloseSession(localID); err != nil {
		t.Fatal(err)
	}
	if _, err := nodes[0].PS.RequestFromSession(askerID, localID, stamp(1)); !errors.Is(err, echopubsub.ErrUnknownSession) {
		t.Fatalf("closed local target: %v", err)
	}
}

// A request to a session on the same node takes the same path.
func TestRequestToLocalSessionWithEncodedFormat(t *testing.T) {
	nd := test.StartCluster(t, 1, fastConfig())[0]
	a := spawnOwner(t, nd, nil)
	aID := openSession(t, nd, a, nil)
	b := spawnOwner(t, nd, nil)
	s, err := nd.PS.OpenSession(b.PID, echopubsub.WithDeliveryFormat(echopubsub.FormatEncoded))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nd.PS.RequestFromSession(aID, s.ID(), stamp(7)); err != nil {
		t.Fatal(err)
	}
	waitEnvelopes(t, b, 1)
	env := b.envelopes()[0]
	msg, err := nd.PS.DecodePayload(env)
	if err != nil || env.Event != nil || msg.(*testpb.Stamp).Seq != 7 {
		t.Fatalf("encoded request: %+v, %v, %v", env, msg, err)
	}
	if rc, ok := echopubsub.RequestContextOf(env); !ok || rc.From != aID {
		t.Fatalf("context %v", env.Context)
	}
	if got := fmt.Sprint(nd.PS.Pending(s.ID())); got != "1" {
		t.Fatalf("pending %s", got)
	}
}

package echopubsub_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/anypb"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// TestSessionInboxIsReserved: a session's inbox takes only what the
// library's request/reply path sends. Someone who learned a victim's
// session id (a request carries it) cannot publish a forged reply to
// echopubsub.session/<victim> on any path, cannot subscribe to it, and
// cannot reply in the name of a session that is not open on their node.
func TestSessionInboxIsReserved(t *testing.T) {
	nodes := test.StartCluster(t, 2, fastConfig())
	victim := spawnOwner(t, nodes[0], nil)
	victimID := openSession(t, nodes[0], victim, nil)
	attacker := spawnOwner(t, nodes[1], nil)
	attackerID := openSession(t, nodes[1], attacker, nil)
	ps := nodes[1].PS
	inbox := echopubsub.SessionInboxPrefix + victimID
	forged := &messages.SessionMessage{ProtocolVersion: messages.ProtocolVersion, ToSession: victimID, FromSession: "nobody",
		RequestId: 1, Kind: messages.SessionMessageKind_SESSION_MESSAGE_KIND_REPLY}
	forged.Message, _ = anypb.New(&testpb.Stamp{Publisher: "forged", Seq: 1})
	from := attacker.PID

	for name, call := range map[string]func() error{
		"Broadcast":           func() error { return ps.Broadcast(nil, inbox, forged) },
		"BroadcastContext":    func() error { return ps.BroadcastContext(t.Context(), nil, inbox, forged) },
		"BroadcastFrom":       func() error { return ps.BroadcastFrom(from, inbox, forged) },
		"LocalBroadcast":      func() error { return nodes[0].PS.LocalBroadcast(inbox, forged) },
		"LocalBroadcastFrom":  func() error { return nodes[0].PS.LocalBroadcastFrom(from, inbox, forged) },
		"DirectBroadcast":     func() error { return ps.DirectBroadcast(nodes[0].Addr, inbox, forged) },
		"DirectBroadcastFrom": func() error { return ps.DirectBroadcastFrom(from, nodes[0].Addr, inbox, forged) },
		"Subscribe":           func() error { return nodes[0].PS.Subscribe(from, inbox, echopubsub.WithUnboundedQueue()) },
		"SubscribeNamed":      func() error { return nodes[0].PS.SubscribeNamed("spy", inbox) },
		"SessionSubscribe":    func() error { return nodes[0].PS.SessionSubscribe(attackerID, inbox) },
	} {
		if err := call(); !errors.Is(err, echopubsub.ErrReservedTopic) {
			t.Errorf("%s to %s: %v, want ErrReservedTopic", name, inbox, err)
		}
	}

	// A Broadcast message from an actor (or a peer) to the pubsub's PID.
	payload, _ := anypb.New(forged)
	res, err := nodes[1].System.Root.RequestFuture(ps.PID(), &messages.Broadcast{Topic: inbox, Message: payload}, 5*time.Second).Result()
	if err != nil {
		t.Fatalf("no answer to a Broadcast message: %v", err)
	}
	if r, ok := res.(*messages.BroadcastResult); !ok || !strings.Contains(r.Error, "reserved") {
		t.Errorf("a Broadcast message to a session inbox was answered %+v, want refused as reserved", res)
	}

	// A reply in the name of a session that is not open here.
	made := &echopubsub.Envelope{SessionID: "made-up", Context: map[string]string{
		echopubsub.ContextKind: "request", echopubsub.ContextRequestID: "1"}}
	if err := ps.Reply(victimID, made, &testpb.Stamp{Publisher: "forged", Seq: 2}); !errors.Is(err, echopubsub.ErrUnknownSession) {
		t.Errorf("Reply from a made-up session: %v, want ErrUnknownSession", err)
	}

	// The library's own path still works, and it is all the victim got
	// (every refusal above was synchronous: nothing of them was queued).
	if _, err := ps.RequestFromSession(attackerID, victimID, &testpb.Stamp{Publisher: "honest", Seq: 3}); err != nil {
		t.Fatalf("RequestFromSession: %v", err)
	}
	waitEnvelopes(t, victim, 1)
	envs := victim.envelopes()
	rc, ok := echopubsub.RequestContextOf(envs[0])
	if len(envs) != 1 || !ok || rc.Reply || rc.From != attackerID || envs[0].Event.(*testpb.Stamp).Publisher != "honest" {
		t.Fatalf("the victim got %s, want only the honest request", victim.describe())
	}
}

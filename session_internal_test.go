package echopubsub

import (
	"sync"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/internal/session"
	"github.com/echopubsub/echopubsub/messages"
)

type sentRecorder struct {
	mu   sync.Mutex
	sent []interface{}
}

func (r *sentRecorder) Send(_ *actor.PID, msg interface{}) {
	r.mu.Lock()
	r.sent = append(r.sent, msg)
	r.mu.Unlock()
}
func (r *sentRecorder) Exit(*actor.PID) {}

// The session actor hands a stream's redelivery (a cursor it already
// delivered, same producer incarnation) to nobody: the owner would take it
// for a new delivery. A new incarnation starts over; LocalBroadcast has no
// cursor and is never skipped.
func TestSessionActorSkipsStreamRedeliveries(t *testing.T) {
	out := &sentRecorder{}
	eng := session.New(session.Limits{SoftQueue: 10, HardQueue: 20, MaxReservations: 100, MaxBatchItems: 10}, "n", out, zerolog.Nop(), nil)
	rec := &sessionRec{}
	rec.subs.Store(&map[string]subSpec{"t": {}})
	s, err := eng.Open("id", actor.NewPID("n", "owner"), rec)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig("x")
	ps := &PubSub{cfg: cfg, rt: &core.Runtime{Cfg: cfg.engine()}, sess: &sessions{engine: eng}}
	a := &sessionActor{ps: ps, s: s, rec: rec, inbox: SessionInboxPrefix + "id", seen: map[origin]position{}}
	d := func(node string, inc, cursor uint64, local bool, v string) *messages.Delivery {
		return &messages.Delivery{Node: node, Incarnation: inc, Cursor: cursor, Topic: "t", Local: local, Message: wrapperspb.String(v)}
	}
	for _, m := range []*messages.Delivery{
		d("p", 1, 0, false, "a"), d("p", 1, 1, false, "b"),
		d("p", 1, 1, false, "dup"), d("p", 1, 0, false, "dup"), // redeliveries
		d("q", 1, 0, false, "c"), // another producer
		d("p", 2, 0, false, "d"), // p restarted
		d("p", 2, 0, false, "dup"),
		d("n", 0, 0, true, "e"), d("n", 0, 0, true, "f"), // LocalBroadcast
	} {
		a.deliver(m)
	}
	got := ""
	for _, m := range out.sent {
		env := m.(*Envelope)
		got += env.Event.(*wrapperspb.StringValue).Value
	}
	if got != "abcdef" {
		t.Fatalf("owner got %q, want abcdef", got)
	}
	if eng.Pending("id") != 6 {
		t.Fatalf("pending %d", eng.Pending("id"))
	}
}

// A request or reply whose sending session is not on the node that wrote
// it is forged (a member can only write as itself: the guard proves the
// node, Broadcast refuses inbox topics): the session actor drops it.
func TestSessionActorDropsInboxMessageFromAnotherNodesSession(t *testing.T) {
	out := &sentRecorder{}
	eng := session.New(session.Limits{SoftQueue: 10, HardQueue: 20, MaxReservations: 100, MaxBatchItems: 10}, "n", out, zerolog.Nop(), nil)
	rec := &sessionRec{}
	rec.subs.Store(&map[string]subSpec{})
	id, err := newSessionID("n")
	if err != nil {
		t.Fatal(err)
	}
	s, err := eng.Open(id, actor.NewPID("n", "owner"), rec)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig("x")
	ps := &PubSub{cfg: cfg, rt: &core.Runtime{Cfg: cfg.engine(), Log: zerolog.Nop()}, sess: &sessions{engine: eng}}
	a := &sessionActor{ps: ps, s: s, rec: rec, inbox: SessionInboxPrefix + id, seen: map[origin]position{}}
	onM, _ := newSessionID("m")
	onOther, _ := newSessionID("other")
	reply := func(node string, cursor uint64, from, v string) *messages.Delivery {
		sm := &messages.SessionMessage{ToSession: id, FromSession: from, RequestId: 1, Kind: messages.SessionMessageKind_SESSION_MESSAGE_KIND_REPLY}
		sm.Message, _ = anypb.New(wrapperspb.String(v))
		return &messages.Delivery{Node: node, Incarnation: 1, Cursor: cursor, Topic: a.inbox, Message: sm}
	}
	a.deliver(reply("m", 1, onOther, "forged")) // written by m in the name of a session on other
	a.deliver(reply("m", 2, "garbage", "forged"))
	a.deliver(reply("m", 3, onM, "honest"))
	if len(out.sent) != 1 || out.sent[0].(*Envelope).Event.(*wrapperspb.StringValue).Value != "honest" {
		t.Fatalf("owner got %v, want only the honest reply", out.sent)
	}
}

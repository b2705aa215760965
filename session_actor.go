package echopubsub

import (
	"strconv"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/internal/catchup"
	"github.com/echopubsub/echopubsub/internal/session"
	"github.com/echopubsub/echopubsub/messages"
)

// sessionManager is the parent of this pubsub's session actors, so that
// Stop stops them all. A session actor that panics is restarted by it (its
// state lives in the engine and its sessionRec).
type sessionManager struct{}

type spawnSession struct{ props *actor.Props }

func (m *sessionManager) Receive(ctx actor.Context) {
	if sp, ok := ctx.Message().(*spawnSession); ok {
		ctx.Respond(ctx.Spawn(sp.props))
	}
}

// sessionActor is one session's subscriber. The dispatcher hands it every
// message of the session's topics and inbox (as *messages.Delivery, in
// stream order, under the pubsub's usual back-pressure bound) and every
// CursorExpired and BackPressure notice of this node; it turns deliveries
// into envelopes through the engine (reservation first, then the owner's
// mailbox) and forwards the notices, so a session is told whatever a plain
// subscriber is told; except a CursorExpired that the store tells a session
// whose every subscription follows it (storeTells).
type sessionActor struct {
	ps  *PubSub
	s   *session.Session
	rec *sessionRec
	// inbox is the session's request and reply topic.
	inbox string
	// seen is the last cursor delivered per producer stream: a redelivery
	// of the stream (at-least-once below) is not delivered to the session
	// a second time, as a new delivery id the owner would process again.
	seen map[origin]position
	// held is what waits for the session's room, in order: the envelope the
	// engine held (session.Held), and what this actor took from its mailbox
	// after it (see "Pacing" in package session).
	held []interface{}
	// follows are the session's WithFrom subscriptions (catchup.go), by
	// topic; stepQueued: a catchUpStep is on its way.
	follows    map[string]*follow
	stepQueued bool
	self       *actor.PID
}

// sessionRoom wakes a session actor whose delivery was held: the engine
// made room (or the owner stalled, or the session closed).
type sessionRoom struct{}

// sessionPacer lets session actors wait for room: a held delivery suspends
// the actor's mailbox, so what follows stays there, under the actor's
// back-pressure bound; room resumes it and wakes the actor, which hands
// over what it held before anything newer.
type sessionPacer struct{ system *actor.ActorSystem }

func (p sessionPacer) Hold(s *session.Session) { p.post(s, &actor.SuspendMailbox{}) }

func (p sessionPacer) Room(s *session.Session) {
	if pid := p.post(s, &actor.ResumeMailbox{}); pid != nil {
		p.system.Root.Send(pid, &sessionRoom{})
	}
}

// post sends a system message to s's actor and returns its PID (nil when
// it has none or is gone).
func (p sessionPacer) post(s *session.Session, msg interface{}) *actor.PID {
	pid := s.Attached.(*sessionRec).actor.Load()
	if pid == nil {
		return nil
	}
	proc, ok := p.system.ProcessRegistry.GetLocal(pid.Id)
	if !ok {
		return nil
	}
	proc.SendSystemMessage(pid, msg)
	return pid
}

type origin struct {
	node  string
	group uint32
}

type position struct{ incarnation, cursor uint64 }

func (a *sessionActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.self = ctx.Self()
		ctx.Watch(a.s.Owner())
	case *actor.Stopping:
		a.stopFollowing()
	case *actor.Stopped:
		a.release()
	case *actor.Terminated:
		if m.Who.Equal(a.s.Owner()) {
			a.ps.sess.engine.Close(a.s.ID(), messages.SessionCloseReason_SESSION_CLOSE_REASON_OWNER_STOPPED, "owner stopped")
		}
	case *messages.Delivery:
		a.deliver(m)
	case *messages.CursorExpired:
		if a.storeTells(m) {
			a.readFollows() // the store's rows and gap rows tell it, in order
			return
		}
		a.hand(m)
	case *messages.BackPressure:
		a.hand(m)
	case *sessionRoom:
		a.roomMade()
		a.flush()
	case *catchUpStart:
		if spec, ok := (*a.rec.subs.Load())[m.topic]; ok && spec.catchUp && spec.gen == m.gen {
			a.following(m.topic, spec)
		}
	case *catchUpStep:
		a.step()
	case *catchUpRead:
		a.readFollows()
	case *catchUpHole:
		a.holeStayed(m)
	case *catchUpRetry:
		if m.f.retry != nil {
			m.f.retry = nil
			a.pump()
		}
	}
}

// release drops what the stopped actor refers to. protoactor keeps stale
// references to stopped actors: a *actor.PID caches its process, and the
// session manager's set of children (actor.PIDSet) shrinks its slice
// without clearing the slots it gives up, so a PID there keeps this actor,
// and through it the session, its owner and everything the owner holds (a
// gateway socket and its buffers), reachable long after the session
// closed: in a run with 5,000 gateway sockets, 1,920 stayed in the heap.
// Cut here, what stays is the actor's own small shell, at most one per
// session the node held at its peak.
func (a *sessionActor) release() {
	*a = sessionActor{ps: a.ps}
}

// deliver hands d's envelope on, unless the session does not take it.
func (a *sessionActor) deliver(d *messages.Delivery) {
	env, f, v := a.envelope(d)
	switch {
	case env == nil:
	case f == nil:
		a.hand(env)
	default:
		a.followed(f, env, v)
	}
}

// hand passes one envelope or notice on to the owner, behind what is held.
func (a *sessionActor) hand(item interface{}) {
	if len(a.held) == 0 {
		if !a.pass(item) {
			a.held = append(a.held, item)
		}
		return
	}
	a.held = append(a.held, item)
	a.flush()
}

// flush passes on what is held, in order, until the engine holds one again.
func (a *sessionActor) flush() {
	for i, item := range a.held {
		if !a.pass(item) {
			a.held = a.held[i:]
			return
		}
		a.held[i] = nil
	}
	a.held = a.held[:0]
	a.pump()
}

// pass hands item to the engine; false: held, pass it again after room.
func (a *sessionActor) pass(item interface{}) bool {
	if c, ok := item.(*caught); ok {
		return a.passCaught(c)
	}
	env, ok := item.(*Envelope)
	if !ok {
		a.ps.sess.engine.Notify(a.s, item)
		return true
	}
	return a.ps.sess.engine.Pace(a.s, env.Class == ClassDurable, func(id uint64) interface{} {
		env.DeliveryID = id
		return env
	}) != session.Held
}

// envelope makes d's envelope, or nil when the session does not take it (a
// redelivery, unsubscribed, a malformed request, a row a WithFrom
// subscription gets from the store, a durable message the node's store
// could not take, which a WithFrom subscription gets as a gap row). f is the envelope's WithFrom
// subscription, when it has one and a cursor, and adm what it does with
// the envelope (catchup.Deliver or catchup.Aside).
func (a *sessionActor) envelope(d *messages.Delivery) (env *Envelope, f *follow, v catchup.Verdict) {
	if !d.Local {
		k := origin{d.Node, d.Group}
		if p, ok := a.seen[k]; ok && p.incarnation == d.Incarnation && d.Cursor <= p.cursor {
			return nil, nil, 0 // a redelivery of what this session was already handed
		}
		a.seen[k] = position{d.Incarnation, d.Cursor}
	}
	env = &Envelope{Instance: a.ps.rt.Cfg.Name, SessionID: a.s.ID(), Topic: d.Topic, Traceparent: d.Traceparent, Tracestate: d.Tracestate}
	if sm, ok := d.Message.(*messages.SessionMessage); ok && d.Topic == a.inbox {
		if !a.fromInbox(env, sm, d.Node) {
			return nil, nil, 0
		}
		return env, nil, 0
	}
	spec, ok := (*a.rec.subs.Load())[d.Topic]
	if !ok {
		return nil, nil, 0 // unsubscribed while this was on its way
	}
	if spec.catchUp && d.Unstored {
		// Not in the store this subscription follows (its node's store
		// fails): delivered now, it would come out of cursor order, ahead
		// of rows a reading still owes, and have no cursor to resume
		// after. The gap row that counts it tells the session, in order,
		// once the store takes writes again.
		return nil, nil, 0
	}
	if spec.catchUp && d.StoreCursor != 0 {
		f = a.following(d.Topic, spec)
		if v = a.admit(f, d.StoreCursor); v != catchup.Deliver && v != catchup.Aside {
			return nil, nil, 0
		}
	}
	env.Class, env.Context, env.Cursor = spec.class, spec.context, d.StoreCursor
	a.body(env, d.Message, nil, "")
	return env, f, v
}

// body fills Event, Payload and PayloadType as the session's format asks.
// wire, when not nil, is msg's wire form (typeName, bytes) as it travelled.
func (a *sessionActor) body(env *Envelope, msg proto.Message, wire []byte, typeName string) {
	if u, ok := msg.(*messages.Undecodable); ok {
		wire, typeName = u.Payload, u.PayloadType
	}
	if typeName == "" {
		typeName = string(msg.ProtoReflect().Descriptor().FullName())
	}
	env.PayloadType = typeName
	if a.rec.format != FormatEncoded {
		env.Event = msg
	}
	if a.rec.format != FormatEvent {
		if wire == nil {
			b, err := proto.Marshal(msg)
			if err != nil { // a message that was decoded from the wire marshals again
				a.ps.rt.Log.Error().Err(err).Str("type", typeName).Msg("session: re-encode payload")
			}
			wire = b
		}
		env.Payload = wire
	}
}

// fromInbox fills env from a request or reply; false drops it (not for
// this session).
func (a *sessionActor) fromInbox(env *Envelope, sm *messages.SessionMessage, node string) bool {
	if sm.ToSession != a.s.ID() || sm.Message == nil {
		a.ps.rt.Log.Error().Str("to", sm.ToSession).Msg("session: dropped a malformed request or reply")
		return false
	}
	// The sending session lives on the node whose producer wrote this (the
	// guard proves a peer's node; Broadcast refuses inbox topics): a
	// request or reply naming a session of another node is forged.
	if from, ok := sessionNode(sm.FromSession); !ok || from != node {
		a.ps.rt.Log.Error().Str("from_session", sm.FromSession).Str("peer", node).
			Msg("session: dropped a request or reply whose sending session is not on the node that sent it")
		return false
	}
	kind := "request"
	if sm.Kind == messages.SessionMessageKind_SESSION_MESSAGE_KIND_REPLY {
		kind = "reply"
	}
	env.Class = ClassDurable
	env.Context = make(map[string]string, len(sm.Context)+4)
	for k, v := range sm.Context {
		env.Context[k] = v
	}
	env.Context[ContextKind] = kind
	env.Context[ContextRequestID] = strconv.FormatUint(sm.RequestId, 10)
	env.Context[ContextFromSession] = sm.FromSession
	env.Context[ContextToSession] = sm.ToSession
	typeName := string(sm.Message.MessageName())
	msg, err := messages.Decode(typeName, sm.Message.Value)
	if err != nil {
		msg = &messages.Undecodable{Topic: env.Topic, PayloadType: typeName, Payload: sm.Message.Value, Error: err.Error()}
	}
	a.body(env, msg, sm.Message.Value, typeName)
	return true
}

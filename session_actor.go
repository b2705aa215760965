package echopubsub

import (
	"strconv"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

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
// subscriber is told.
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
}

type origin struct {
	node  string
	group uint32
}

type position struct{ incarnation, cursor uint64 }

func (a *sessionActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		ctx.Watch(a.s.Owner())
	case *actor.Terminated:
		if m.Who.Equal(a.s.Owner()) {
			a.ps.sess.engine.Close(a.s.ID(), messages.SessionCloseReason_SESSION_CLOSE_REASON_OWNER_STOPPED, "owner stopped")
		}
	case *messages.Delivery:
		a.deliver(m)
	case *messages.CursorExpired:
		a.ps.sess.engine.Notify(a.s, m)
	case *messages.BackPressure:
		a.ps.sess.engine.Notify(a.s, m)
	}
}

func (a *sessionActor) deliver(d *messages.Delivery) {
	if !d.Local {
		k := origin{d.Node, d.Group}
		if p, ok := a.seen[k]; ok && p.incarnation == d.Incarnation && d.Cursor <= p.cursor {
			return // a redelivery of what this session was already handed
		}
		a.seen[k] = position{d.Incarnation, d.Cursor}
	}
	env := &Envelope{Instance: a.ps.rt.Cfg.Name, SessionID: a.s.ID(), Topic: d.Topic}
	if sm, ok := d.Message.(*messages.SessionMessage); ok && d.Topic == a.inbox {
		if !a.fromInbox(env, sm) {
			return
		}
	} else {
		spec, ok := (*a.rec.subs.Load())[d.Topic]
		if !ok {
			return // unsubscribed while this was on its way
		}
		env.Class, env.Context = spec.class, spec.context
		a.body(env, d.Message, nil, "")
	}
	a.ps.sess.engine.Deliver(a.s, env.Class == ClassDurable, func(id uint64) interface{} {
		env.DeliveryID = id
		return env
	})
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
func (a *sessionActor) fromInbox(env *Envelope, sm *messages.SessionMessage) bool {
	if sm.ToSession != a.s.ID() || sm.Message == nil {
		a.ps.rt.Log.Error().Str("to", sm.ToSession).Msg("session: dropped a malformed request or reply")
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

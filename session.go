package echopubsub

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/internal/session"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/supervision"
)

// Session errors.
var (
	// ErrUnknownSession: no open session has this id on this node: never
	// opened, closed (CloseSession, hard queue, owner stopped), or it lives
	// on another node (only RequestFromSession and Reply reach those).
	ErrUnknownSession = session.ErrUnknownSession
	// ErrUnknownDelivery: the session holds no reservation with this
	// delivery id: never issued, already acknowledged, or ephemeral.
	ErrUnknownDelivery = session.ErrUnknownDelivery
	// ErrTooManyItems: AckMany got more than Config.MaxBatchItems ids.
	ErrTooManyItems = session.ErrTooManyItems
	// ErrNilOwner: OpenSession needs an owner actor.
	ErrNilOwner = errors.New("echopubsub: session owner PID is nil")
	// ErrOwnerNotRunning: the owner is a local PID no actor answers to.
	ErrOwnerNotRunning = errors.New("echopubsub: session owner is not running")
	// ErrEmptyTopic: a topic must not be empty.
	ErrEmptyTopic = core.ErrEmptyTopic
	// ErrReservedTopic: topics starting with SessionInboxPrefix carry
	// requests and replies: nothing but the library's request/reply path may
	// publish to them, and nobody may subscribe to them.
	ErrReservedTopic = errors.New("echopubsub: topic is reserved for session requests and replies")
	// ErrNotRequest: Reply was given an envelope that is not a request.
	ErrNotRequest = errors.New("echopubsub: envelope is not a request")
)

// Class of a session subscription.
type Class int

const (
	// ClassDurable deliveries take a reservation that the owner acknowledges.
	ClassDurable Class = iota
	// ClassEphemeral deliveries carry an envelope (DeliveryID 0) but no
	// reservation: nothing to ack, not counted against the queues.
	ClassEphemeral
)

func (c Class) String() string {
	if c == ClassEphemeral {
		return "Ephemeral"
	}
	return "Durable"
}

// DeliveryFormat chooses what an Envelope carries (WithDeliveryFormat), or
// what a subscription receives (WithFormat).
type DeliveryFormat int

const (
	// FormatEvent: the decoded message in Envelope.Event (the default).
	FormatEvent DeliveryFormat = iota
	// FormatEncoded: the wire bytes in Envelope.Payload (decode with
	// DecodePayload).
	FormatEncoded
	// FormatBoth: Event and Payload.
	FormatBoth
)

// Envelope is what a session's owner receives for each delivery, as a
// *Envelope. It is built for the owner alone, except Event and Context,
// which may be shared with other sessions: do not modify them.
type Envelope struct {
	// Instance is the pubsub's name (Config.Name).
	Instance  string
	SessionID string
	// DeliveryID identifies a durable delivery within its session: pass it
	// to Ack. Ids start at 1 and increase by one per durable delivery.
	// Ephemeral deliveries have 0.
	DeliveryID uint64
	// Topic is the topic broadcast to; for a request or a reply, the
	// receiving session's inbox topic (SessionInboxPrefix + its id).
	Topic string
	Class Class
	// Context is nil unless the subscription (WithEnvelopeContext) or the send (a
	// request or a reply: see RequestContextOf) supplied a non-empty one.
	Context map[string]string
	// Event is set for FormatEvent and FormatBoth. A payload this node
	// cannot decode arrives as a *messages.Undecodable.
	Event proto.Message
	// Payload is set for FormatEncoded and FormatBoth: the message's protobuf bytes.
	// For a request or a reply they are the bytes the sender encoded; for
	// a broadcast the session re-encodes the message this node decoded
	// (the same message, not necessarily the same bytes), as the node's
	// delivery path does not keep the wire bytes.
	Payload []byte
	// PayloadType is the message's full protobuf name.
	PayloadType string
	// Replayed marks an envelope read from the store (ReplaySession, or a
	// WithFrom catch-up). Cursor is the message's row in this node's
	// store, for every envelope of a durable topic, live or replayed (see
	// "Durable streams" in the package doc); resume after it with
	// WithFrom(Cursor + 1). 0: not stored (not durable, a DirectBroadcast,
	// a request or a reply).
	Replayed bool
	Cursor   uint64
	// Traceparent and Tracestate are the W3C trace context the message was
	// published in, when its publisher traces (WithTracerProvider); "" for
	// one published outside a trace and for a replayed one (the store keeps
	// no trace context). Continue the trace with ContextWithTrace.
	Traceparent, Tracestate string
}

// SessionInboxPrefix starts the topic on which a session receives requests
// and replies. Only RequestFromSession and Reply write to it: Broadcast and
// every other publishing path, Subscribe, SessionSubscribe and a Broadcast
// message from an actor or a peer refuse it with ErrReservedTopic.
const SessionInboxPrefix = core.SessionInboxPrefix

// userTopic checks a topic a user path was given: the input rule
// (core.CheckTopic: ErrEmptyTopic, ErrInvalidTopic), then ErrReservedTopic
// for a session inbox.
func (ps *PubSub) userTopic(topic string) error {
	if err := ps.rt.CheckTopic(topic); err != nil {
		return err
	}
	if core.ReservedTopic(topic) {
		return fmt.Errorf("%w: %q", ErrReservedTopic, topic)
	}
	return nil
}

// Session is an open session's handle. Every operation also takes the id
// alone (ps.Ack(id, ...)), so an id can be handed to code that has no
// handle.
type Session struct{ id string }

// ID is the session id: 128 random bits and the node that holds the
// session, URL-safe ([A-Za-z0-9_-] and one '.').
func (s *Session) ID() string { return s.id }

// SessionOption configures OpenSession.
type SessionOption func(*sessionOptions)

type sessionOptions struct {
	format   DeliveryFormat
	identity string // WithIdentity (session_identity.go)
	handoff  bool   // WithHandoff
}

// WithHandoff is for an owner that is not the consumer of its envelopes
// but hands them on to one, through a queue of its own (the gateway: a
// socket's outbound queue and writer), and reports with PubSub.Handed each
// envelope the consumer was given. The session's RoomWait clock (see
// SessionConfig.RoomWait) then counts only time after every envelope it
// issued was handed on: time an envelope waits in the owner's own queue,
// or in a slow write, is the server's and never makes a consumer that acks
// promptly look stalled. An owner that opens with WithHandoff and never
// calls Handed is never found stalled: its deliveries wait at SoftQueue,
// and what follows them is bounded by MaxQueueLen (dropped newest, with a
// BackPressure notice). Defaults to off: an envelope counts as the
// consumer's once it is in the owner's mailbox.
func WithHandoff() SessionOption { return func(o *sessionOptions) { o.handoff = true } }

// WithDeliveryFormat chooses what the session's envelopes carry. Defaults to
// Event.
func WithDeliveryFormat(f DeliveryFormat) SessionOption {
	return func(o *sessionOptions) { o.format = f }
}

// SessionSubscribeOption configures SessionSubscribe.
type SessionSubscribeOption func(*subSpec)

// WithEnvelopeContext attaches ctx (copied) to every envelope of the subscription.
// Defaults to none (Envelope.Context nil).
func WithEnvelopeContext(ctx map[string]string) SessionSubscribeOption {
	return func(s *subSpec) {
		s.context = nil
		if len(ctx) > 0 {
			s.context = make(map[string]string, len(ctx))
			for k, v := range ctx {
				s.context[k] = v
			}
		}
	}
}

// WithClass sets the subscription's class. Defaults to Durable.
func WithClass(c Class) SessionSubscribeOption { return func(s *subSpec) { s.class = c } }

// WithFrom makes a durable subscription start in the stream's past: the
// session receives the stream's stored rows from cursor on (0 or 1: the
// stream's start; an envelope's Cursor + 1 resumes after it), then the live
// stream, in cursor order, with no gap and no duplicate at the handover,
// whatever is published meanwhile. Rows read from the store are marked
// Replayed. Each is a durable delivery paced as a live one is: at
// SoftQueue the catch-up waits for acks, and an owner that acks nothing
// for RoomWait (one that acks in groups) gets one more row per RoomWait,
// never up to HardQueue: a catch-up never closes a session. With RoomWait
// 0 a row that would take the session above SoftQueue stays in the store,
// the session's other topics go on, and the catch-up goes on from that row
// when acks bring pending down to SoftQueue/2: either way it goes at the
// owner's pace. With the node's reservation table full the catch-up
// pauses and retries from the same row. Nothing is skipped. Gap rows
// arrive as *StreamGap, rows no longer kept (WithRetention) as one
// *StreamTruncated. At the handover the session gets one *CaughtUp
// (after the last row read from the store, before the first live
// envelope; its Cursor is that last row's): from there on it is live.
// A message the node's store could not take (a failing node-local
// store) is not delivered: its gap row tells the session, in order, once
// the store takes writes again (docs/operations.md, "A failing store").
// A DirectBroadcast to the topic, which is not stored,
// is delivered as it comes (Cursor 0). A session whose every subscription
// is WithFrom is not sent the node's *messages.CursorExpired when its
// store holds what the node missed: it reads the store at once and gets
// the rows, or the gap row's *StreamGap (with the same range); it is sent
// the notice when the store cannot tell it (docs/operations.md, "A
// WithFrom session is told by its store"). Subscribing again with WithFrom
// starts the catch-up again from the new cursor; without it, only the
// other options change and the subscription goes on from where it is.
//
// SessionSubscribe refuses WithFrom for a topic that is not durable
// (ErrNoStore), a class other than ClassDurable, a session the authorizer
// refuses (ErrUnauthorized) and a cursor past the stream's end
// (ErrCursorBeyondEnd). Defaults to live only (no catch-up).
func WithFrom(cursor uint64) SessionSubscribeOption {
	return func(s *subSpec) { s.from, s.catchUp = cursor, true }
}

type subSpec struct {
	class   Class
	context map[string]string
	// WithFrom: catch up from the store's cursor from before live; gen
	// tells this subscription from an earlier one (followGen).
	catchUp bool
	from    uint64
	gen     uint64
	// WithConsumer: the name given, and once placed its ack tracking
	// (consumer.go), shared by every copy of the spec.
	consumer    string
	consumerSet bool
	track       *consumerTrack
}

// sessions is the session side of one PubSub.
type sessions struct {
	engine   *session.Engine
	manager  *actor.PID
	requests atomic.Uint64
}

// sessionRec is the root package's per-session state (session.Attached).
type sessionRec struct {
	format DeliveryFormat
	actor  atomic.Pointer[actor.PID]
	subMu  sync.Mutex                         // serialises SessionSubscribe/Unsubscribe
	subs   atomic.Pointer[map[string]subSpec] // copy on write; read by the session's actor

	identity string // WithIdentity; read by SessionIdentity
}

// rootSender sends through the actor system's root context.
type rootSender struct{ system *actor.ActorSystem }

func (r rootSender) Send(pid *actor.PID, msg interface{}) { r.system.Root.Send(pid, msg) }
func (r rootSender) Exit(pid *actor.PID)                  { r.system.Root.Poison(pid) }

// startSessions spawns the parent of the session actors. Called by Start
// once the tree answers.
func (ps *PubSub) startSessions() error {
	cfg := ps.cfg
	lim := session.Limits{SoftQueue: cfg.SoftQueue, HardQueue: cfg.HardQueue, Action: session.Disconnect,
		MaxReservations: int64(cfg.MaxDeliveryReservations), MaxBatchItems: cfg.MaxBatchItems, Wait: cfg.RoomWait,
		StallAfter: cfg.StallAfter}
	if cfg.SlowConsumerAction == SlowConsumerExitOwner {
		lim.Action = session.ExitOwner
	}
	system := ps.rt.System
	eng := session.New(lim, ps.rt.Node, rootSender{system}, ps.rt.Log.With().Str("component", "sessions").Logger(),
		func(s *session.Session) {
			ps.releaseConsumers(s.Attached.(*sessionRec))
			if pid := s.Attached.(*sessionRec).actor.Load(); pid != nil {
				system.Root.Stop(pid) // the registry drops its subscriptions when it terminates
			}
		})
	eng.SetPacer(sessionPacer{system})
	eng.SetStallNotice(stallNotice(ps.rt.Node))
	mgr, err := system.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return &sessionManager{} },
		supervision.IgnorePoisonPill()), sessionManagerName(cfg.Name))
	if err != nil {
		return err
	}
	ps.sess = &sessions{engine: eng, manager: mgr}
	return nil
}

// sessionManagerName is outside the tree's "echopubsub/<name>" space, so no
// pubsub's name can collide with it.
func sessionManagerName(pubsub string) string { return "echopubsub-sessions/" + pubsub }

// stopSessions tells every owner its session closed, then stops the
// session actors. Called by Stop.
func (ps *PubSub) stopSessions() error {
	ps.sess.engine.CloseAll(messages.SessionCloseReason_SESSION_CLOSE_REASON_PUBSUB_STOPPED, "pubsub stopped")
	return ps.rt.System.Root.StopFuture(ps.sess.manager).Wait()
}

// OpenSession opens an acknowledged session delivering to owner, a local
// actor with any mailbox. The owner receives *Envelope for each delivery,
// *messages.SessionPressure, *messages.SessionClosed, *SessionStalled and
// *SessionResumed notices, and the
// pubsub's *messages.CursorExpired and *messages.BackPressure notices
// (a CursorExpired only when the session does not follow all its topics
// WithFrom from a store that holds what was missed: see WithFrom). The
// session closes when the owner stops.
func (ps *PubSub) OpenSession(owner *actor.PID, opts ...SessionOption) (*Session, error) {
	switch {
	case owner == nil:
		return nil, ErrNilOwner
	case owner.Address != ps.rt.Node:
		return nil, fmt.Errorf("%w: session owner %s (this node is %s)", ErrNotLocal, owner, ps.rt.Node)
	case ps.stopped():
		return nil, ErrStopped
	}
	if _, ok := ps.rt.System.ProcessRegistry.GetLocal(owner.Id); !ok {
		return nil, fmt.Errorf("%w: %s", ErrOwnerNotRunning, owner)
	}
	var o sessionOptions
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("echopubsub: session option %d is nil", i)
		}
		opt(&o)
	}
	if o.format < FormatEvent || o.format > FormatBoth {
		return nil, fmt.Errorf("echopubsub: DeliveryFormat must be FormatEvent, FormatEncoded or FormatBoth, got %d", int(o.format))
	}
	id, err := newSessionID(ps.rt.Node)
	if err != nil {
		return nil, err
	}
	rec := &sessionRec{format: o.format, identity: o.identity}
	rec.subs.Store(&map[string]subSpec{})
	s, err := ps.sess.engine.Open(id, owner, rec)
	if err != nil {
		return nil, err
	}
	if o.handoff {
		ps.sess.engine.Handoff(s)
	}
	pid, err := ps.spawnSessionActor(s, rec)
	if err == nil {
		rec.actor.Store(pid)
		if ps.sess.engine.Get(id) == nil { // closed meanwhile (Stop): onClose saw no actor
			ps.rt.System.Root.Stop(pid)
			return nil, ErrStopped
		}
		err = ps.subscribe(pid, SessionInboxPrefix+id, WithMetadata())
	}
	if err != nil {
		ps.sess.engine.Close(id, messages.SessionCloseReason_SESSION_CLOSE_REASON_CLOSED, "open failed")
		return nil, fmt.Errorf("echopubsub: open session: %w", err)
	}
	return &Session{id: id}, nil
}

func (ps *PubSub) spawnSessionActor(s *session.Session, rec *sessionRec) (*actor.PID, error) {
	a := &sessionActor{ps: ps, s: s, rec: rec, inbox: SessionInboxPrefix + s.ID(), seen: map[origin]position{},
		follows: map[string]*follow{}}
	props := actor.PropsFromProducer(func() actor.Actor { return a }, actor.WithMailbox(SubscriberMailbox()),
		supervision.IgnorePoisonPill())
	res, err := ps.rt.System.Root.RequestFuture(ps.sess.manager, &spawnSession{props: props}, ps.rt.Cfg.CallTimeout).Result()
	if err != nil {
		return nil, err
	}
	pid, ok := res.(*actor.PID)
	if !ok {
		return nil, fmt.Errorf("session manager answered %T", res)
	}
	return pid, nil
}

// newSessionID returns base64url(node) "." base64url(16 random bytes).
func newSessionID(node string) (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("echopubsub: session id: %w", err)
	}
	enc := base64.RawURLEncoding
	return enc.EncodeToString([]byte(node)) + "." + enc.EncodeToString(b[:]), nil
}

// sessionNode returns the node an id names, or false for a malformed id:
// one that newSessionID did not make (both parts base64url, so an id that
// passes is ASCII, safe to use in an inbox topic).
func sessionNode(id string) (string, bool) {
	i := strings.IndexByte(id, '.')
	if i <= 0 || len(id)-i-1 != 22 {
		return "", false
	}
	if _, err := base64.RawURLEncoding.DecodeString(id[i+1:]); err != nil {
		return "", false
	}
	node, err := base64.RawURLEncoding.DecodeString(id[:i])
	if err != nil || len(node) == 0 {
		return "", false
	}
	return string(node), true
}

func (ps *PubSub) session(id string) (*session.Session, *sessionRec, error) {
	if ps.stopped() {
		return nil, nil, ErrStopped
	}
	s := ps.sess.engine.Get(id)
	if s == nil {
		return nil, nil, session.UnknownSession(id)
	}
	return s, s.Attached.(*sessionRec), nil
}

// SessionSubscribe makes session id receive every message broadcast on
// topic (from any node), as envelopes. Subscribing again to the same topic
// only replaces its options (and WithFrom starts a catch-up again).
// Errors: ErrEmptyTopic, ErrInvalidTopic, ErrReservedTopic, ErrUnknownSession, and for
// WithFrom ErrNoStore, ErrUnauthorized, ErrCursorBeyondEnd and the store's.
func (ps *PubSub) SessionSubscribe(id, topic string, opts ...SessionSubscribeOption) (err error) {
	if err = ps.userTopic(topic); err != nil {
		return err
	}
	var spec subSpec
	for i, opt := range opts {
		if opt == nil {
			return fmt.Errorf("echopubsub: session subscribe option %d is nil", i)
		}
		opt(&spec)
	}
	if spec.class != ClassDurable && spec.class != ClassEphemeral {
		return fmt.Errorf("echopubsub: Class must be Durable or Ephemeral, got %d", int(spec.class))
	}
	rec, old, err := ps.lockSubs(id)
	if err != nil {
		return err
	}
	defer rec.subMu.Unlock()
	prev, already := old[topic]
	placed, err := ps.subscribeConsumer(id, topic, &spec, prev, already)
	if err != nil {
		return err
	}
	if placed { // a new claim: released unless the subscription is made
		defer func() {
			if err != nil {
				ps.cons.release(spec.track)
			}
		}()
	}
	if spec.catchUp {
		if err = ps.checkFrom(id, topic, spec); err != nil {
			return err
		}
		spec.gen = followGen.Add(1)
	}
	if already && prev.catchUp && !spec.catchUp {
		// New options for a WithFrom subscription: it goes on from where
		// it is (what it holds back waits for its turn, not dropped).
		if spec.class != ClassDurable {
			return fmt.Errorf("echopubsub: %q is a WithFrom subscription: it stays ClassDurable, got %s", topic, spec.class)
		}
		spec.catchUp, spec.from, spec.gen = true, prev.from, prev.gen
	}
	next := maps.Clone(old)
	if next == nil {
		next = map[string]subSpec{}
	}
	next[topic] = spec
	rec.subs.Store(&next) // before subscribing: the first delivery finds its options
	if !already {
		if err = ps.Subscribe(rec.actor.Load(), topic, WithMetadata()); err != nil {
			rec.subs.Store(&old)
			return err
		}
	}
	if already && prev.track != nil && prev.track != spec.track { // WithConsumer (a name) replaced by a plain subscription
		ps.cons.release(prev.track)
	}
	if spec.catchUp { // the catch-up starts now, even if nothing is published
		ps.rt.System.Root.Send(rec.actor.Load(), &catchUpStart{topic: topic, gen: spec.gen})
	}
	return nil
}

// checkFrom refuses a WithFrom subscription that cannot catch up: the
// topic is not durable, the class is not Durable (a catch-up paces on
// reservations), the session may not read the stream (WithAuthorizer), or
// the cursor is past the stream's end (not one this store handed out).
func (ps *PubSub) checkFrom(id, topic string, spec subSpec) error {
	if spec.class != ClassDurable {
		return fmt.Errorf("echopubsub: WithFrom needs ClassDurable (a catch-up waits on acks), got %s", spec.class)
	}
	if _, _, err := ps.session(id); err != nil {
		return err
	}
	if !ps.dur.IsDurable(topic) {
		return fmt.Errorf("%w: WithFrom on %q", ErrNoStore, topic)
	}
	if auth := ps.dur.Authorize; auth != nil {
		if err := auth(id, topic); err != nil {
			return fmt.Errorf("%w: session %s, stream %q: %w", ErrUnauthorized, id, topic, err)
		}
	}
	ctx, cancel := ps.dur.Ctx()
	defer cancel()
	if _, _, err := ps.dur.Store.Read(ctx, topic, spec.from, 1); err != nil {
		return fmt.Errorf("echopubsub: WithFrom(%d) on %q: %w", spec.from, topic, err)
	}
	return nil
}

// SessionUnsubscribe stops topic's deliveries to session id. Unsubscribing
// from a topic the session is not subscribed to does nothing.
func (ps *PubSub) SessionUnsubscribe(id, topic string) error {
	if topic == "" {
		return ErrEmptyTopic
	}
	rec, old, err := ps.lockSubs(id)
	if err != nil {
		return err
	}
	defer rec.subMu.Unlock()
	if _, ok := old[topic]; !ok {
		return nil
	}
	if err := ps.Unsubscribe(rec.actor.Load(), topic); err != nil {
		return err
	}
	next := maps.Clone(old)
	delete(next, topic)
	rec.subs.Store(&next)
	if t := old[topic].track; t != nil {
		ps.cons.release(t)
	}
	return nil
}

// lockSubs returns session id's record with its subscription lock held (the
// caller unlocks rec.subMu) and its current subscription table, which the
// caller replaces, never modifies.
func (ps *PubSub) lockSubs(id string) (*sessionRec, map[string]subSpec, error) {
	_, rec, err := ps.session(id)
	if err != nil {
		return nil, nil, err
	}
	rec.subMu.Lock()
	return rec, *rec.subs.Load(), nil
}

// CloseSession closes session id: its reservations are released, its owner
// gets a *messages.SessionClosed (reason CLOSED), nothing more is delivered
// and later calls with id fail with ErrUnknownSession.
func (ps *PubSub) CloseSession(id string) error {
	if ps.stopped() {
		return ErrStopped
	}
	if !ps.sess.engine.Close(id, messages.SessionCloseReason_SESSION_CLOSE_REASON_CLOSED, "CloseSession") {
		return session.UnknownSession(id)
	}
	return nil
}

// Ack acknowledges (releases) one delivery of session id and returns the
// session's new pending count. A delivery id that the session does not hold
// (never issued, already acknowledged, ephemeral) is ErrUnknownDelivery and
// changes nothing. Ack the delivery after the work it stands for committed.
// It does not allocate.
func (ps *PubSub) Ack(id string, deliveryID uint64) (int, error) {
	pending, err := ps.sess.engine.Ack(id, deliveryID)
	if err == nil && ps.cons.any() {
		ps.consumerAcked(id, deliveryID)
	}
	return pending, err
}

// Handed tells session id (opened WithHandoff) that its owner handed the
// envelopes up to deliveryID on to their consumer (a socket's writer wrote
// them): from then on, their wait for an ack is the consumer's. Reports
// only move forward; an older one changes nothing. A delivery id the
// session never issued is ErrUnknownDelivery, an unknown session
// ErrUnknownSession. It does not allocate (except on an error).
func (ps *PubSub) Handed(id string, deliveryID uint64) error {
	return ps.sess.engine.Handed(id, deliveryID)
}

// AckManyResult is AckMany's answer.
type AckManyResult struct {
	// Acked is the number of reservations released.
	Acked int
	// Unknown lists the ids the session did not hold, in the given order.
	Unknown []uint64
	// Pending is the session's pending count afterwards.
	Pending int
}

// AckMany acknowledges up to Config.MaxBatchItems deliveries of session id
// (more is ErrTooManyItems, and nothing is released). Ids the session does
// not hold are listed in Unknown; they do not fail the call.
func (ps *PubSub) AckMany(id string, ids []uint64) (AckManyResult, error) {
	acked, unknown, pending, err := ps.sess.engine.AckMany(id, ids, nil)
	if err == nil && acked > 0 && ps.cons.any() {
		for _, d := range ids { // an unknown id changes nothing in a consumer
			ps.consumerAcked(id, d)
		}
	}
	return AckManyResult{Acked: acked, Unknown: unknown, Pending: pending}, err
}

// AckFirst acknowledges the session's oldest outstanding delivery and
// returns the new pending count; (0, nil) when none is outstanding. Prefer
// Ack with the envelope's DeliveryID: it names what was committed.
func (ps *PubSub) AckFirst(id string) (int, error) {
	pending, released, err := ps.sess.engine.AckFirstID(id)
	if err == nil && released != 0 && ps.cons.any() {
		ps.consumerAcked(id, released)
	}
	return pending, err
}

// Pending is session id's count of delivered, unacknowledged durable
// deliveries: the library's own counter. 0 for an unknown session or a
// stopped pubsub.
func (ps *PubSub) Pending(id string) int { return ps.sess.engine.Pending(id) }

// DecodePayload decodes an envelope's Payload (FormatEncoded or
// FormatBoth) back into its message.
func (ps *PubSub) DecodePayload(env *Envelope) (proto.Message, error) {
	if env == nil {
		return nil, fmt.Errorf("echopubsub: DecodePayload got a nil envelope")
	}
	if env.PayloadType == "" || (env.Payload == nil && env.Event != nil) {
		return nil, fmt.Errorf("echopubsub: envelope %d of session has no payload (DeliveryFormat Event)", env.DeliveryID)
	}
	return messages.Decode(env.PayloadType, env.Payload)
}

// stopped reports whether the pubsub can no longer deliver (Stop, or its tree
// died: see Err).
func (ps *PubSub) stopped() bool { return ps.rt.Err() != nil }

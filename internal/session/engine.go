// Package session is the engine of acknowledged sessions: the node-wide
// reservation table, each session's pending counter, the soft and hard
// queues and the slow-consumer action. It is the one place that decides
// session pressure (docs/architecture.md, "Where each rule lives"). It
// holds no actor: the public API (OpenSession, Ack, ...) is in the root
// package, which feeds the engine from one forwarding actor per session.
//
// # Reservations
//
// A durable delivery takes a reservation {session, delivery id} and only
// then hands the envelope to the owner's mailbox: Deliver inserts it and
// calls send while holding the session's lock, so an Ack can never find the
// envelope before its reservation. A session's pending count is the number
// of its reservations: the engine's own counter, never a mailbox length.
// Delivery ids start at 1 and increase by one per durable delivery of a
// session; an ephemeral delivery has id 0 and no reservation.
//
// # Limits, in the order Deliver applies them
//
//	pending + 1 > HardQueue           rolled back; the session is closed
//	                                  (SessionClosed HARD_QUEUE), and with
//	                                  ExitOwner its owner is stopped
//	table at MaxReservations          refused, not sent; RESERVATIONS_FULL
//	                                  once, RESERVATIONS_RESUMED before the
//	                                  next delivery that is accepted
//	pending > SoftQueue               delivered; SOFT_QUEUE_EXCEEDED once,
//	                                  SOFT_QUEUE_RELIEVED when an ack brings
//	                                  it back to SoftQueue or below
//
// # Pacing
//
// A node that was cut off gets what it missed as a backlog: its worker
// hands the node's subscribers thousands of messages in a few
// milliseconds, and a session's actor would turn them all into envelopes
// before the owner runs once. Counted as pending, an owner that
// acknowledges each envelope as it arrives would be closed at HardQueue
// for how the backlog was handed over, not for being slow. So a live
// durable delivery goes through Pace, which hands it over only while the
// session has room: pending below SoftQueue. Without room it is held
// (Held): nothing is reserved or sent, and the session's actor waits, with
// what follows it left in the actor's own mailbox, where the pubsub's
// usual back-pressure bound (MaxQueueLen, drop-newest with a BackPressure
// notice) applies as for any subscriber. Acks make room: once pending is
// down to SoftQueue/2 the engine tells the actor (Pacer.Room), which hands
// the held delivery and the rest over, in order, until the session is out
// of room again. Nothing is dropped by pacing, and nothing else waits for
// it: the worker, the node's stream and the other subscribers never do.
//
// An owner that acknowledges nothing for Limits.Wait while a delivery is
// held is not keeping up: the engine tells the actor (Room) and marks the
// session stalled, and until the owner's next ack its deliveries go
// without waiting, under Deliver's rules (SOFT_QUEUE_EXCEEDED, and at
// HardQueue SlowConsumerAction). So HardQueue still closes a consumer that
// stopped; one that acknowledges at least once per Wait is held at
// SoftQueue and never reaches it (if it keeps falling behind, its queue
// reaches MaxQueueLen and it is dropped for, and told, as a plain
// subscriber is). The clock measures Wait with no ack: an ack while a
// delivery is held restarts it (checked when it runs out, so a stall
// comes between Wait and 2*Wait after the last ack).
//
// An owner that is not the consumer but hands the envelopes on to one (the
// gateway: a socket's outbound queue, then its writer) marks its session
// Handoff and reports with Handed each delivery its consumer was given.
// Its clock then runs only while everything the session issued was handed
// on: time a delivery spends in the owner's own queue, or in a slow write,
// is the server's and never counts against the consumer.
//
// # Concurrency
//
// Engine and Session methods are safe for concurrent use. The session table
// is guarded by an RWMutex (Ack takes the read lock for one map lookup);
// each session's state by its own mutex, which is also held while its
// notices and envelopes are sent, so the owner sees notices in the order of
// the transitions they describe. The two locks are never held together.
//
// Cost: an Ack is a read-locked map lookup, a locked map delete and an
// atomic add; it does not allocate (except on an error, a soft-queue
// transition, which sends a notice, or the ack that ends a wait for room).
package session

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/messages"
)

// Errors.
var (
	// ErrUnknownSession: no open session has this id on this node (never
	// opened, closed, or the pubsub stopped).
	ErrUnknownSession = errors.New("echopubsub: unknown session")
	// ErrUnknownDelivery: the session holds no reservation with this id
	// (never issued, already acknowledged, or ephemeral).
	ErrUnknownDelivery = errors.New("echopubsub: unknown delivery")
	// ErrTooManyItems: an AckMany over MaxBatchItems ids.
	ErrTooManyItems = errors.New("echopubsub: too many items")
	// ErrEngineClosed: the engine was closed (its pubsub stopped). It is
	// the pubsub's ErrStopped.
	ErrEngineClosed = core.ErrStopped
)

// UnknownSession is ErrUnknownSession naming id (quoted, cut at 64 bytes:
// an id can come from a client).
func UnknownSession(id string) error {
	return fmt.Errorf("%w %.64q", ErrUnknownSession, id)
}

// Action is the slow-consumer action.
type Action int

const (
	// Disconnect closes the session.
	Disconnect Action = iota
	// ExitOwner closes the session and stops its owner.
	ExitOwner
)

// Limits are the engine's settings (the root package fills them from its
// Config, which validates them).
type Limits struct {
	SoftQueue       int
	HardQueue       int
	Action          Action
	MaxReservations int64
	MaxBatchItems   int
	// Wait is how long a held live delivery waits for room while the owner
	// acknowledges nothing (see Pacing); 0: deliveries are never held.
	Wait time.Duration
	// StallAfter is how long a session may hold deliveries without an ack
	// before it is reported stalled (stall.go); 0: never reported.
	StallAfter time.Duration
}

// Sender delivers to actors. The root package passes the actor system's
// root context; tests pass a recorder.
type Sender interface {
	Send(pid *actor.PID, msg interface{})
	// Exit stops pid once it has handled what is already in its mailbox
	// (a PoisonPill), so an owner stopped by ExitOwner still reads its
	// SessionClosed notice last.
	Exit(pid *actor.PID)
}

// Engine holds the sessions of one pubsub on one node.
type Engine struct {
	lim  Limits
	node string
	out  Sender
	log  zerolog.Logger
	// onClose runs once per closed session, outside every lock, after the
	// session left the table (the root package stops its actor there).
	onClose func(*Session)

	reserved atomic.Int64 // reservations held by every session together
	closed   atomic.Bool
	m        *core.Metrics // set by SetMetrics before the first session; nil: not counted
	pacer    Pacer         // set by SetPacer before the first session; nil: no pacing

	stallNotice StallNotice  // set by SetStallNotice before the first session; nil: stalls not watched
	stalledN    atomic.Int64 // sessions stalled now (stall.go)

	mu       sync.RWMutex
	sessions map[string]*Session
}

// New returns an engine. onClose may be nil.
func New(lim Limits, node string, out Sender, log zerolog.Logger, onClose func(*Session)) *Engine {
	if onClose == nil {
		onClose = func(*Session) {}
	}
	return &Engine{lim: lim, node: node, out: out, log: log, onClose: onClose, sessions: map[string]*Session{}}
}

// SetMetrics makes e count its slow-consumer actions, SessionPressure
// notices and refusals on m, and report its pending reservations and
// stalled sessions there.
// Call it before the first session opens.
func (e *Engine) SetMetrics(m *core.Metrics) {
	e.m = m
	m.ObserveReservations(e.reserved.Load)
	m.ObserveStalledSessions(e.stalledN.Load)
}

// Session is one open (or closed) session.
type Session struct {
	id    string
	owner *actor.PID
	// Attached is the root package's per-session state, set at Open.
	Attached interface{}

	mu       sync.Mutex
	open     bool
	next     uint64              // next delivery id
	res      map[uint64]struct{} // reservations; len(res) is the pending count
	first    uint64              // no reservation has an id below first
	pressure bool                // above SoftQueue (notice sent)
	full     bool                // refused for a full table (notice sent)
	refused  uint64              // refused since full
	waiting  bool                // a delivery is held for room (Pace); endWait or stall ends it
	stalled  bool                // Wait passed with no ack: not held until the next ack
	wait     *time.Timer         // the running clock of a wait; nil: not waiting, or stopped (Handoff)
	clock    uint64              // the clock's generation: a timer of an older one is ignored
	acks     uint64              // releases so far
	ackMark  uint64              // acks when the clock started: one since restarts it
	handoff  bool                // the owner reports what it handed on (Handed)
	handed   uint64              // the highest delivery id reported handed on
	// roomWanted: a catch-up row was NoRoom (Catch): Room once acks make
	// room, as for a held delivery, but with no stall timer.
	roomWanted bool
	// Stalled sessions (stall.go): quiet is when the session last acked or
	// its pending count last became non-zero (core.Monotonic); watch
	// checks it (watching: armed); idle: reported stalled.
	quiet    int64
	watch    *time.Timer
	watching bool
	idle     bool
	heldOn   int // Handoff: pending deliveries already handed on to the consumer
}

// ID is the session's id.
func (s *Session) ID() string { return s.id }

// Owner is the actor the session delivers to.
func (s *Session) Owner() *actor.PID { return s.owner }

// Open registers a session under id (the caller makes it unguessable).
func (e *Engine) Open(id string, owner *actor.PID, attached interface{}) (*Session, error) {
	s := &Session{id: id, owner: owner, Attached: attached, open: true, next: 1, first: 1, res: map[uint64]struct{}{}}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Load() {
		return nil, ErrEngineClosed
	}
	if _, dup := e.sessions[id]; dup {
		return nil, fmt.Errorf("echopubsub: session id %q already open", id)
	}
	e.sessions[id] = s
	return s, nil
}

// Get returns the open session id, or nil.
func (e *Engine) Get(id string) *Session {
	e.mu.RLock()
	s := e.sessions[id]
	e.mu.RUnlock()
	return s
}

// Reserved is the number of reservations held on this node.
func (e *Engine) Reserved() int64 { return e.reserved.Load() }

// Outcome of a Deliver.
type Outcome int

const (
	// Delivered: sent to the owner (durable: with a reservation).
	Delivered Outcome = iota
	// Refused: the reservation table is full; not sent (the session was
	// told, once per transition).
	Refused
	// ClosedHardQueue: the delivery would have exceeded HardQueue: not
	// sent, and the session is now closed.
	ClosedHardQueue
	// NotOpen: the session is closed; not sent.
	NotOpen
)

// Deliver hands one delivery to s's owner. For a durable delivery it
// reserves the next delivery id first; build makes the message to send
// from that id (0 for an ephemeral one). build and the send run under the
// session's lock: build must not call back into the engine.
func (e *Engine) Deliver(s *Session, durable bool, build func(deliveryID uint64) interface{}) Outcome {
	return e.deliver(s, durable, false, build)
}

// deliver is Deliver, and with paced Pace (see pace.go).
func (e *Engine) deliver(s *Session, durable, paced bool, build func(deliveryID uint64) interface{}) Outcome {
	s.mu.Lock()
	if !s.open {
		s.mu.Unlock()
		return NotOpen
	}
	if durable && paced && e.hold(s) {
		s.mu.Unlock()
		return Held
	}
	if !durable {
		e.out.Send(s.owner, build(0))
		s.mu.Unlock()
		return Delivered
	}
	if len(s.res)+1 > e.lim.HardQueue {
		// The reservation is never inserted (rolled back before it exists).
		closed := e.closeLocked(s, messages.SessionCloseReason_SESSION_CLOSE_REASON_HARD_QUEUE,
			fmt.Sprintf("pending would exceed HardQueue %d", e.lim.HardQueue))
		s.mu.Unlock()
		e.m.SlowConsumerAction(e.lim.Action == ExitOwner)
		e.finishClose(s, closed, e.lim.Action == ExitOwner)
		return ClosedHardQueue
	}
	e.watchDelivery(s)
	id, ok := e.reserve(s)
	if !ok {
		s.mu.Unlock()
		return Refused
	}
	if !s.pressure && len(s.res) > e.lim.SoftQueue {
		s.pressure = true
		e.pressure(s, messages.SessionPressureState_SESSION_PRESSURE_STATE_SOFT_QUEUE_EXCEEDED)
	}
	e.out.Send(s.owner, build(id))
	s.mu.Unlock()
	return Delivered
}

// reserve takes the next delivery id of s and a place in the node-wide
// table, or refuses when the table is full (the session is told
// RESERVATIONS_FULL once, and RESERVATIONS_RESUMED with the next reservation
// that fits). Caller holds s.mu.
func (e *Engine) reserve(s *Session) (uint64, bool) {
	if e.reserved.Add(1) > e.lim.MaxReservations {
		e.reserved.Add(-1)
		s.refused++
		e.m.SessionRefused()
		if !s.full {
			s.full = true
			e.pressure(s, messages.SessionPressureState_SESSION_PRESSURE_STATE_RESERVATIONS_FULL)
		}
		return 0, false
	}
	if s.full {
		s.full = false
		e.pressure(s, messages.SessionPressureState_SESSION_PRESSURE_STATE_RESERVATIONS_RESUMED)
		s.refused = 0
	}
	id := s.next
	s.next++
	s.res[id] = struct{}{}
	return id, true
}

// pressure sends one SessionPressure transition to s's owner. Caller holds
// s.mu.
func (e *Engine) pressure(s *Session, state messages.SessionPressureState) {
	sev, ev := messages.Severity_SEVERITY_WARNING, e.log.Warn()
	if state == messages.SessionPressureState_SESSION_PRESSURE_STATE_SOFT_QUEUE_RELIEVED ||
		state == messages.SessionPressureState_SESSION_PRESSURE_STATE_RESERVATIONS_RESUMED {
		sev, ev = messages.Severity_SEVERITY_INFO, e.log.Info()
	}
	n := &messages.SessionPressure{State: state, Severity: sev, SessionId: s.id, Pending: uint64(len(s.res)),
		SoftQueue: uint32(e.lim.SoftQueue), HardQueue: uint32(e.lim.HardQueue),
		Reservations: uint64(e.reserved.Load()), MaxReservations: uint64(e.lim.MaxReservations),
		Refused: s.refused, Node: e.node}
	e.out.Send(s.owner, n)
	e.m.SessionPressure(pressureState[state])
	ev.Str("owner", s.owner.String()).Int("pending", len(s.res)).Int64("reservations", e.reserved.Load()).
		Str("state", state.String()).Msg("session pressure")
}

// lookup returns the open session id, or an error naming it.
func (e *Engine) lookup(id string) (*Session, error) {
	e.mu.RLock()
	s := e.sessions[id]
	e.mu.RUnlock()
	if s == nil {
		if e.closed.Load() {
			return nil, ErrEngineClosed
		}
		return nil, UnknownSession(id)
	}
	return s, nil
}

// Ack releases the reservation deliveryID of session id and returns the
// new pending count.
func (e *Engine) Ack(id string, deliveryID uint64) (int, error) {
	s, err := e.openLocked(id)
	if err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	if _, ok := s.res[deliveryID]; !ok {
		return len(s.res), ErrUnknownDelivery
	}
	e.release(s, deliveryID)
	return len(s.res), nil
}

// openLocked returns open session id with its mutex held (the caller
// unlocks it), or ErrUnknownSession.
func (e *Engine) openLocked(id string) (*Session, error) {
	s, err := e.lookup(id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if !s.open {
		s.mu.Unlock()
		return nil, UnknownSession(id)
	}
	return s, nil
}

// release drops one reservation. Caller holds s.mu.
func (e *Engine) release(s *Session, deliveryID uint64) {
	delete(s.res, deliveryID)
	e.reserved.Add(-1)
	if s.pressure && len(s.res) <= e.lim.SoftQueue {
		s.pressure = false
		e.pressure(s, messages.SessionPressureState_SESSION_PRESSURE_STATE_SOFT_QUEUE_RELIEVED)
	}
	e.acked(s)
	e.watchAck(s, deliveryID)
}

// AckMany releases each of ids that s holds; the others are appended to
// unknown (which may be nil). It fails as a whole only for an unknown
// session or more than MaxBatchItems ids.
func (e *Engine) AckMany(id string, ids []uint64, unknown []uint64) (acked int, unknownOut []uint64, pending int, err error) {
	if len(ids) > e.lim.MaxBatchItems {
		return 0, unknown, e.Pending(id), fmt.Errorf("%w: AckMany got %d ids, MaxBatchItems is %d", ErrTooManyItems, len(ids), e.lim.MaxBatchItems)
	}
	s, err := e.openLocked(id)
	if err != nil {
		return 0, unknown, 0, err
	}
	defer s.mu.Unlock()
	for _, d := range ids {
		if _, ok := s.res[d]; !ok {
			unknown = append(unknown, d)
			continue
		}
		e.release(s, d)
		acked++
	}
	return acked, unknown, len(s.res), nil
}

// AckFirst releases the session's oldest reservation; (0, nil) when it
// holds none.
func (e *Engine) AckFirst(id string) (int, error) {
	pending, _, err := e.AckFirstID(id)
	return pending, err
}

// AckFirstID is AckFirst that also returns the delivery id it released
// (0: none).
func (e *Engine) AckFirstID(id string) (pending int, released uint64, err error) {
	s, err := e.openLocked(id)
	if err != nil {
		return 0, 0, err
	}
	defer s.mu.Unlock()
	if len(s.res) == 0 {
		return 0, 0, nil
	}
	// Every id in [first, next) was issued; first only moves past ids that
	// are no longer held, so each id is stepped over once (amortised O(1)).
	for ; s.first < s.next; s.first++ {
		if _, ok := s.res[s.first]; ok {
			e.release(s, s.first)
			s.first++
			return len(s.res), s.first - 1, nil
		}
	}
	return len(s.res), 0, nil // unreachable: len(res) > 0 means an id in [first, next)
}

// Pending is the session's pending count; 0 for an unknown session.
func (e *Engine) Pending(id string) int {
	e.mu.RLock()
	s := e.sessions[id]
	e.mu.RUnlock()
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.res)
}

// Close closes session id: its reservations are released and its owner is
// told (unless the reason is that the owner stopped). It reports whether
// the session was open.
func (e *Engine) Close(id string, reason messages.SessionCloseReason, detail string) bool {
	s := e.Get(id)
	if s == nil {
		return false
	}
	s.mu.Lock()
	closed := e.closeLocked(s, reason, detail)
	s.mu.Unlock()
	e.finishClose(s, closed, false)
	return closed != nil
}

// Each calls fn for every open session, outside the engine's lock.
func (e *Engine) Each(fn func(*Session)) {
	e.mu.Lock()
	all := make([]*Session, 0, len(e.sessions))
	for _, s := range e.sessions {
		all = append(all, s)
	}
	e.mu.Unlock()
	for _, s := range all {
		fn(s)
	}
}

// CloseAll closes every session (the pubsub is stopping) and refuses new
// ones.
func (e *Engine) CloseAll(reason messages.SessionCloseReason, detail string) {
	e.mu.Lock()
	e.closed.Store(true)
	all := make([]*Session, 0, len(e.sessions))
	for _, s := range e.sessions {
		all = append(all, s)
	}
	e.mu.Unlock()
	for _, s := range all {
		e.Close(s.id, reason, detail)
	}
}

// closeLocked marks s closed, releases its reservations and tells its
// owner. It returns the notice (nil when s was already closed). Caller
// holds s.mu.
func (e *Engine) closeLocked(s *Session, reason messages.SessionCloseReason, detail string) *messages.SessionClosed {
	if !s.open {
		return nil
	}
	s.open = false
	if s.waiting || s.roomWanted {
		e.endWait(s)
	}
	e.unwatch(s)
	released := len(s.res)
	e.reserved.Add(-int64(released))
	s.res = nil
	n := &messages.SessionClosed{SessionId: s.id, Reason: reason, Released: uint64(released), Detail: detail, Node: e.node,
		OwnerStopped: reason == messages.SessionCloseReason_SESSION_CLOSE_REASON_HARD_QUEUE && e.lim.Action == ExitOwner}
	if reason != messages.SessionCloseReason_SESSION_CLOSE_REASON_OWNER_STOPPED {
		e.out.Send(s.owner, n) // the last message the session sends
	}
	return n
}

// finishClose removes a just-closed session from the table, stops its
// owner when asked, and runs onClose. Called without locks.
func (e *Engine) finishClose(s *Session, closed *messages.SessionClosed, stopOwner bool) {
	if closed == nil {
		return
	}
	e.mu.Lock()
	if e.sessions[s.id] == s {
		delete(e.sessions, s.id)
	}
	e.mu.Unlock()
	ev := e.log.Info()
	if closed.Reason == messages.SessionCloseReason_SESSION_CLOSE_REASON_HARD_QUEUE {
		ev = e.log.Warn()
	}
	ev.Str("owner", s.owner.String()).Str("reason", closed.Reason.String()).Uint64("released", closed.Released).
		Bool("owner_stopped", stopOwner).Msg("session closed")
	if stopOwner {
		e.out.Exit(s.owner)
	}
	e.onClose(s)
}

// Notify sends msg (a pubsub notice: CursorExpired, BackPressure) to s's
// owner, in order with its envelopes, unless s is closed. It reports
// whether it was sent.
func (e *Engine) Notify(s *Session, msg interface{}) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.open {
		return false
	}
	e.out.Send(s.owner, msg)
	return true
}

// pressureState is the metric attribute of each SessionPressure state.
var pressureState = map[messages.SessionPressureState]string{
	messages.SessionPressureState_SESSION_PRESSURE_STATE_SOFT_QUEUE_EXCEEDED:  "soft_queue_exceeded",
	messages.SessionPressureState_SESSION_PRESSURE_STATE_SOFT_QUEUE_RELIEVED:  "soft_queue_relieved",
	messages.SessionPressureState_SESSION_PRESSURE_STATE_RESERVATIONS_FULL:    "reservations_full",
	messages.SessionPressureState_SESSION_PRESSURE_STATE_RESERVATIONS_RESUMED: "reservations_resumed",
}

package delivery

import (
	"math"
	"slices"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
)

// Mailbox lengths.
//
// protoactor-go's Mailbox keeps a user-message counter (UserMessageCount,
// an atomic load) but no public API reaches a mailbox from a PID. A
// subscriber that wants a bound spawns with SubscriberMailbox, which wraps
// the default unbounded mailbox and records itself here under its PID when
// protoactor hands it the actor context.
//
// Why a process-wide map: protoactor creates mailboxes inside Spawn, outside
// any actor of ours, and this is the only way back from a PID to its
// mailbox. Entries are written once at spawn and removed when the actor is
// told to stop (an entry is only ever deleted by the mailbox that wrote it),
// so the map holds only live actors with counting mailboxes. Keys name the
// actor system too: several systems in one process (tests) may reuse an
// address (a freed port) and the same "$n" ids, and an actor system shut
// down without stopping its actors leaves its entries behind.
var mailboxes sync.Map // mailboxKey -> *countingMailbox

type mailboxKey struct {
	system *actor.ActorSystem
	id     string
}

type countingMailbox struct {
	actor.Mailbox
	key mailboxKey
	sub string // Key(pid): the registry's key for this subscriber

	// Pruning (see registry): the registries holding subscriptions of this
	// actor are told, in the goroutine that stops it, when it is told to
	// stop. Guarded by mu.
	mu       sync.Mutex
	stopping bool
	regs     []*registry // usually one: one per PubSub on the actor system
}

// SubscriberMailbox is the mailbox a bounded subscriber must be spawned
// with:
//
//	props := actor.PropsFromProducer(newSub, actor.WithMailbox(echopubsub.SubscriberMailbox()))
//
// It is protoactor's unbounded mailbox; the differences: EchoPubSub can read
// its queued message count, which back-pressure needs; it prunes the
// actor's subscriptions when the actor is told to stop (see the registry);
// and, unless the actor's props name a dispatcher of their own, it drains
// its queue without yielding every 300 messages (see DrainingDispatcher).
func SubscriberMailbox() actor.MailboxProducer {
	return func() actor.Mailbox {
		return &countingMailbox{Mailbox: actor.Unbounded()()}
	}
}

func (m *countingMailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	if s, ok := invoker.(interface {
		Self() *actor.PID
		ActorSystem() *actor.ActorSystem
	}); ok && s.Self() != nil {
		m.key, m.sub = mailboxKey{s.ActorSystem(), s.Self().Id}, Key(s.Self())
		mailboxes.Store(m.key, m)
	}
	if dispatcher == defaultDispatcher {
		dispatcher = DrainingDispatcher()
	}
	m.Mailbox.RegisterHandlers(invoker, dispatcher)
}

// PostSystemMessage posts message; a Stop also unregisters the mailbox and
// prunes the actor's subscriptions, before the Stop is posted: an actor
// told to stop handles no user message after it (system messages come
// first), so what it would still be sent is lost anyway.
func (m *countingMailbox) PostSystemMessage(message interface{}) {
	if _, ok := message.(*actor.Stop); ok {
		if m.key.system != nil {
			mailboxes.CompareAndDelete(m.key, m)
		}
		m.mu.Lock()
		regs := m.regs
		m.regs, m.stopping = nil, true
		m.mu.Unlock()
		for _, r := range regs {
			r.stopped(m)
		}
	}
	m.Mailbox.PostSystemMessage(message)
}

// tellOnStop makes r be told (registry.stopped) when the actor is told to
// stop. false: it already was (r is not told).
func (m *countingMailbox) tellOnStop(r *registry) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopping {
		return false
	}
	for _, have := range m.regs {
		if have == r {
			return true
		}
	}
	m.regs = append(m.regs, r)
	return true
}

// forget undoes tellOnStop (the actor's last subscription with r is gone).
func (m *countingMailbox) forget(r *registry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, have := range m.regs {
		if have == r {
			m.regs = slices.Delete(m.regs, i, i+1)
			return
		}
	}
}

// lookupMailbox returns the counting mailbox of pid, an actor of system, or
// nil when it has none (or is not running).
func lookupMailbox(system *actor.ActorSystem, pid *actor.PID) *countingMailbox {
	mb, ok := mailboxes.Load(mailboxKey{system, pid.Id})
	if !ok {
		return nil
	}
	return mb.(*countingMailbox)
}

// Key is the key of a subscriber PID (address/id), as Item.Exclude holds it.
func Key(pid *actor.PID) string { return pid.Address + "/" + pid.Id }

// defaultDispatcher is protoactor's dispatcher for props that name none.
var defaultDispatcher = actor.NewDefaultDispatcher(300)

// DrainingDispatcher is the dispatcher of subscribers spawned with
// SubscriberMailbox (unless their props name a dispatcher); producers and
// workers run on a WarmDispatcher, which drains the same way. It is protoactor's goroutine
// dispatcher without the yield every 300 messages: its mailbox runs until
// it is empty, and Go's scheduler preempts it after 10 ms of running, as
// it does any goroutine.
//
// Why: a mailbox that yields (runtime.Gosched) goes to the back of Go's
// global run queue. When 100,000 actors are stopped at once, that queue
// holds thousands of stopping actors' goroutines, and each yield cost the
// producer, and the subscriber it delivers to, 10 to 125 ms in a run
// trace; at 50,000 msg/s a mailbox that handles 300 messages per wait that
// long falls behind for as long as the stopping lasts, which stalled
// delivery for seconds (see docs/benchmarks.md, "Subscriptions").
func DrainingDispatcher() actor.Dispatcher { return actor.NewDefaultDispatcher(math.MaxInt32) }

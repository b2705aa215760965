package delivery

import (
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
}

// SubscriberMailbox is the mailbox a bounded subscriber must be spawned
// with:
//
//	props := actor.PropsFromProducer(newSub, actor.WithMailbox(echopubsub.SubscriberMailbox()))
//
// It is protoactor's unbounded mailbox; the difference is that EchoPubSub can
// read its queued message count, which back-pressure needs.
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
		m.key = mailboxKey{s.ActorSystem(), s.Self().Id}
		mailboxes.Store(m.key, m)
	}
	m.Mailbox.RegisterHandlers(invoker, dispatcher)
}

func (m *countingMailbox) PostSystemMessage(message interface{}) {
	if _, ok := message.(*actor.Stop); ok && m.key.system != nil {
		mailboxes.CompareAndDelete(m.key, m)
	}
	m.Mailbox.PostSystemMessage(message)
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

// Package supervision builds EchoPubSub's supervision tree (Tree), which
// mirrors the OTP design of the Elixir original:
//
//	echopubsub/<name>                 root (Tree): one-for-one; routes Broadcast
//	│                                 messages and membership events
//	├── registry                      subscriptions (actors/delivery; state survives restarts)
//	├── g0                            pool group 0 (Props): one-for-one
//	│   ├── producer                  actors/stream: ring buffer, write cursor, read cursors
//	│   └── worker                    actors/stream: receives batches, acks after delivery
//	└── g1 ...                        one group per Config.PoolSize
//
// Beside the tree, started by echopubsub.Start after the tree answers:
//
//	echopubsub-sessions/<name>        parent of the session actors (one per open session)
//	membership                        cluster.Static (no actor) or consul.Membership (its
//	                                  heartbeat actor), which sends its events to the root
//
// What restarts with what:
//
//   - A producer crash restarts only the producer. It comes back with an
//     empty buffer and a new incarnation and re-registers with every
//     worker; workers that knew the old incarnation tell their subscribers
//     CursorExpired. Safe, never a silent gap.
//   - A worker crash restarts only the worker. Its table of producers
//     (incarnation and next cursor per producer) is owned by the group and
//     handed to the new incarnation, so nothing delivered is redelivered and
//     an unacknowledged batch is replayed by its producer.
//   - The registry keeps its subscriptions across a restart the same way.
//   - A child that exceeds its restart intensity is stopped by protoactor;
//     its group then fails (escalates) and the root restarts the whole
//     group, as an OTP supervisor exceeding its intensity would.
//
// Actor names are fixed so that remote nodes address workers directly:
// echopubsub/<name>/g<group>/worker.
package supervision

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Restart intensity of every supervisor in the tree: at most MaxRestarts
// within Within, as OTP's intensity and period.
const (
	MaxRestarts = 10
	Within      = 10 * time.Second
)

// OneForOne restarts only the child that failed.
func OneForOne() actor.SupervisorStrategy {
	return actor.NewOneForOneStrategy(MaxRestarts, Within, actor.DefaultDecider)
}

// Child is one supervised child: spawned under Name when the supervisor
// starts, in the order given.
type Child struct {
	Name  string
	Props *actor.Props
}

// Props returns a one-for-one supervisor that spawns children in order. If a
// child stops for good (it exceeded its restart intensity) while the
// supervisor is not stopping, the supervisor escalates to its own parent.
func Props(children ...Child) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &supervisor{children: children}
	}, actor.WithSupervisor(OneForOne()), IgnorePoisonPill())
}

// IgnorePoisonPill makes an actor ignore protoactor's PoisonPill message.
// The tree's actors have well-known names so that peers can reach them, and
// any peer could otherwise stop one with a PoisonPill; they are stopped
// through their supervisor (a system Stop), which this does not affect.
func IgnorePoisonPill() actor.PropsOption {
	return actor.WithReceiverMiddleware(func(next actor.ReceiverFunc) actor.ReceiverFunc {
		return func(ctx actor.ReceiverContext, env *actor.MessageEnvelope) {
			if _, ok := env.Message.(*actor.PoisonPill); ok {
				ctx.Logger().Warn("echopubsub: ignored a PoisonPill sent to a supervised actor", "actor", ctx.Self().Id, "sender", env.Sender)
				return
			}
			next(ctx, env)
		}
	})
}

type supervisor struct {
	children []Child
	stopping bool
}

// ReadyQuery asks a supervisor built by Props whether its children exist: it
// answers *Ready once its Started ran, which spawned them. Ask it before
// messaging a child: protoactor registers a spawned actor's PID before its
// mailbox can schedule, so a message that races the spawn can panic
// (actor.defaultSpawner, mailbox.schedule), while one sent after SpawnNamed
// returned cannot.
type ReadyQuery struct{}

// Ready answers ReadyQuery.
type Ready struct{}

func (s *supervisor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *ReadyQuery:
		ctx.Respond(&Ready{})
	case *actor.Started:
		for _, c := range s.children {
			if _, err := ctx.SpawnNamed(c.Props, c.Name); err != nil {
				escalate(ctx, err)
				return
			}
		}
	case *actor.Stopping, *actor.Restarting:
		// Children stop while we stop or restart: that is not a failure.
		s.stopping = true
	case *actor.Terminated:
		if !s.stopping && m.Who.Address == ctx.Self().Address && len(m.Who.Id) > len(ctx.Self().Id) {
			escalate(ctx, "child stopped: "+m.Who.Id)
		}
	}
}

// escalate fails this actor so its parent's strategy applies, without a
// panic.
func escalate(ctx actor.Context, reason interface{}) {
	if e, ok := ctx.(interface {
		EscalateFailure(reason interface{}, message interface{})
	}); ok {
		e.EscalateFailure(reason, ctx.Message())
	}
}

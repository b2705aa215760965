package actors

import (
	"errors"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
)

// Errors of Subscribe and Unsubscribe.
var (
	// ErrUnmeasurable: the subscriber was not spawned with
	// SubscriberMailbox, so its queue cannot be bounded.
	ErrUnmeasurable = errors.New("echopubsub: subscriber's mailbox cannot be measured: spawn it with actor.WithMailbox(echopubsub.SubscriberMailbox()), or subscribe WithUnboundedQueue()")
	// ErrNotLocal: subscribers must live on this node.
	ErrNotLocal = errors.New("echopubsub: subscriber is not a local PID")
)

// SubOptions are the per-subscription settings.
type SubOptions struct {
	// Meta: deliver *messages.Delivery (message + metadata).
	Meta bool
	// MaxQueueLen overrides Config.MaxQueueLen when MaxQueueLenSet.
	MaxQueueLen    int
	MaxQueueLenSet bool
	// Unbounded: an explicit opt-in to a subscriber whose queue is not
	// measured and never bounded.
	Unbounded bool
}

// Subscribe, Unsubscribe and SetNotices are the registry's requests; each is
// answered with a *Reply.
type Subscribe struct {
	PID   *actor.PID // or
	Name  string     // a registered name, resolved at send time
	Topic string
	Opts  SubOptions
}

type Unsubscribe struct {
	PID   *actor.PID
	Name  string
	Topic string
}

type SetNotices struct{ PID *actor.PID }

// Reply answers a registry request.
type Reply struct{ Err error }

// registry owns the subscriptions of this node: it is the only writer of
// the dispatcher's topic table (see Dispatcher for how readers stay
// lock-free). A Subscribe or Unsubscribe costs amortized O(1) in what the
// node holds: a map lookup, an append to (or a mark in) the topic's own
// list, and this subscriber's own few subscriptions.
//
// It watches every subscribed PID and drops its subscriptions when it
// terminates, once the process registry confirms it is gone (protoactor
// hands Terminated messages from the wire to local actors: a forged one
// must not cut a live subscriber off). A subscriber given by name is never
// pruned (a supervisor may restart it under that name).
type registry struct {
	d          *Dispatcher
	defaultMax int
	subs       map[string]*subscriber
	forged     int // Terminated messages ignored because their PID is alive
}

// newRegistry's state outlives a crash of the registry actor: the restarted
// incarnation takes over the same maps (one incarnation runs at a time), as
// an OTP table whose heir is the supervisor would. Losing subscriptions on a
// restart would silently cut subscribers off.
func newRegistry(d *Dispatcher, defaultMax int) actor.Producer {
	r := &registry{d: d, defaultMax: defaultMax, subs: map[string]*subscriber{}}
	return func() actor.Actor { return r }
}

func (r *registry) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *Subscribe:
		ctx.Respond(&Reply{Err: r.subscribe(ctx, m)})
	case *Unsubscribe:
		ctx.Respond(&Reply{Err: r.unsubscribe(ctx, m)})
	case *SetNotices:
		ctx.Respond(&Reply{Err: r.setNotices(ctx, m)})
	case *actor.Terminated:
		r.terminated(ctx, m)
	}
}

func (r *registry) subscribe(ctx actor.Context, m *Subscribe) error {
	if m.Topic == "" {
		return fmt.Errorf("echopubsub: topic must not be empty")
	}
	bound := r.defaultMax
	if m.Opts.MaxQueueLenSet {
		if m.Opts.MaxQueueLen <= 0 {
			return fmt.Errorf("echopubsub: MaxQueueLen must be > 0, got %d", m.Opts.MaxQueueLen)
		}
		bound = m.Opts.MaxQueueLen
	}
	var key string
	switch {
	case m.PID != nil && m.Name != "":
		return fmt.Errorf("echopubsub: subscribe with a PID or a name, not both")
	case m.PID != nil:
		if m.PID.Address != ctx.Self().Address {
			return fmt.Errorf("%w: %s (this node is %s)", ErrNotLocal, m.PID, ctx.Self().Address)
		}
		key = pidKey(m.PID)
	case m.Name != "":
		key = m.Name
	default:
		return fmt.Errorf("echopubsub: subscriber PID is nil")
	}
	sub := r.subs[key]
	if sub == nil {
		sub = &subscriber{key: key, unbounded: m.Opts.Unbounded}
		if m.PID != nil {
			sub.pid = m.PID
			if !m.Opts.Unbounded {
				if sub.mb = lookupMailbox(m.PID); sub.mb == nil {
					return fmt.Errorf("%w (subscriber %s)", ErrUnmeasurable, m.PID)
				}
			}
			if p, ok := ctx.ActorSystem().ProcessRegistry.GetLocal(m.PID.Id); ok {
				sub.proc, _ = p.(*actor.ActorProcess)
			}
			ctx.Watch(m.PID)
		} else {
			sub.named = true // its PID is made when it is first found running
		}
		r.subs[key] = sub
	}
	s := &subscription{sub: sub, bound: bound, withMeta: m.Opts.Meta}
	r.d.add(m.Topic, s)
	sub.subs = append(sub.subs, s)
	return nil
}

func (r *registry) unsubscribe(ctx actor.Context, m *Unsubscribe) error {
	key := m.Name
	if m.PID != nil {
		key = pidKey(m.PID)
	}
	if key == "" {
		return fmt.Errorf("echopubsub: subscriber PID is nil")
	}
	sub := r.subs[key]
	if sub == nil {
		return nil
	}
	kept := sub.subs[:0]
	for _, s := range sub.subs {
		if s.t.name == m.Topic {
			r.d.remove(s)
		} else {
			kept = append(kept, s)
		}
	}
	clear(sub.subs[len(kept):])
	sub.subs = kept
	if len(kept) == 0 {
		if !sub.named {
			ctx.Unwatch(sub.pid)
		}
		delete(r.subs, key)
	}
	return nil
}

// terminated drops every subscription of a subscriber that terminated, once
// the process registry confirms it: a Terminated for a PID whose process is
// still registered is forged (from the wire) or stale, and is ignored.
func (r *registry) terminated(ctx actor.Context, m *actor.Terminated) {
	if m.Who == nil {
		return
	}
	sub := r.subs[pidKey(m.Who)]
	if sub == nil || sub.named {
		return
	}
	if p, ok := ctx.ActorSystem().ProcessRegistry.GetLocal(m.Who.Id); ok && (sub.proc == nil || p == actor.Process(sub.proc)) {
		if r.forged++; r.forged == 1 || r.forged%1000 == 0 {
			r.d.log.Warn().Str("subscriber", sub.key).Int("ignored", r.forged).
				Msg("Terminated for a subscriber that is still running ignored (forged or stale)")
		}
		return
	}
	for _, s := range sub.subs {
		r.d.remove(s)
	}
	sub.subs = nil
	delete(r.subs, sub.key)
}

// setNotices sets the notice subscriber: a local actor spawned with
// SubscriberMailbox, bounded at Config.MaxQueueLen like any subscriber.
func (r *registry) setNotices(ctx actor.Context, m *SetNotices) error {
	if m.PID == nil {
		r.d.setNotices(nil)
		return nil
	}
	if m.PID.Address != ctx.Self().Address {
		return fmt.Errorf("%w: notice subscriber %s (this node is %s)", ErrNotLocal, m.PID, ctx.Self().Address)
	}
	mb := lookupMailbox(m.PID)
	if mb == nil {
		return fmt.Errorf("%w (notice subscriber %s)", ErrUnmeasurable, m.PID)
	}
	r.d.setNotices(&noticeSubscriber{pid: m.PID, mb: mb, bound: r.defaultMax})
	return nil
}

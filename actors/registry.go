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

// registry owns the subscriptions of this node. It watches every subscribed
// PID and drops its subscriptions when it terminates; a subscriber given by
// name is never pruned (a supervisor may restart it under that name).
type registry struct {
	d          *Dispatcher
	defaultMax int
	subs       map[string]*subscriber
	topics     map[string][]*subscription
	notices    *actor.PID
}

// newRegistry's state outlives a crash of the registry actor: the restarted
// incarnation takes over the same maps (one incarnation runs at a time), as
// an OTP table whose heir is the supervisor would. Losing subscriptions on a
// restart would silently cut subscribers off.
func newRegistry(d *Dispatcher, defaultMax int) actor.Producer {
	r := &registry{d: d, defaultMax: defaultMax, subs: map[string]*subscriber{}, topics: map[string][]*subscription{}}
	return func() actor.Actor { return r }
}

func (r *registry) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		r.publish()
	case *Subscribe:
		ctx.Respond(&Reply{Err: r.subscribe(ctx, m)})
	case *Unsubscribe:
		ctx.Respond(&Reply{Err: r.unsubscribe(ctx, m)})
	case *SetNotices:
		r.notices = m.PID
		r.publish()
		ctx.Respond(&Reply{})
	case *actor.Terminated:
		r.remove(pidKey(m.Who))
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
			ctx.Watch(m.PID)
		} else {
			sub.named = true
			sub.pid = actor.NewPID(ctx.Self().Address, m.Name)
		}
		r.subs[key] = sub
	}
	r.topics[m.Topic] = append(r.topics[m.Topic], &subscription{sub: sub, topic: m.Topic, bound: bound, withMeta: m.Opts.Meta})
	r.publish()
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
	subs := r.topics[m.Topic]
	kept := subs[:0:0]
	for _, s := range subs {
		if s.sub.key != key {
			kept = append(kept, s)
		}
	}
	if len(kept) == 0 {
		delete(r.topics, m.Topic)
	} else {
		r.topics[m.Topic] = kept
	}
	if !r.stillSubscribed(key) {
		if sub := r.subs[key]; sub != nil && !sub.named {
			ctx.Unwatch(sub.pid)
		}
		delete(r.subs, key)
	}
	r.publish()
	return nil
}

func (r *registry) stillSubscribed(key string) bool {
	for _, subs := range r.topics {
		for _, s := range subs {
			if s.sub.key == key {
				return true
			}
		}
	}
	return false
}

// remove drops every subscription of a terminated PID.
func (r *registry) remove(key string) {
	if _, ok := r.subs[key]; !ok {
		return
	}
	delete(r.subs, key)
	for topic, subs := range r.topics {
		kept := subs[:0:0]
		for _, s := range subs {
			if s.sub.key != key {
				kept = append(kept, s)
			}
		}
		if len(kept) == 0 {
			delete(r.topics, topic)
		} else {
			r.topics[topic] = kept
		}
	}
	r.publish()
}

// publish swaps in a fresh immutable snapshot for the dispatcher.
func (r *registry) publish() {
	t := &table{topics: make(map[string][]*subscription, len(r.topics)), notices: r.notices}
	for topic, subs := range r.topics {
		t.topics[topic] = append([]*subscription(nil), subs...)
	}
	for _, sub := range r.subs {
		t.subscribers = append(t.subscribers, sub)
	}
	r.d.table.Store(t)
}

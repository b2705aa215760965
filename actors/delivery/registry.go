package delivery

import (
	"errors"
	"fmt"
	"sync"

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
	// Format: the decoded message, its encoding, or both (see Format).
	Format Format
}

// Format is what a subscription receives for each message. Its values are
// those of the root package's DeliveryFormat.
type Format int

const (
	// FormatMessage: the decoded message (in a *messages.Delivery with
	// SubOptions.Meta). The default.
	FormatMessage Format = iota
	// FormatEncoded: a *messages.Delivery with the message's encoding
	// (PayloadType, Payload) and no Message: nothing is decoded for it.
	FormatEncoded
	// FormatBoth: a *messages.Delivery with Message and the encoding.
	FormatBoth
)

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
// node holds and in what the subscriber holds: a map lookup, an append to
// (or a mark in) the topic's own list, and a search of this subscriber's
// own few subscriptions, or past smallSubs a lookup in its index by topic.
// So a subscriber leaves each of its topics, one Unsubscribe at a time or
// all at once when it dies, for O(1) per topic (100,000 topics in about
// 0.1 s; a scan of its list per Unsubscribe took 38 s).
//
// Pruning. A subscriber spawned with SubscriberMailbox (every bounded one)
// is pruned when it is told to stop: its mailbox sees the Stop system
// message and drops its subscriptions, in the goroutine that stops it,
// before the Stop is posted (about 1 us; the actor handles no user message
// after a Stop, so nothing it is sent from then on would reach it). It is
// not watched: 100,000 subscribers stopped at once cost the registry no
// Terminated messages, no wake-ups of its mailbox, and the subscribers no
// watcher sets (about 620 bytes each). In a run trace of 100,000 watched
// subscribers stopped at once, the registry's mailbox was woken about
// 9,800 times, and waited 1.5 s in all at the back of a run queue
// thousands of stopping actors long (see DrainingDispatcher for what that
// queue did to delivery).
//
// A subscriber without SubscriberMailbox (WithUnboundedQueue) is watched
// instead, and its subscriptions dropped when it terminates, once the
// process registry confirms it is gone (protoactor hands Terminated
// messages from the wire to local actors: a forged one must not cut a live
// subscriber off; a Terminated for a subscriber pruned by its mailbox is
// ignored). A subscriber given by name is never pruned (a supervisor may
// restart it under that name).
//
// Changes are made under mu, one at a time: by the actor, from its messages
// (Terminated, and requests sent to it), or directly in the caller's
// goroutine (Dispatcher.Apply, what PubSub.Subscribe uses). A request
// through the actor costs a future, a timer and two goroutine hand-offs;
// at 10,000 subscribe/unsubscribe pairs a second that traffic, not the
// change, is what delays delivery on a small machine.
type registry struct {
	d          *Dispatcher
	defaultMax int

	mu     sync.Mutex
	subs   map[string]*subscriber // guarded by mu
	forged int                    // guarded by mu: Terminated messages ignored because their PID is alive
}

// NewRegistry's state outlives a crash of the registry actor, and of the
// tree above it: it lives with the Dispatcher, and a restarted incarnation
// takes over the same maps, as an OTP table whose heir is the supervisor
// would. Losing subscriptions on a restart would silently cut subscribers
// off (the watches stay too: they name the registry's fixed PID).
func NewRegistry(d *Dispatcher, defaultMax int) actor.Producer {
	r := d.reg.Load()
	if r == nil {
		r = &registry{d: d, defaultMax: defaultMax, subs: map[string]*subscriber{}}
		d.reg.Store(r)
	}
	return func() actor.Actor { return r }
}

// Apply makes a registry change (a *Subscribe, *Unsubscribe or *SetNotices)
// in the caller's goroutine, as the registry actor does when it receives
// one. self is the registry actor's PID: it watches the subscribers. ok is
// false when there is no registry yet (send the request to the actor).
func (d *Dispatcher) Apply(self *actor.PID, req interface{}) (ok bool, err error) {
	r := d.reg.Load()
	if r == nil {
		return false, nil
	}
	return true, r.apply(self, req)
}

func (r *registry) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *Subscribe, *Unsubscribe, *SetNotices:
		ctx.Respond(&Reply{Err: r.apply(ctx.Self(), m)})
	case *actor.Terminated:
		r.terminated(m)
	}
}

func (r *registry) apply(self *actor.PID, req interface{}) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch m := req.(type) {
	case *Subscribe:
		return r.subscribe(self, m)
	case *Unsubscribe:
		return r.unsubscribe(self, m)
	case *SetNotices:
		return r.setNotices(self, m)
	}
	return fmt.Errorf("echopubsub: registry: unknown request %T", req)
}

// watch and unwatch send the system messages ctx.Watch and ctx.Unwatch
// send, from self, so they can be sent outside the actor.
func (r *registry) watch(self, pid *actor.PID) {
	proc, _ := r.d.system.ProcessRegistry.Get(pid) // dead letters answer a Watch with Terminated
	proc.SendSystemMessage(pid, &actor.Watch{Watcher: self})
}

func (r *registry) unwatch(self, pid *actor.PID) {
	proc, _ := r.d.system.ProcessRegistry.Get(pid)
	proc.SendSystemMessage(pid, &actor.Unwatch{Watcher: self})
}

func (r *registry) subscribe(self *actor.PID, m *Subscribe) error {
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
	if m.Opts.Format < FormatMessage || m.Opts.Format > FormatBoth {
		return fmt.Errorf("echopubsub: DeliveryFormat must be FormatEvent, FormatEncoded or FormatBoth, got %d", int(m.Opts.Format))
	}
	var key string
	switch {
	case m.PID != nil && m.Name != "":
		return fmt.Errorf("echopubsub: subscribe with a PID or a name, not both")
	case m.PID != nil:
		if m.PID.Address != self.Address {
			return fmt.Errorf("%w: %s (this node is %s)", ErrNotLocal, m.PID, self.Address)
		}
		key = Key(m.PID)
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
				if sub.mb = lookupMailbox(r.d.system, m.PID); sub.mb == nil {
					return fmt.Errorf("%w (subscriber %s)", ErrUnmeasurable, m.PID)
				}
				if !sub.mb.tellOnStop(r) {
					// Told to stop since the lookup: as if subscribed and
					// pruned at once.
					return nil
				}
			} else {
				if p, ok := r.d.system.ProcessRegistry.GetLocal(m.PID.Id); ok {
					sub.proc, _ = p.(*actor.ActorProcess)
				}
				r.watch(self, m.PID)
			}
		} else {
			sub.named = true // its PID is made when it is first found running
		}
		r.subs[key] = sub
	}
	s := &subscription{sub: sub, bound: bound, withMeta: m.Opts.Meta, format: m.Opts.Format}
	r.d.add(m.Topic, s)
	sub.keep(s)
	return nil
}

// smallSubs is the most subscriptions a subscriber keeps in a plain slice
// (searched in full by an Unsubscribe); past it they are indexed by topic.
// Most subscribers hold a few topics: a slice costs them a pointer each,
// an index a map.
const smallSubs = 8

// keep records s (already added to its topic) as one of sub's
// subscriptions. The registry holds its lock.
func (sub *subscriber) keep(s *subscription) {
	if sub.idx == nil && len(sub.subs) < smallSubs {
		sub.subs = append(sub.subs, s)
		return
	}
	if sub.idx == nil {
		sub.idx = &topicIndex{byTopic: make(map[string]*subscription, 2*smallSubs)}
		for _, old := range sub.subs {
			sub.idx.add(old)
		}
		sub.subs = nil
	}
	sub.idx.add(s)
}

func (x *topicIndex) add(s *subscription) {
	topic := s.t.name
	if _, dup := x.byTopic[topic]; !dup {
		x.byTopic[topic] = s
		return
	}
	if x.dups == nil {
		x.dups = map[string][]*subscription{}
	}
	x.dups[topic] = append(x.dups[topic], s)
}

// take removes sub's subscriptions to topic and calls fn with each: O(1) per
// subscription taken once sub is indexed, O(smallSubs) before. The registry
// holds its lock.
func (sub *subscriber) take(topic string, fn func(*subscription)) {
	if x := sub.idx; x != nil {
		s, ok := x.byTopic[topic]
		if !ok {
			return
		}
		delete(x.byTopic, topic)
		fn(s)
		if dups, ok := x.dups[topic]; ok {
			delete(x.dups, topic)
			for _, d := range dups {
				fn(d)
			}
		}
		return
	}
	kept := sub.subs[:0]
	for _, s := range sub.subs {
		if s.t.name == topic {
			fn(s)
		} else {
			kept = append(kept, s)
		}
	}
	clear(sub.subs[len(kept):])
	sub.subs = kept
}

// each calls fn with every subscription of sub. The registry holds its lock.
func (sub *subscriber) each(fn func(*subscription)) {
	for _, s := range sub.subs {
		fn(s)
	}
	if x := sub.idx; x != nil {
		for _, s := range x.byTopic {
			fn(s)
		}
		for _, dups := range x.dups {
			for _, d := range dups {
				fn(d)
			}
		}
	}
}

// empty reports whether sub holds no subscription.
func (sub *subscriber) empty() bool {
	return len(sub.subs) == 0 && (sub.idx == nil || len(sub.idx.byTopic) == 0)
}

func (r *registry) unsubscribe(self *actor.PID, m *Unsubscribe) error {
	key := m.Name
	if m.PID != nil {
		key = Key(m.PID)
	}
	if key == "" {
		return fmt.Errorf("echopubsub: subscriber PID is nil")
	}
	sub := r.subs[key]
	if sub == nil {
		return nil
	}
	sub.take(m.Topic, r.d.remove)
	if sub.empty() {
		switch {
		case sub.mb != nil:
			sub.mb.forget(r)
		case !sub.named:
			r.unwatch(self, sub.pid)
		}
		delete(r.subs, key)
	}
	return nil
}

// stopped prunes the subscriber whose mailbox mb was told to stop (called
// by mb, in the stopping goroutine). The subscriber must be the one that
// subscribed with mb: an actor spawned later under the same name is
// another subscriber.
func (r *registry) stopped(mb *countingMailbox) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if sub := r.subs[mb.sub]; sub != nil && sub.mb == mb {
		r.drop(sub)
	}
}

// drop removes every subscription of sub. The caller holds mu.
func (r *registry) drop(sub *subscriber) {
	sub.each(r.d.remove)
	sub.subs, sub.idx = nil, nil
	delete(r.subs, sub.key)
}

// terminated drops every subscription of a subscriber that terminated, once
// the process registry confirms it: a Terminated for a PID whose process is
// still registered is forged (from the wire) or stale, and is ignored.
func (r *registry) terminated(m *actor.Terminated) {
	if m.Who == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	sub := r.subs[Key(m.Who)]
	if sub == nil || sub.named {
		return
	}
	if sub.mb != nil { // not watched: pruned by its mailbox when told to stop
		r.ignored(sub)
		return
	}
	if p, ok := r.d.system.ProcessRegistry.GetLocal(m.Who.Id); ok && (sub.proc == nil || p == actor.Process(sub.proc)) {
		r.ignored(sub)
		return
	}
	r.drop(sub)
}

// ignored counts (and logs, now and then) a Terminated not acted on. The
// caller holds mu.
func (r *registry) ignored(sub *subscriber) {
	if r.forged++; r.forged == 1 || r.forged%1000 == 0 {
		r.d.log.Warn().Str("subscriber", sub.key).Int("ignored", r.forged).
			Msg("Terminated for a subscriber that is still running ignored (forged or stale)")
	}
}

// setNotices sets the notice subscriber: a local actor spawned with
// SubscriberMailbox, bounded at Config.MaxQueueLen like any subscriber.
func (r *registry) setNotices(self *actor.PID, m *SetNotices) error {
	if m.PID == nil {
		r.d.setNotices(nil)
		return nil
	}
	if m.PID.Address != self.Address {
		return fmt.Errorf("%w: notice subscriber %s (this node is %s)", ErrNotLocal, m.PID, self.Address)
	}
	mb := lookupMailbox(r.d.system, m.PID)
	if mb == nil {
		return fmt.Errorf("%w (notice subscriber %s)", ErrUnmeasurable, m.PID)
	}
	r.d.setNotices(&noticeSubscriber{pid: m.PID, mb: mb, bound: r.defaultMax})
	return nil
}

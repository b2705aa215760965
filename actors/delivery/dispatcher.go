package delivery

import (
	"sort"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/internal/plant"
	"github.com/echopubsub/echopubsub/messages"
)

// Dispatcher hands messages to this node's subscribers. It is the one place
// that decides who receives what locally, and applies back-pressure.
//
// Every delivery path calls it: workers (batches from producers on other
// nodes), producers (their own node's subscribers, at write time) and
// LocalBroadcast. Those run on different goroutines and never lock the
// subscription table:
//
//   - topics is a concurrent map (sync.Map: a hash-trie whose reads take no
//     lock) from topic to its *topicSubs; only the registry writes it, one
//     change at a time (under its lock).
//   - a topic's subscriber list is published through an atomic pointer. The
//     registry appends in place past the end readers see, then publishes the
//     longer view; it never rewrites an element a reader can see. An
//     unsubscribed subscription is marked removed (readers skip it) and the
//     list is compacted into a new array once half of it is removed. So a
//     Subscribe or Unsubscribe costs amortized O(1), whatever the node holds:
//     nothing but the topic's own list is ever copied, and that only when it
//     grows past its capacity or is compacted.
//
// The one mutable state per subscriber is whether it is being dropped for
// (and, for a named subscriber, what it missed while absent). Its check,
// its transition, the transition's notice and the send happen under the
// subscriber's own mutex: otherwise a deliverer could drop a message
// relying on a DROPPING notice that another deliverer has decided on but not
// yet enqueued, and a third could resume and deliver past the hole first,
// which the subscriber would see as a silent gap. The mutex is per
// subscriber, so deliveries to different subscribers never contend.
type Dispatcher struct {
	system *actor.ActorSystem
	node   string
	log    zerolog.Logger
	m      *core.Metrics // set by SetMetrics before the first delivery; nil: not counted
	tracer trace.Tracer  // set by SetTracer before the first delivery; nil: no delivery spans

	topics  sync.Map // topic -> *topicSubs; written by the registry only
	notices atomic.Pointer[noticeSubscriber]
	reg     atomic.Pointer[registry] // set once, by the first newRegistry

	expiredMu    sync.Mutex // serializes Expired, for its once-per-subscriber pass
	expiredEpoch uint64     // guarded by expiredMu
}

// topicSubs is one topic's subscriptions.
type topicSubs struct {
	name string
	// list is the published view. Its elements are never rewritten: the
	// registry appends past its end or builds a new array.
	list atomic.Pointer[[]*subscription]
	live atomic.Int64 // subscriptions not removed

	// Registry only.
	arr  []*subscription // the array behind list, as long as list
	dead int             // removed entries still in arr
}

// subscriber is one PID, or one registered name resolved at send time.
type subscriber struct {
	key string // Key(pid) or the name
	// pid is the subscriber's PID; for a name, the PID the name resolves
	// to, made on the first send that finds it running (guarded by mu).
	pid       *actor.PID
	named     bool
	unbounded bool
	warned    atomic.Bool
	mb        *countingMailbox // nil for a name or an unbounded opt-in
	// proc is the process that was subscribed (PID subscribers): a
	// Terminated is acted on only when the process registry no longer
	// holds it.
	proc *actor.ActorProcess
	// Registry only (under its lock): this subscriber's subscriptions. Up
	// to smallSubs of them sit in subs, which Unsubscribe searches in
	// full; past that they move to idx, so that leaving a topic costs O(1)
	// however many topics the subscriber holds (see subscriber.take).
	subs []*subscription
	idx  *topicIndex

	expired uint64 // guarded by Dispatcher.expiredMu: the last Expired pass that reached it

	mu       sync.Mutex // orders check, transition, notice and send (see Dispatcher)
	dropping bool       // guarded by mu
	missed   *missedLog // guarded by mu; named subscribers: what they missed while absent
}

// topicIndex is a subscriber's subscriptions by topic (registry only): its
// subscription to each topic, and any more to the same topic (subscribed
// twice) in dups.
type topicIndex struct {
	byTopic map[string]*subscription
	dups    map[string][]*subscription
}

// missedLog is what a named subscriber missed while nothing answered to its
// name, told to it when it is next resolved.
type missedLog struct {
	topics  map[string]uint64
	expired []*messages.CursorExpired // at most one per producer (node, group)
}

type subscription struct {
	sub      *subscriber
	t        *topicSubs
	bound    int
	withMeta bool
	format   Format
	removed  atomic.Bool
}

// noticeSubscriber receives a copy of every notice; it is bounded like any
// subscriber.
type noticeSubscriber struct {
	pid   *actor.PID
	mb    *countingMailbox
	bound int

	mu       sync.Mutex // orders check, transition, notice and send, as for a subscriber
	dropping bool
	dropped  uint64 // notices dropped since dropping began; guarded by mu
}

func NewDispatcher(system *actor.ActorSystem, node string, log zerolog.Logger) *Dispatcher {
	return &Dispatcher{system: system, node: node, log: log}
}

// SetMetrics makes d count drops and BackPressure notices on m. Call it
// before anything is delivered.
func (d *Dispatcher) SetMetrics(m *core.Metrics) { d.m = m }

// topic returns topic's subscriptions, or nil.
func (d *Dispatcher) topic(topic string) *topicSubs {
	v, ok := d.topics.Load(topic)
	if !ok {
		return nil
	}
	return v.(*topicSubs)
}

// Registry side (the registry is the only caller, under its lock).

// add publishes s as a subscription to topic.
func (d *Dispatcher) add(topic string, s *subscription) {
	t := d.topic(topic)
	if t == nil {
		t = &topicSubs{name: topic}
		empty := []*subscription{}
		t.list.Store(&empty)
		d.topics.Store(topic, t)
	}
	s.t = t
	if len(t.arr) == cap(t.arr) && t.dead > 0 {
		t.compact(1)
	}
	// append writes past the end of the published view (or copies into a
	// new array when full): no reader sees that slot until the Store.
	t.arr = append(t.arr, s)
	view := t.arr
	t.list.Store(&view)
	t.live.Add(1)
}

// remove unpublishes s: readers skip it from now on.
func (d *Dispatcher) remove(s *subscription) {
	if s.removed.Swap(true) {
		return
	}
	t := s.t
	t.dead++
	if t.live.Add(-1) == 0 {
		d.topics.CompareAndDelete(t.name, t)
		t.arr, t.dead = nil, 0
		return
	}
	if t.dead > len(t.arr)/2 {
		t.compact(0)
	}
}

// compact publishes a new array without the removed entries, with room for
// extra more. It costs the topic's length, once per len/2 removals.
func (t *topicSubs) compact(extra int) {
	live := len(t.arr) - t.dead
	arr := make([]*subscription, 0, live+live/4+extra)
	for _, s := range t.arr {
		if !s.removed.Load() {
			arr = append(arr, s)
		}
	}
	t.arr, t.dead = arr, 0
	view := arr
	t.list.Store(&view)
}

// setNotices replaces the notice subscriber (nil: none).
func (d *Dispatcher) setNotices(ns *noticeSubscriber) { d.notices.Store(ns) }

// Delivery side.

// Item is one message for Deliver.
type Item struct {
	Topic string
	// Message is the message to hand out; when nil, Payload is decoded (as
	// Type, or else as PayloadType looked up by name), once, and only if the
	// topic has a subscriber here that asks for the message (not only for
	// its encoding: FormatEncoded).
	Message proto.Message
	// PayloadType and Payload are the message's encoding, always set: what
	// a FormatEncoded or FormatBoth subscription is handed, as they are.
	// So Payload must be an array nothing writes to again: each caller's
	// says why its is (the worker: a batch's; the producer and
	// DeliverLocal: the publisher's encoding, see core.Write).
	PayloadType string
	Payload     []byte
	Type        messages.Type
	// Exclude is the key of a subscriber that must not receive it
	// (BroadcastFrom), "" for none.
	Exclude string
	// Meta fields, for subscriptions that asked for a *messages.Delivery.
	Node        string
	Group       uint32
	Incarnation uint64
	Cursor      uint64
	Local       bool
	// StoreCursor is the message's row in this node's durable store (0:
	// none); Unstored: a durable message this node's failing store could
	// not take (a gap row will count it).
	StoreCursor uint64
	Unstored    bool
	// Traceparent and Tracestate are the W3C trace context it was
	// published in ("": none), checked (core.CheckTrace when from a peer).
	Traceparent, Tracestate string

	// The topic's subscriptions as Deliver last looked them up for this
	// Item (for topic cachedName; cachedOK once looked up). An Item reused
	// for several messages looks a topic up once per run of it: reuse one
	// only for messages that were all published before its first Deliver
	// (one batch, one take of writes), which no subscription made since is
	// owed. A subscription added to the topic meanwhile is still seen: only
	// the topic's entry is kept, not its list.
	cached     *topicSubs
	cachedName string
	cachedOK   bool
}

// Deliver sends it to every subscriber of its topic, subject to each
// subscriber's bound.
func (d *Dispatcher) Deliver(it *Item) {
	t := it.cached
	if !it.cachedOK || it.cachedName != it.Topic {
		t = d.topic(it.Topic) // a sync.Map lookup: a third of a delivery's own cost
		it.cached, it.cachedName, it.cachedOK = t, it.Topic, true
	}
	if t == nil || t.live.Load() == 0 {
		return
	}
	if it.Traceparent != "" && d.tracer != nil {
		d.deliverTraced(it, t)
		return
	}
	d.deliver(it, t)
}

// deliver is Deliver once the topic's subscriptions are found. The payload
// is decoded once, for the first subscription that asks for the message: a
// topic whose subscriptions here all asked for the encoding only
// (FormatEncoded) is not decoded at all.
func (d *Dispatcher) deliver(it *Item, t *topicSubs) {
	subs := *t.list.Load()
	msg := it.Message
	var meta, enc, both *messages.Delivery // each built once, shared by its subscriptions
	for _, s := range subs {
		if s.removed.Load() {
			continue
		}
		if (it.Exclude != "" && s.sub.key == it.Exclude) || plant.DropLocal(it.Node == d.node) {
			continue
		}
		var m interface{}
		switch {
		case s.format == FormatEncoded:
			if enc == nil {
				enc = it.delivery(nil, true)
			}
			m = enc
		case msg == nil:
			msg = decode(it)
			fallthrough
		default:
			m = msg
			if s.format == FormatBoth {
				if both == nil {
					both = it.delivery(msg, true)
				}
				m = both
			} else if s.withMeta {
				if meta == nil {
					meta = it.delivery(msg, false)
				}
				m = meta
			}
		}
		d.send(s, it.Topic, m)
	}
}

// delivery is the *messages.Delivery of it with msg, and with its encoding
// when encoded. The payload is capped at its length: the subscribers that
// share it cannot append into the array past it (a batch's next payload,
// or spare capacity another subscriber would append into as well).
func (it *Item) delivery(msg proto.Message, encoded bool) *messages.Delivery {
	dv := &messages.Delivery{Node: it.Node, Group: it.Group, Incarnation: it.Incarnation,
		Cursor: it.Cursor, Topic: it.Topic, Local: it.Local, StoreCursor: it.StoreCursor, Unstored: it.Unstored, Message: msg,
		Traceparent: it.Traceparent, Tracestate: it.Tracestate}
	if encoded {
		n := len(it.Payload)
		dv.PayloadType, dv.Payload = it.PayloadType, it.Payload[:n:n]
	}
	return dv
}

// DeliverLocal hands w to this node's subscribers only (LocalBroadcast):
// not buffered, no cursor.
func (d *Dispatcher) DeliverLocal(w *core.Write) {
	it := Item{Topic: w.Topic, Message: w.Msg, PayloadType: w.PayloadType, Payload: w.Payload,
		Exclude: w.Exclude, Node: d.node, Local: true}
	it.Traceparent, it.Tracestate = w.Trace.Headers()
	d.Deliver(&it)
}

// resolveNamed returns the PID and counting mailbox a named subscriber
// resolves to now, or nil when nothing answers to its name (an absent
// consumer). The caller holds sub.mu.
func (d *Dispatcher) resolveNamed(sub *subscriber) (*actor.PID, *countingMailbox) {
	if _, ok := d.system.ProcessRegistry.GetLocal(sub.key); !ok {
		return nil, nil
	}
	if sub.pid == nil {
		sub.pid = actor.NewPID(d.system.Address(), sub.key)
	}
	mb := lookupMailbox(d.system, sub.pid)
	if mb == nil && !sub.unbounded && sub.warned.CompareAndSwap(false, true) {
		d.log.Error().Str("subscriber", sub.key).
			Msg("named subscriber has no SubscriberMailbox, so its queue cannot be bounded: delivering without a bound")
	}
	return sub.pid, mb
}

func (d *Dispatcher) send(s *subscription, topic string, m interface{}) {
	sub := s.sub
	if !sub.named && sub.mb == nil { // unbounded (explicit opt-in)
		d.system.Root.Send(sub.pid, m)
		return
	}
	sub.mu.Lock()
	defer sub.mu.Unlock()
	pid, mb := sub.pid, sub.mb
	if sub.named {
		if pid, mb = d.resolveNamed(sub); pid == nil {
			sub.miss(topic)
			d.m.Dropped(core.DropAbsent)
			return
		}
		d.tellMissed(sub)
		if mb == nil {
			d.system.Root.Send(pid, m)
			return
		}
	}
	if plant.DropAfterResumed(sub.key) {
		return
	}
	n := mb.UserMessageCount()
	if n >= s.bound {
		if !sub.dropping {
			sub.dropping = true
			d.notice(pid, s, messages.BackPressureState_BACK_PRESSURE_STATE_DROPPING, n)
		}
		d.m.Dropped(core.DropBound)
		return
	}
	if sub.dropping {
		sub.dropping = false
		d.notice(pid, s, messages.BackPressureState_BACK_PRESSURE_STATE_RESUMED, n)
	}
	d.system.Root.Send(pid, m)
}

// miss records a message on topic that a named subscriber did not get
// because nothing answered to its name. The caller holds sub.mu.
func (sub *subscriber) miss(topic string) {
	if sub.missed == nil {
		sub.missed = &missedLog{}
	}
	if sub.missed.topics == nil {
		sub.missed.topics = map[string]uint64{}
	}
	sub.missed.topics[topic]++
}

// tellMissed sends a named subscriber that is running again what it missed
// while it was not: the CursorExpired notices, then one *messages.Missed
// per topic, before anything that follows the gap. The caller holds sub.mu.
func (d *Dispatcher) tellMissed(sub *subscriber) {
	ml := sub.missed
	if ml == nil {
		return
	}
	sub.missed = nil
	for _, ce := range ml.expired {
		d.system.Root.Send(sub.pid, ce)
	}
	topics := make([]string, 0, len(ml.topics))
	for topic := range ml.topics {
		topics = append(topics, topic)
	}
	sort.Strings(topics)
	for _, topic := range topics {
		n := &messages.Missed{Subscriber: sub.key, Topic: topic, Count: ml.topics[topic], Node: d.node}
		d.system.Root.Send(sub.pid, n)
		d.copyNotice(sub.pid, n)
		d.log.Warn().Str("subscriber", sub.key).Str("topic", topic).Uint64("missed", n.Count).
			Msg("named subscriber is back: told what it missed while nothing answered to its name")
	}
}

// notice sends one BackPressure transition to the subscriber and to the
// notice subscriber. Notices bypass the subscriber's bound: the notice that
// a subscriber is being dropped for must not be the first casualty of the
// dropping.
func (d *Dispatcher) notice(pid *actor.PID, s *subscription, state messages.BackPressureState, queued int) {
	sev := messages.Severity_SEVERITY_WARNING
	ev := d.log.Warn()
	if state == messages.BackPressureState_BACK_PRESSURE_STATE_RESUMED {
		sev = messages.Severity_SEVERITY_INFO
		ev = d.log.Info()
	}
	n := &messages.BackPressure{State: state, Severity: sev, Subscriber: s.sub.key,
		Bound: uint32(s.bound), QueueLen: uint64(queued), Node: d.node}
	d.system.Root.Send(pid, n)
	plant.Noticed(s.sub.key, state == messages.BackPressureState_BACK_PRESSURE_STATE_RESUMED)
	d.m.BackPressureNotice(state == messages.BackPressureState_BACK_PRESSURE_STATE_RESUMED)
	d.copyNotice(pid, n)
	ev.Str("subscriber", s.sub.key).Int("bound", s.bound).Int("queue_len", queued).
		Str("state", state.String()).Msg("subscriber back-pressure")
}

// copyNotice sends the notice subscriber a copy of n (a notice addressed to
// about), under its own bound: past it, copies are dropped, newest first,
// and it is told so once with a BackPressure notice about itself, and once
// more when copies resume.
func (d *Dispatcher) copyNotice(about *actor.PID, n proto.Message) {
	ns := d.notices.Load()
	if ns == nil || ns.pid.Equal(about) {
		return
	}
	ns.mu.Lock()
	defer ns.mu.Unlock()
	q := ns.mb.UserMessageCount()
	if q >= ns.bound {
		ns.dropped++
		d.m.Dropped(core.DropNoticeCopies)
		if !ns.dropping {
			ns.dropping = true
			d.system.Root.Send(ns.pid, &messages.BackPressure{State: messages.BackPressureState_BACK_PRESSURE_STATE_DROPPING,
				Severity: messages.Severity_SEVERITY_WARNING, Subscriber: Key(ns.pid), Bound: uint32(ns.bound),
				QueueLen: uint64(q), Node: d.node})
			d.log.Warn().Str("subscriber", Key(ns.pid)).Int("bound", ns.bound).Int("queue_len", q).
				Msg("notice subscriber back-pressure: dropping notice copies")
		}
		return
	}
	if ns.dropping {
		ns.dropping = false
		d.system.Root.Send(ns.pid, &messages.BackPressure{State: messages.BackPressureState_BACK_PRESSURE_STATE_RESUMED,
			Severity: messages.Severity_SEVERITY_INFO, Subscriber: Key(ns.pid), Bound: uint32(ns.bound),
			QueueLen: uint64(q), Node: d.node})
		d.log.Info().Str("subscriber", Key(ns.pid)).Uint64("dropped", ns.dropped).
			Msg("notice subscriber resumed")
		ns.dropped = 0
	}
	d.system.Root.Send(ns.pid, n)
}

// Expired tells every local subscriber, once, that messages from producer
// (node, group) were lost. Like a notice, it bypasses the bound; a named
// subscriber that is not running gets it when it is next resolved.
func (d *Dispatcher) Expired(ce *messages.CursorExpired) {
	d.expiredMu.Lock()
	defer d.expiredMu.Unlock()
	d.expiredEpoch++
	epoch, told := d.expiredEpoch, 0
	d.topics.Range(func(_, v any) bool {
		for _, s := range *v.(*topicSubs).list.Load() {
			if s.removed.Load() || s.sub.expired == epoch {
				continue
			}
			s.sub.expired = epoch
			told++
			d.expire(s.sub, ce)
		}
		return true
	})
	d.log.Warn().Str("producer", ce.Node).Uint32("group", ce.Group).Uint64("missed", ce.Missed).
		Uint64("incarnation", ce.ProducerIncarnation).Uint64("from", ce.From).Uint64("to", ce.To).
		Str("reason", ce.Reason).Int("subscribers", told).Msg("cursor expired: subscribers told to reload")
}

func (d *Dispatcher) expire(sub *subscriber, ce *messages.CursorExpired) {
	if !sub.named {
		d.system.Root.Send(sub.pid, ce)
		return
	}
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if pid, _ := d.resolveNamed(sub); pid != nil {
		d.tellMissed(sub)
		d.system.Root.Send(pid, ce)
		return
	}
	if sub.missed == nil {
		sub.missed = &missedLog{}
	}
	for i, old := range sub.missed.expired {
		if old.Node == ce.Node && old.Group == ce.Group { // one per producer: merged
			merged := proto.Clone(ce).(*messages.CursorExpired)
			merged.AllStored = old.AllStored && ce.AllStored
			if old.Missed == 0 || ce.Missed == 0 {
				merged.Missed = 0 // unknown
			} else {
				merged.Missed = old.Missed + ce.Missed
			}
			if old.RangeKnown() && ce.RangeKnown() && old.ProducerIncarnation == ce.ProducerIncarnation && old.To == ce.From {
				merged.From = old.From // one range: [old.From, ce.To)
			} else {
				merged.ProducerIncarnation, merged.From, merged.To = 0, 0, 0 // not one range: unknown
			}
			sub.missed.expired[i] = merged
			return
		}
	}
	sub.missed.expired = append(sub.missed.expired, ce)
}

// decode decodes it's payload. A payload this node cannot decode is
// delivered as *messages.Undecodable, so the subscriber is told rather than
// left with a silent gap.
func decode(it *Item) proto.Message {
	var msg proto.Message
	var err error
	if it.Type.Resolved() {
		msg, err = it.Type.Decode(it.Payload)
	} else {
		msg, err = messages.Decode(it.PayloadType, it.Payload)
	}
	if err != nil {
		return &messages.Undecodable{Topic: it.Topic, PayloadType: it.PayloadType,
			Payload: append([]byte(nil), it.Payload...), Error: err.Error()}
	}
	return msg
}

// SubscriberCount is the number of subscriptions to topic.
func (d *Dispatcher) SubscriberCount(topic string) int {
	if t := d.topic(topic); t != nil {
		return int(t.live.Load())
	}
	return 0
}

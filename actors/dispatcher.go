package actors

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/echopubsub/echopubsub/internal/plant"
	"github.com/echopubsub/echopubsub/messages"
)

// Dispatcher hands messages to this node's subscribers. It is the one place
// that decides who receives what locally, and applies back-pressure.
//
// Every delivery path calls it: workers (batches from producers on other
// nodes), producers (their own node's subscribers, at write time) and
// LocalBroadcast. Those run on different goroutines, so the subscription
// table is published as an immutable snapshot: the registry actor is its
// only writer and swaps in a new copy on every change; readers load it with
// one atomic read and never lock the table.
//
// The one mutable state per subscriber is whether it is being dropped for.
// Its check, its transition, the transition's notice and the send happen
// under the subscriber's own mutex: otherwise a deliverer could drop a
// message relying on a DROPPING notice that another deliverer has decided
// on but not yet enqueued, and a third could resume and deliver past the
// hole first, which the subscriber would see as a silent gap. The mutex is
// per subscriber, so deliveries to different subscribers never contend.
type Dispatcher struct {
	system *actor.ActorSystem
	node   string
	log    zerolog.Logger
	table  atomic.Pointer[table]
}

type table struct {
	topics map[string][]*subscription
	// subscribers holds each subscriber once, for CursorExpired.
	subscribers []*subscriber
	notices     *actor.PID
}

// subscriber is one PID, or one registered name resolved at send time.
type subscriber struct {
	key       string     // pidKey(pid) or the name
	pid       *actor.PID // for a name: the PID the name resolves to
	named     bool
	mb        *countingMailbox // nil for a name or an unbounded opt-in
	unbounded bool
	warned    atomic.Bool

	mu       sync.Mutex // orders check, transition, notice and send (see Dispatcher)
	dropping bool       // guarded by mu
}

type subscription struct {
	sub      *subscriber
	topic    string
	bound    int
	withMeta bool
}

func newDispatcher(system *actor.ActorSystem, node string, log zerolog.Logger) *Dispatcher {
	d := &Dispatcher{system: system, node: node, log: log}
	d.table.Store(&table{topics: map[string][]*subscription{}})
	return d
}

// Item is one message for Deliver.
type Item struct {
	Topic string
	// Message is the message to hand out; when nil, Payload is decoded (as
	// Type, or else as PayloadType looked up by name), once, and only if the
	// topic has a subscriber here.
	Message     proto.Message
	PayloadType string
	Payload     []byte
	Type        protoreflect.MessageType
	// Exclude is the key of a subscriber that must not receive it
	// (BroadcastFrom), "" for none.
	Exclude string
	// Meta fields, for subscriptions that asked for a *messages.Delivery.
	Node        string
	Group       uint32
	Incarnation uint64
	Cursor      uint64
	Local       bool
}

// Deliver sends it to every subscriber of its topic, subject to each
// subscriber's bound.
func (d *Dispatcher) Deliver(it *Item) {
	subs := d.table.Load().topics[it.Topic]
	if len(subs) == 0 {
		return
	}
	if it.Message == nil {
		it.Message = decode(it)
	}
	var meta *messages.Delivery
	for _, s := range subs {
		if (it.Exclude != "" && s.sub.key == it.Exclude) || plant.DropLocal(it.Node == d.node) {
			continue
		}
		var m interface{} = it.Message
		if s.withMeta {
			if meta == nil {
				meta = &messages.Delivery{Node: it.Node, Group: it.Group, Incarnation: it.Incarnation,
					Cursor: it.Cursor, Topic: it.Topic, Local: it.Local, Message: it.Message}
			}
			m = meta
		}
		d.send(s, m)
	}
}

// resolve returns where to send for sub: its PID and counting mailbox, or
// nil when a named subscriber is not running (an absent consumer, skipped).
func (d *Dispatcher) resolve(sub *subscriber) (*actor.PID, *countingMailbox) {
	if !sub.named {
		return sub.pid, sub.mb
	}
	if _, ok := d.system.ProcessRegistry.GetLocal(sub.pid.Id); !ok {
		return nil, nil
	}
	mb := lookupMailbox(sub.pid)
	if mb == nil && !sub.unbounded && sub.warned.CompareAndSwap(false, true) {
		d.log.Error().Str("subscriber", sub.key).
			Msg("named subscriber has no SubscriberMailbox, so its queue cannot be bounded: delivering without a bound")
	}
	return sub.pid, mb
}

func (d *Dispatcher) send(s *subscription, m interface{}) {
	pid, mb := d.resolve(s.sub)
	if pid == nil || (mb != nil && plant.DropAfterResumed(s.sub.key)) {
		return
	}
	if mb == nil { // unbounded (explicit opt-in)
		d.system.Root.Send(pid, m)
		return
	}
	sub := s.sub
	sub.mu.Lock()
	defer sub.mu.Unlock()
	n := mb.UserMessageCount()
	if n >= s.bound {
		if !sub.dropping {
			sub.dropping = true
			d.notice(pid, s, messages.BackPressureState_BACK_PRESSURE_STATE_DROPPING, n)
		}
		return
	}
	if sub.dropping {
		sub.dropping = false
		d.notice(pid, s, messages.BackPressureState_BACK_PRESSURE_STATE_RESUMED, n)
	}
	d.system.Root.Send(pid, m)
}

// notice sends one BackPressure transition to the subscriber and to the
// notice subscriber. Notices bypass the bound: the notice that a subscriber
// is being dropped for must not be the first casualty of the dropping.
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
	if notices := d.table.Load().notices; notices != nil && !notices.Equal(pid) {
		d.system.Root.Send(notices, n)
	}
	ev.Str("subscriber", s.sub.key).Int("bound", s.bound).Int("queue_len", queued).
		Str("state", state.String()).Msg("subscriber back-pressure")
}

// Expired tells every local subscriber that messages from producer
// (node, group) were lost. Like a notice, it bypasses the bound.
func (d *Dispatcher) Expired(ce *messages.CursorExpired) {
	t := d.table.Load()
	for _, sub := range t.subscribers {
		if pid, _ := d.resolve(sub); pid != nil {
			d.system.Root.Send(pid, ce)
		}
	}
	d.log.Warn().Str("producer", ce.Node).Uint32("group", ce.Group).Uint64("missed", ce.Missed).
		Str("reason", ce.Reason).Int("subscribers", len(t.subscribers)).Msg("cursor expired: subscribers told to reload")
}

// decode decodes it's payload. A payload this node cannot decode is
// delivered as *messages.Undecodable, so the subscriber is told rather than
// left with a silent gap.
func decode(it *Item) proto.Message {
	var msg proto.Message
	var err error
	if it.Type != nil {
		msg = it.Type.New().Interface()
		if err = proto.Unmarshal(it.Payload, msg); err != nil {
			err = fmt.Errorf("messages: decode %s: %w", it.PayloadType, err)
		}
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
	return len(d.table.Load().topics[topic])
}

package actors

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/echopubsub/echopubsub/internal/plant"
	"github.com/echopubsub/echopubsub/messages"
)

// known is what a worker remembers of one producer (one node's producer for
// this worker's group).
type known struct {
	incarnation uint64
	// expected is the next cursor to deliver: everything below it was handed
	// to the subscribers. Entries below it are redeliveries and are skipped.
	expected uint64
}

// workerTable outlives a crash of the worker actor: the group hands it to
// the restarted incarnation (one incarnation runs at a time). Losing it
// would let a producer restart during a worker restart go unnoticed.
type workerTable struct {
	producers map[string]*known
}

type worker struct {
	cfg   Config
	group uint32
	node  string
	inc   uint64 // this node's incarnation
	table *workerTable
	d     *Dispatcher
	hook  FaultHook
	log   zerolog.Logger
}

func newWorker(cfg Config, group uint32, node string, inc uint64, d *Dispatcher, hook FaultHook, log zerolog.Logger) actor.Producer {
	table := &workerTable{producers: map[string]*known{}}
	log = log.With().Uint32("group", group).Logger()
	return func() actor.Actor {
		return &worker{cfg: cfg, group: group, node: node, inc: inc, table: table, d: d, hook: hook, log: log}
	}
}

func (w *worker) Receive(ctx actor.Context) {
	var from string
	switch m := ctx.Message().(type) {
	case *messages.Batch:
		from = m.ProducerNode
	case *messages.Register:
		from = m.ProducerNode
	case *messages.Expire:
		from = m.ProducerNode
	default:
		return // lifecycle messages
	}
	req := ctx.Message().(proto.Message)
	if w.hook != nil {
		if err := w.hook.Receive(from, req); err != nil {
			return // dropped unanswered, as a lost request
		}
	}
	var res proto.Message
	switch m := req.(type) {
	case *messages.Batch:
		res = w.batch(m)
	case *messages.Register:
		res = w.register(m)
	case *messages.Expire:
		res = w.expire(m)
	}
	if ctx.Sender() != nil {
		ctx.Respond(res)
	}
	if w.hook != nil {
		w.hook.Acked(from, req)
	}
}

// check rejects a request that is not for this worker.
func (w *worker) check(version uint32, name string, group uint32, node string) error {
	switch {
	case version != messages.ProtocolVersion:
		return fmt.Errorf("protocol version %d not supported (this node speaks %d)", version, messages.ProtocolVersion)
	case name != w.cfg.Name:
		return fmt.Errorf("pubsub name %q does not match %q", name, w.cfg.Name)
	case group != w.group:
		return fmt.Errorf("group %d sent to the worker of group %d", group, w.group)
	case node == "":
		return fmt.Errorf("producer node is empty")
	}
	return nil
}

func (w *worker) reject(what, node string, err error) *messages.BatchAck {
	w.log.Error().Str("producer", node).Err(err).Msgf("rejected %s", what)
	return &messages.BatchAck{Status: messages.AckStatus_ACK_STATUS_REJECTED, WorkerNode: w.node, WorkerIncarnation: w.inc, Error: err.Error()}
}

func (w *worker) register(m *messages.Register) *messages.RegisterAck {
	if err := w.check(m.ProtocolVersion, m.PubsubName, m.Group, m.ProducerNode); err != nil {
		r := w.reject("registration", m.ProducerNode, err)
		return &messages.RegisterAck{Status: r.Status, WorkerNode: w.node, WorkerIncarnation: w.inc, Error: r.Error}
	}
	k := w.table.producers[m.ProducerNode]
	switch {
	case k == nil:
		k = &known{incarnation: m.ProducerIncarnation, expected: m.NextCursor}
		w.table.producers[m.ProducerNode] = k
		if m.MissedWrites {
			w.d.Expired(&messages.CursorExpired{Node: m.ProducerNode, Group: m.Group, Reason: "writes made while this node was being reached were not replayed"})
		}
	case k.incarnation != m.ProducerIncarnation:
		w.d.Expired(&messages.CursorExpired{Node: m.ProducerNode, Group: m.Group, Reason: "producer restarted"})
		k.incarnation, k.expected = m.ProducerIncarnation, m.NextCursor
	case m.MissedWrites:
		w.d.Expired(&messages.CursorExpired{Node: m.ProducerNode, Group: m.Group, Reason: "writes made while this node was away were not replayed"})
		k.expected = m.NextCursor
	case m.NextCursor > k.expected:
		w.d.Expired(&messages.CursorExpired{Node: m.ProducerNode, Group: m.Group, Missed: m.NextCursor - k.expected, Reason: "producer skipped messages"})
		k.expected = m.NextCursor
	}
	w.log.Debug().Str("producer", m.ProducerNode).Uint64("next", k.expected).Msg("producer registered")
	return &messages.RegisterAck{Status: messages.AckStatus_ACK_STATUS_OK, WorkerNode: w.node, WorkerIncarnation: w.inc, NextCursor: k.expected}
}

func (w *worker) batch(m *messages.Batch) *messages.BatchAck {
	if err := w.check(m.ProtocolVersion, m.PubsubName, m.Group, m.ProducerNode); err != nil {
		return w.reject("batch", m.ProducerNode, err)
	}
	if err := m.Validate(); err != nil {
		return w.reject("batch", m.ProducerNode, err)
	}
	k := w.table.producers[m.ProducerNode]
	if k == nil || k.incarnation != m.ProducerIncarnation {
		return &messages.BatchAck{Status: messages.AckStatus_ACK_STATUS_UNKNOWN_PRODUCER, WorkerNode: w.node, WorkerIncarnation: w.inc}
	}
	if m.FirstCursor > k.expected {
		// Never a silent gap, whoever is at fault.
		w.d.Expired(&messages.CursorExpired{Node: m.ProducerNode, Group: m.Group, Missed: m.FirstCursor - k.expected, Reason: "gap in received stream"})
		k.expected = m.FirstCursor
	}
	it := Item{Node: m.ProducerNode, Group: m.Group, Incarnation: m.ProducerIncarnation}
	types := make([]protoreflect.MessageType, len(m.PayloadTypes)) // resolved once per batch, when needed
	entries := m.Entries()
	for c := m.FirstCursor; ; c++ {
		topic, ti, payload, exclude, only, ok := entries.Next()
		if !ok {
			break
		}
		if c < k.expected {
			continue // already delivered: a redelivery after a lost ack
		}
		plant.AckFirst(&k.expected, c, w.hook, m.ProducerNode)
		if (only == "" || only == w.node) && !plant.SkipEntry() {
			if types[ti] == nil {
				if mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(m.PayloadTypes[ti])); err == nil {
					types[ti] = mt
				}
			}
			it.Topic, it.Message, it.PayloadType, it.Payload, it.Type = topic, nil, m.PayloadTypes[ti], payload, types[ti]
			it.Exclude, it.Cursor = exclude, c
			w.d.Deliver(&it)
		}
		k.expected = c + 1
		if w.hook != nil {
			w.hook.Delivered(m.ProducerNode, c)
		}
	}
	return &messages.BatchAck{Status: messages.AckStatus_ACK_STATUS_OK, NextCursor: k.expected, WorkerNode: w.node, WorkerIncarnation: w.inc}
}

func (w *worker) expire(m *messages.Expire) *messages.BatchAck {
	if err := w.check(m.ProtocolVersion, m.PubsubName, m.Group, m.ProducerNode); err != nil {
		return w.reject("expire", m.ProducerNode, err)
	}
	k := w.table.producers[m.ProducerNode]
	if k == nil || k.incarnation != m.ProducerIncarnation {
		return &messages.BatchAck{Status: messages.AckStatus_ACK_STATUS_UNKNOWN_PRODUCER, WorkerNode: w.node, WorkerIncarnation: w.inc}
	}
	if m.NextCursor > k.expected { // a retried Expire whose ack was lost is not told twice
		w.d.Expired(&messages.CursorExpired{Node: m.ProducerNode, Group: m.Group, Missed: m.Missed, Reason: "fell behind the buffer"})
		k.expected = m.NextCursor
	}
	return &messages.BatchAck{Status: messages.AckStatus_ACK_STATUS_OK, NextCursor: k.expected, WorkerNode: w.node, WorkerIncarnation: w.inc}
}

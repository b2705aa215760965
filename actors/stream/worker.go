package stream

import (
	"context"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/actors/delivery"
	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/internal/faults"
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
	seen     time.Time // last request from this producer
	// retired: this incarnation ended with a graceful Stop and everything
	// below expected was delivered or told; its successor joins silently.
	retired bool
	// toldJoin: the join_id of the join (missed_writes) that seeded this
	// entry and told the subscribers CursorExpired (0: none); reported in
	// RegisterAck.told_join.
	toldJoin uint64
	// The last batch worker.store handed to the durable store: producer
	// cursors storedFrom up to storedTo, each entry's store cursor at
	// storedAt[c-storedFrom] (0 or nil: not stored here). The table
	// outlives a crash of the worker: when it crashes in the middle of
	// delivering that batch, the resend reuses the rows of the entries
	// from expected to storedTo instead of appending them again.
	storedFrom, storedTo uint64
	storedAt             []uint64
}

// storedCursor is the store cursor the last stored batch gave producer
// cursor c (0: none).
func (k *known) storedCursor(c uint64) uint64 {
	if c < k.storedFrom || c-k.storedFrom >= uint64(len(k.storedAt)) {
		return 0
	}
	return k.storedAt[c-k.storedFrom]
}

// maxProducers bounds a worker's producer table: one entry per producing
// node (a restarted node replaces its entry). A table that is full drops the
// producers silent for ForgetAfter (nodes gone for good, say after many
// address changes), keeping a tombstone; if none is, a join is refused and
// the producer retries.
const maxProducers = 1024

// tombstone is a dropped producer: its incarnation, whether it retired,
// and its expected cursor then.
type tombstone struct {
	incarnation uint64
	retired     bool
	expected    uint64
}

// workerTable outlives a crash of the worker actor: the group hands it to
// the restarted incarnation (one incarnation runs at a time). Losing it
// would let a producer restart during a worker restart go unnoticed.
type workerTable struct {
	producers map[string]*known
	// forgot holds what the worker knew of producers it dropped (the table
	// was full and they had been silent for ForgetAfter), so their return is
	// told apart from a first join. Bounded like the table.
	forgot map[string]tombstone
}

type worker struct {
	cfg     core.Config
	group   uint32
	node    string
	inc     uint64    // this node's incarnation
	started time.Time // when this node's pubsub started (monotonic)
	table   *workerTable
	d       *delivery.Dispatcher
	hook    faults.Hook
	m       *core.Metrics
	log     zerolog.Logger
	// version is the newest protocol version this worker speaks: the
	// current one, or the previous one in a test build pinned to it
	// (faults.Pinned), which then speaks nothing newer.
	version uint32
	// dur, when set, is told what the worker receives and loses, so that
	// a node-local durable store holds it (see core.Durable).
	dur core.Durable
	// ready is when this node's Start returned (core.Runtime.ReadyAt); nil
	// in tests of the worker alone, which report the age of started.
	ready func() (time.Time, bool)
	// departed, when set (core.Runtime.SetDeparted), is told that a node's
	// producer retired here (its pubsub stopped on purpose) or registered
	// again, so that the loss of its connection is not logged as an error.
	departed func(node string, gone bool)
	// pending are the OK answers to batches not sent yet, one per producer
	// node (the last: it acknowledges the ones before), and flushQueued
	// whether a flushAcks is in the mailbox (see answer).
	pending     []pendingAck
	flushQueued bool
	// lastAnswer is when held answers last went (core.Monotonic); ackTimer
	// sends the flushAcks that waits for AckInterval since then, and
	// timerArmed says it will (see hold).
	lastAnswer int64
	ackTimer   *time.Timer
	timerArmed bool
	// perBatch: answer as a build before cumulative answers (a test build:
	// faults.PerBatch).
	perBatch bool
}

// pendingAck is an OK answer to a producer's batches, held until the
// batches queued behind it are handled (flushAcks).
type pendingAck struct {
	node string
	to   *actor.PID
	ack  *messages.BatchAck
	reqs []proto.Message // with a hook: the batches it answers, for hook.Acked when it goes
}

// flushAcks sends the pending answers: it is queued behind the batches in
// the mailbox when the first answer is held, or sent by ackTimer (timer)
// when the last answers went less than AckInterval ago.
type flushAcks struct{ timer bool }

// startedAgo is what a probe's answer reports (RegisterAck.started_ago_nanos):
// how long ago this node's Start returned, or 0 while Start still runs.
// Either way the instant it names is not before Start was called (the
// worker exists only from then) and not after Start returned. A producer
// turns it into the instant the node is owed messages from with
// ringbuf.JoinSince, the join boundary's one home.
func (w *worker) startedAgo() uint64 {
	if w.ready == nil {
		return uint64(time.Since(w.started))
	}
	at, ok := w.ready()
	if !ok {
		return 0
	}
	return uint64(time.Since(at))
}

// NewWorker makes the worker of pool group group: it receives the batches
// of every other member's producer of that group and hands them to this
// node's subscribers through d, in order, before acknowledging them.
func NewWorker(rt *core.Runtime, group uint32, d *delivery.Dispatcher) actor.Producer {
	p := newWorker(rt.Cfg, group, rt.Node, rt.Incarnation, rt.Started, d, rt.Hook, rt.Metrics, rt.Log)
	return func() actor.Actor {
		w := p().(*worker)
		w.dur, w.ready, w.departed = rt.Durable, rt.ReadyAt, rt.SetDeparted
		return w
	}
}

func newWorker(cfg core.Config, group uint32, node string, inc uint64, started time.Time, d *delivery.Dispatcher, hook faults.Hook, m *core.Metrics, log zerolog.Logger) actor.Producer {
	table := &workerTable{producers: map[string]*known{}, forgot: map[string]tombstone{}}
	log = log.With().Uint32("group", group).Logger()
	return func() actor.Actor {
		return &worker{cfg: cfg, group: group, node: node, inc: inc, started: started, table: table, d: d, hook: hook, m: m, log: log,
			version: faults.Version(hook), perBatch: faults.AnswersPerBatch(hook)}
	}
}

func (w *worker) Receive(ctx actor.Context) {
	msg := ctx.Message()
	switch m := msg.(type) {
	case *flushAcks:
		if m.timer {
			w.timerArmed = false
		} else {
			w.flushQueued = false
		}
		w.flush(ctx)
		return
	case *actor.Stopping, *actor.Restarting:
		// Answers held for batches this worker delivered go now: the
		// flushAcks behind them would not run.
		w.flush(ctx)
		if w.ackTimer != nil {
			w.ackTimer.Stop()
		}
		return
	}
	if b, ok := msg.(*messages.Batch); ok {
		// A producer's batch is sent encoded (messages.Encoded): the wire
		// decodes it; one handed over in process is decoded here, before
		// its producer is read. Bad bytes leave the empty batch, which
		// check rejects.
		if d, err := b.Decoded(); err == nil {
			msg = d
		}
	}
	var from string
	switch m := msg.(type) {
	case *messages.Batch:
		from = m.ProducerNode
	case *messages.Register:
		from = m.ProducerNode
	case *messages.Expire:
		from = m.ProducerNode
	case *messages.Retire:
		from = m.ProducerNode
	default:
		return // lifecycle messages
	}
	req := msg.(proto.Message)
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
	case *messages.Retire:
		res = w.retire(m)
	}
	if w.departed != nil {
		w.noteDeparture(req, res)
	}
	if ctx.Sender() != nil {
		w.answer(ctx, from, req, res)
	} else if w.hook != nil {
		w.hook.Acked(from, req)
	}
}

// answer sends res to the sender of req. An OK answer to a batch sent by a
// producer itself (not through a future: this build's producers, to a
// worker that says RegisterAck.cumulative_answers) is held until the
// batches queued behind it are handled, and until AckInterval has passed
// since the last answers went: one answer then acknowledges them all, as
// its cursor covers them (cumulative acks: a receiving node wrote an
// answer per batch, and its producer read one). Every other answer goes
// at once, after the held ones, so that a producer gets its answers in the
// order it sent the requests. The hook is told an answer went when it
// goes.
func (w *worker) answer(ctx actor.Context, from string, req, res proto.Message) {
	b, isBatch := req.(*messages.Batch)
	ack, isAck := res.(*messages.BatchAck)
	if isBatch && isAck && !w.perBatch {
		ack.ProducerIncarnation, ack.BatchFirstCursor = b.ProducerIncarnation, proto.Uint64(b.FirstCursor)
		if ack.Status == messages.AckStatus_ACK_STATUS_OK && core.IsProducerID(ctx.Sender().Id) {
			w.hold(ctx, from, req, ack, b.Awaited)
			return
		}
	}
	w.flush(ctx)
	ctx.Respond(res)
	if w.hook != nil {
		w.hook.Acked(from, req)
	}
}

// hold keeps ack, an OK answer to batch req from node from, until flush.
// It replaces the answer held for that node, which its cursor covers,
// unless they differ in stored: one answer says stored of every batch it
// covers, so the held one goes first.
//
// The held answers go at the mailbox's turn (a flushAcks queued behind the
// batches in it) when the last ones went AckInterval ago or more, or when
// the producer asked for it at once (a receipt waits on the batch, it
// filled the producer's window or its share of the buffer, or it went
// under a BatchInterval: messages.Batch.awaited, see producer.batch);
// otherwise when AckInterval has passed since (ackTimer). Under a steady
// stream a node then reads and writes one answer per AckInterval, not one
// per batch of a few messages: at 10,000 msg/s that was most of the
// publishing node's system calls (docs/benchmarks.md, "Figures behind
// code comments"). Only the producer's buffer waits for it:
// every batch was delivered before its answer was held.
func (w *worker) hold(ctx actor.Context, from string, req proto.Message, ack *messages.BatchAck, awaited bool) {
	i := 0
	for i < len(w.pending) && w.pending[i].node != from {
		i++
	}
	if i == len(w.pending) {
		w.pending = append(w.pending, pendingAck{node: from})
	} else if w.pending[i].ack.Stored != ack.Stored {
		w.send(ctx, &w.pending[i])
	}
	pa := &w.pending[i]
	pa.to, pa.ack = ctx.Sender(), ack
	if w.hook != nil {
		pa.reqs = append(pa.reqs, req)
	}
	if w.flushQueued {
		return
	}
	var wait time.Duration
	if !awaited && w.lastAnswer != 0 {
		wait = time.Duration(w.lastAnswer + int64(w.cfg.AckInterval) - core.Monotonic())
	}
	switch {
	case wait <= 0:
		w.flushQueued = true
		ctx.Send(ctx.Self(), &flushAcks{})
	case w.timerArmed:
	case w.ackTimer == nil:
		w.timerArmed = true
		self, root := ctx.Self(), ctx.ActorSystem().Root
		w.ackTimer = time.AfterFunc(wait, func() { root.Send(self, &flushAcks{timer: true}) })
	default:
		w.timerArmed = true
		w.ackTimer.Reset(wait)
	}
}

// send sends the answer pa holds and empties it.
func (w *worker) send(ctx actor.Context, pa *pendingAck) {
	ctx.Send(pa.to, pa.ack)
	if w.hook != nil {
		for _, r := range pa.reqs {
			w.hook.Acked(pa.node, r)
		}
	}
	pa.to, pa.ack, pa.reqs = nil, nil, pa.reqs[:0]
}

// flush sends the held answers.
func (w *worker) flush(ctx actor.Context) {
	if len(w.pending) > 0 && w.cfg.AckInterval > 0 {
		w.lastAnswer = core.Monotonic()
	}
	for i := range w.pending {
		if w.pending[i].ack != nil {
			w.send(ctx, &w.pending[i])
		}
	}
	clear(w.pending)
	w.pending = w.pending[:0]
}

// noteDeparture tells departed of an accepted Retire (the node stopped on
// purpose) and of an accepted Register (it runs again).
func (w *worker) noteDeparture(req, res proto.Message) {
	switch m := req.(type) {
	case *messages.Retire:
		if a, ok := res.(*messages.BatchAck); ok && a.Status == messages.AckStatus_ACK_STATUS_OK {
			w.departed(m.ProducerNode, true)
		}
	case *messages.Register:
		if a, ok := res.(*messages.RegisterAck); ok && a.Status == messages.AckStatus_ACK_STATUS_OK {
			w.departed(m.ProducerNode, false)
		}
	}
}

// check rejects a request that is not for this worker.
func (w *worker) check(version uint32, name string, group uint32, node string) error {
	switch {
	case version != messages.PreviousProtocolVersion && version != w.version:
		// The wording is version 1's: a producer that gets it back without
		// supported_versions knows the worker speaks version 1 only.
		return &messages.VersionError{Version: version, Speaks: w.version}
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

// register answers a probe with the worker's view, or seeds the worker with a
// join. Neither can move a cursor backwards or skip one forwards: a probe
// changes nothing, and a join only creates the entry of a producer
// incarnation the worker does not hold yet.
func (w *worker) register(m *messages.Register) *messages.RegisterAck {
	if err := w.check(m.ProtocolVersion, m.PubsubName, m.Group, m.ProducerNode); err != nil {
		return w.refuse("registration", m.ProducerNode, err)
	}
	k := w.table.producers[m.ProducerNode]
	if k != nil && m.ProducerIncarnation < k.incarnation {
		return w.refuse("registration", m.ProducerNode, fmt.Errorf("producer incarnation %d is older than the one this node holds (%d): a stale request", m.ProducerIncarnation, k.incarnation))
	}
	if m.ProtocolVersion == messages.PreviousProtocolVersion {
		var refused *messages.RegisterAck
		if k, refused = w.registerV1(m, k); refused != nil {
			return refused
		}
	} else if m.Join {
		if m.WorkerIncarnation != w.inc {
			return w.refuse("join", m.ProducerNode, fmt.Errorf("join computed for incarnation %d of this node, which is %d now", m.WorkerIncarnation, w.inc))
		}
		if k == nil && len(w.table.producers) >= maxProducers && !w.prune() {
			return w.refuse("join", m.ProducerNode, fmt.Errorf("producer table full (%d producers)", maxProducers))
		}
		// What the worker knew of an older incarnation of this producer
		// node: its entry, or its tombstone.
		old, hadOld := tombstone{}, false
		if k != nil && k.incarnation != m.ProducerIncarnation {
			old, hadOld = tombstone{incarnation: k.incarnation, retired: k.retired, expected: k.expected}, true
		} else if t, ok := w.table.forgot[m.ProducerNode]; ok && k == nil && t.incarnation != m.ProducerIncarnation {
			old, hadOld = t, true
		}
		if k == nil || hadOld {
			var err error
			if k, err = w.seed(m, k, old, hadOld, "messages written after this node started were overwritten before it was reached"); err != nil {
				return w.refuse("join", m.ProducerNode, err)
			}
		}
		// else: this producer incarnation joined already (a retried or late
		// join): keep the worker's own cursor.
		w.log.Debug().Str("producer", m.ProducerNode).Uint64("next", k.expected).Msg("producer joined")
	}
	if w.version == messages.PreviousProtocolVersion { // a version 1 build answers with version 1's fields only
		return &messages.RegisterAck{Status: messages.AckStatus_ACK_STATUS_OK, WorkerNode: w.node, WorkerIncarnation: w.inc, NextCursor: k.expected}
	}
	ack := &messages.RegisterAck{Status: messages.AckStatus_ACK_STATUS_OK, WorkerNode: w.node, WorkerIncarnation: w.inc,
		StartedAgoNanos: w.startedAgo(), SupportedVersions: messages.SupportedVersions(), CumulativeAnswers: !w.perBatch}
	if k != nil && k.incarnation == m.ProducerIncarnation {
		k.seen = time.Now()
		ack.Known, ack.NextCursor, ack.ToldJoin = true, k.expected, k.toldJoin
	} else if t, ok := w.table.forgot[m.ProducerNode]; ok && t.incarnation == m.ProducerIncarnation {
		ack.Forgot = true // this very incarnation was dropped: where it was is lost
	}
	return ack
}

// seed makes k (nil: a new entry) the entry of the producer incarnation of
// m at m.NextCursor, telling the subscribers CursorExpired when messages
// they were owed are gone: missedWrites (said with reason missed), or an
// older incarnation that did not retire.
func (w *worker) seed(m *messages.Register, k *known, old tombstone, hadOld bool, missed string) (*known, error) {
	var ce *messages.CursorExpired
	told := uint64(0)
	switch {
	case m.MissedWrites:
		// This incarnation's cursors below the join's (ringbuf's
		// Decision.To): from where this node was when it forgot this very
		// incarnation, else from its start (none reached this node).
		ce = &messages.CursorExpired{Node: m.ProducerNode, Group: m.Group, Reason: missed,
			ProducerIncarnation: m.ProducerIncarnation, To: m.NextCursor}
		if t, ok := w.table.forgot[m.ProducerNode]; ok && k == nil && t.incarnation == m.ProducerIncarnation {
			ce.From = t.expected
		}
		if hadOld && !old.retired { // the old incarnation's end is lost too: one notice, two incarnations
			ce.ProducerIncarnation, ce.From, ce.To = 0, 0, 0
		}
		told = m.JoinId
	case hadOld && !old.retired:
		// Whatever the old incarnation wrote and did not deliver is
		// gone, unless it retired: then nothing was left untold. Where
		// it ended is known when its node says so (a graceful Stop,
		// recorded in its store).
		ce = &messages.CursorExpired{Node: m.ProducerNode, Group: m.Group, Reason: "producer restarted",
			ProducerIncarnation: old.incarnation, From: old.expected}
		if m.PredecessorIncarnation == old.incarnation && m.PredecessorFinal >= old.expected {
			if ce.Missed = m.PredecessorFinal - old.expected; ce.Missed == 0 {
				ce = nil // it ended where this node was: nothing lost
			} else {
				ce.Reason, ce.To = "producer stopped before this node got everything", m.PredecessorFinal
			}
		}
	case !hadOld && m.PredecessorOwed:
		// The producer's node recorded an earlier incarnation that wrote
		// after this node started, and this node never held it: what it
		// wrote for this node is lost (the count, the incarnation and the
		// range are not known).
		ce = &messages.CursorExpired{Node: m.ProducerNode, Group: m.Group,
			Reason: "an earlier incarnation of the producer wrote after this node started and never reached it"}
	}
	next := m.NextCursor
	if w.dur != nil { // recorded first: a store that fails changes nothing (the producer joins again)
		pos := core.ProducerPos{Node: m.ProducerNode, Group: m.Group, Incarnation: m.ProducerIncarnation, Next: m.NextCursor}
		var err error
		if ce != nil {
			err = w.dur.Lost(pos, ce)
		} else {
			next, err = w.dur.Joined(pos, hadOld, m.PredecessorIncarnation, m.PredecessorFinal)
		}
		if err != nil {
			return k, fmt.Errorf("durable store: %w", err)
		}
	}
	if ce != nil {
		w.expired(ce)
	}
	if k == nil {
		k = &known{}
		w.table.producers[m.ProducerNode] = k
	}
	*k = known{incarnation: m.ProducerIncarnation, expected: next, toldJoin: told}
	delete(w.table.forgot, m.ProducerNode)
	return k, nil
}

// registerV1 applies a Register of protocol version 1 (a node not upgraded
// yet), with version 1's meaning: one step, no probe. A producer
// incarnation the worker does not hold is seeded at next_cursor (told
// CursorExpired with missed_writes, or when it replaces an incarnation that
// did not retire); for one it holds, a next_cursor ahead of the worker's is
// a skip, told CursorExpired, and one at or below it changes nothing (so a
// late or repeated Register never moves a cursor backwards). It returns the
// entry, or the refusal.
func (w *worker) registerV1(m *messages.Register, k *known) (*known, *messages.RegisterAck) {
	if k == nil && len(w.table.producers) >= maxProducers && !w.prune() {
		return nil, w.refuse("registration", m.ProducerNode, fmt.Errorf("producer table full (%d producers)", maxProducers))
	}
	old, hadOld := tombstone{}, false
	if k != nil && k.incarnation != m.ProducerIncarnation {
		old, hadOld = tombstone{incarnation: k.incarnation, retired: k.retired}, true
	} else if t, ok := w.table.forgot[m.ProducerNode]; ok && k == nil && t.incarnation != m.ProducerIncarnation {
		old, hadOld = t, true
	}
	switch {
	case k == nil || hadOld:
		var err error
		if k, err = w.seed(m, k, old, hadOld, "messages written while this node was being reached were not replayed"); err != nil {
			return nil, w.refuse("registration", m.ProducerNode, err)
		}
	case m.NextCursor > k.expected:
		w.expired(&messages.CursorExpired{Node: m.ProducerNode, Group: m.Group, Missed: m.NextCursor - k.expected, Reason: "producer skipped messages",
			ProducerIncarnation: m.ProducerIncarnation, From: k.expected, To: m.NextCursor})
		k.expected = m.NextCursor
	}
	w.log.Debug().Str("producer", m.ProducerNode).Uint64("next", k.expected).Msg("version 1 producer registered")
	return k, nil
}

func (w *worker) refuse(what, node string, err error) *messages.RegisterAck {
	r := w.reject(what, node, err)
	ack := &messages.RegisterAck{Status: r.Status, WorkerNode: w.node, WorkerIncarnation: w.inc, Error: r.Error}
	if w.version != messages.PreviousProtocolVersion {
		ack.SupportedVersions = messages.SupportedVersions()
	}
	return ack
}

// prune makes room in a full table: it drops the producers not heard from
// for ForgetAfter, keeping tombstones (bounded the same way), and reports
// whether any went.
func (w *worker) prune() bool {
	now, dropped := time.Now(), false
	for node, k := range w.table.producers {
		if now.Sub(k.seen) < w.cfg.ForgetAfter {
			continue
		}
		delete(w.table.producers, node)
		for f := range w.table.forgot {
			if len(w.table.forgot) < maxProducers {
				break
			}
			delete(w.table.forgot, f)
		}
		w.table.forgot[node] = tombstone{incarnation: k.incarnation, retired: k.retired, expected: k.expected}
		dropped = true
		w.log.Info().Str("producer", node).Dur("forget_after_ms", w.cfg.ForgetAfter).Msg("table full: dropped a producer not heard from")
	}
	return dropped
}

func (w *worker) batch(m *messages.Batch) *messages.BatchAck {
	if err := w.check(m.ProtocolVersion, m.PubsubName, m.Group, m.ProducerNode); err != nil {
		return w.reject("batch", m.ProducerNode, err)
	}
	if err := m.Validate(); err != nil {
		return w.reject("batch", m.ProducerNode, err)
	}
	k := w.producer(m.ProducerNode, m.ProducerIncarnation)
	if k == nil {
		return w.ack(messages.AckStatus_ACK_STATUS_UNKNOWN_PRODUCER, 0)
	}
	if m.FirstCursor > k.expected {
		if m.ProtocolVersion == messages.PreviousProtocolVersion {
			// Version 1 has no OUT_OF_ORDER (its producer would resend the
			// same batch forever): a gap is told, as version 1 did.
			w.expired(&messages.CursorExpired{Node: m.ProducerNode, Group: m.Group, Missed: m.FirstCursor - k.expected, Reason: "gap in received stream",
				ProducerIncarnation: m.ProducerIncarnation, From: k.expected, To: m.FirstCursor})
			k.expected = m.FirstCursor
		} else {
			// A batch before this one was lost on the way: take nothing, and
			// say where to resume. Never a hole in the delivered stream.
			return w.ack(messages.AckStatus_ACK_STATUS_OUT_OF_ORDER, k.expected)
		}
	}
	bad := m.BadTopics() // nil unless a topic is not UTF-8: see passOver
	var stored []uint64
	if w.dur != nil {
		var err error
		if stored, err = w.store(m, k, bad); err != nil {
			return w.reject("batch", m.ProducerNode, fmt.Errorf("durable store: %w", err))
		}
	}
	d := batchDelivery{w: w, m: m, k: k, entries: m.Entries(), next: m.FirstCursor, stored: stored, bad: bad,
		it:    delivery.Item{Node: m.ProducerNode, Group: m.Group, Incarnation: m.ProducerIncarnation},
		types: make([]messages.Type, len(m.PayloadTypes))}
	if w.hook == nil {
		d.run(-1) // the production path: no hook to consult per entry
	} else {
		for d.run(1) {
			w.hook.Delivered(m.ProducerNode, d.next-1)
		}
	}
	if k.expected >= k.storedTo {
		k.storedAt = nil // every stored entry delivered: no resend needs its row
	}
	delivered := d.delivered
	w.m.Delivered.Add(context.Background(), delivered, w.m.Group(w.group))
	if d.passed > 0 {
		w.passOver(m, &d)
	}
	ack := w.ack(messages.AckStatus_ACK_STATUS_OK, k.expected)
	ack.Stored = w.dur != nil && !unstored(stored)
	return ack
}

// unstored reports whether a durable entry of the batch was not stored
// (its row is unstoredRow): the ack then does not say stored.
func unstored(stored []uint64) bool {
	for _, c := range stored {
		if c == unstoredRow {
			return true
		}
	}
	return false
}

// passOver reports the entries of m whose topic is not valid UTF-8 (issue
// 37), which the worker acknowledged without delivering or storing them.
// Such a topic cannot have a subscriber here: every subscribe path (and
// every publishing one) refuses it with ErrInvalidTopic. So nobody on this
// node loses anything, and nobody is told CursorExpired (a notice would be
// a false alarm); the entries are counted (echopubsub.worker.entries_passed_over)
// and logged with the producer, the first one's cursor and its topic,
// escaped. Before, protoactor could not decode such a batch at all: the
// connection dropped and the producer resent the batch forever, so every
// later message to this node stopped.
func (w *worker) passOver(m *messages.Batch, d *batchDelivery) {
	w.m.EntriesPassedOver.Add(context.Background(), d.passed, w.m.Group(w.group))
	w.log.Error().Str("producer", m.ProducerNode).Uint64("cursor", d.firstPassed).Int64("entries", d.passed).
		Str("topic", fmt.Sprintf("%.64q", d.passedTopic)).
		Msg("batch entries whose topic is not valid UTF-8 acknowledged, not delivered: no subscriber here can hold such a topic")
}

// store hands the batch's new durable entries (not direct ones) to the
// durable store, with the producer's position after the batch, before any
// is delivered: an acknowledged batch is stored. It returns each entry's
// cursor in this node's store (indexed by the entry's position in the
// batch; 0: not stored here), or nil when the batch stored nothing here.
// An entry stored before and not delivered yet (the worker crashed while
// delivering its batch: see known.storedTo) is not appended again: it
// keeps its row.
func (w *worker) store(m *messages.Batch, k *known, bad []bool) ([]uint64, error) {
	var rows []core.Row
	var at []int // rows[i] is entry at[i]
	var stored []uint64
	it := m.Entries()
	c := m.FirstCursor
	for {
		topic, ti, payload, _, only, ok := it.Next()
		if !ok {
			break
		}
		cur := c
		c++
		if cur < k.expected || only != "" || (bad != nil && bad[it.TopicIndex()]) || !w.dur.IsDurable(topic) {
			continue
		}
		if cur < k.storedTo {
			stored = setStored(stored, m, int(cur-m.FirstCursor), k.storedCursor(cur))
			continue
		}
		rows = append(rows, core.Row{Topic: topic, PayloadType: m.PayloadType(ti), Payload: payload, Cursor: it.StoreCursor()})
		at = append(at, int(cur-m.FirstCursor))
	}
	if c <= max(k.expected, k.storedTo) {
		return stored, nil // nothing new: a redelivery
	}
	if err := w.dur.Received(core.ProducerPos{Node: m.ProducerNode, Group: m.Group, Incarnation: m.ProducerIncarnation, Next: c}, rows); err != nil {
		return nil, err
	}
	for i, r := range rows {
		c := r.Cursor
		if r.Unstored {
			c = unstoredRow
		}
		stored = setStored(stored, m, at[i], c)
	}
	k.storedFrom, k.storedTo, k.storedAt = m.FirstCursor, c, stored
	return stored, nil
}

// unstoredRow, in a table of store cursors (worker.store), is a durable
// entry this node's failing store could not take (core.Row.Unstored): it
// is delivered with Item.Unstored.
const unstoredRow = ^uint64(0)

// setStored sets entry i's store cursor in stored (made for m's entries
// when it is nil and cursor is not 0).
func setStored(stored []uint64, m *messages.Batch, i int, cursor uint64) []uint64 {
	if cursor == 0 {
		return stored
	}
	if stored == nil {
		stored = make([]uint64, m.Len())
	}
	stored[i] = cursor
	return stored
}

// batchDelivery hands a batch's entries to this node's subscribers in
// cursor order, skipping those delivered before (a redelivery after a lost
// ack) and moving the producer's expected cursor past each.
type batchDelivery struct {
	w         *worker
	m         *messages.Batch
	k         *known
	entries   messages.Cursor
	next      uint64   // cursor of the next entry
	stored    []uint64 // each entry's cursor in this node's store (worker.store; unstoredRow), or nil
	bad       []bool   // Batch.BadTopics: nil in every batch of this build's producers
	it        delivery.Item
	types     []messages.Type // resolved once per batch, when needed
	delivered int64
	// passed counts the entries passed over for their topic (worker.passOver),
	// the first at firstPassed.
	passed      int64
	firstPassed uint64
	passedTopic string
}

// run handles up to n new entries (n < 0: all) and reports whether it
// handled one.
func (d *batchDelivery) run(n int) bool {
	handled := false
	for n != 0 {
		topic, ti, payload, exclude, only, ok := d.entries.Next()
		if !ok {
			return handled
		}
		c := d.next
		d.next++
		if c < d.k.expected {
			continue // already delivered: a redelivery after a lost ack
		}
		w := d.w
		plant.AckFirst(&d.k.expected, c, w.hook, d.m.ProducerNode)
		if d.bad != nil && d.bad[d.entries.TopicIndex()] {
			if d.passed == 0 {
				d.firstPassed, d.passedTopic = c, topic
			}
			d.passed++
		} else if (only == "" || only == w.node) && !plant.SkipEntry() {
			if !d.types[ti].Resolved() {
				// Unknown here: left unresolved, decode says so per message.
				d.types[ti], _ = messages.LookupType(d.m.PayloadType(ti))
			}
			// payload aliases the batch's own array (capped by Cursor.Next), handed
			// as it is to encoded subscribers: retained safely, as nothing writes
			// to it again. A batch from the wire is decoded into new arrays
			// (protobuf copies bytes fields), one handed over in process is
			// decoded from its encoding (Decoded) likewise, and nothing writes to
			// a batch once decoded. Never a buffer reused for the next batch.
			d.it.Topic, d.it.Message, d.it.PayloadType, d.it.Payload, d.it.Type = topic, nil, d.m.PayloadType(ti), payload, d.types[ti]
			d.it.Exclude, d.it.Cursor, d.it.StoreCursor, d.it.Unstored = exclude, c, 0, false
			d.it.Traceparent, d.it.Tracestate = core.CheckTrace(d.entries.Trace())
			if d.stored != nil {
				if sc := d.stored[c-d.m.FirstCursor]; sc == unstoredRow {
					d.it.Unstored = true
				} else {
					d.it.StoreCursor = sc
				}
			}
			w.d.Deliver(&d.it)
			d.delivered++
		}
		d.k.expected = c + 1
		handled = true
		n--
	}
	return handled
}

func (w *worker) expire(m *messages.Expire) *messages.BatchAck {
	if err := w.check(m.ProtocolVersion, m.PubsubName, m.Group, m.ProducerNode); err != nil {
		return w.reject("expire", m.ProducerNode, err)
	}
	k := w.producer(m.ProducerNode, m.ProducerIncarnation)
	if k == nil {
		return w.ack(messages.AckStatus_ACK_STATUS_UNKNOWN_PRODUCER, 0)
	}
	told := m.NextCursor > k.expected
	from := k.expected
	if told { // a retried Expire whose ack was lost is not told twice
		// What this node will never get: everything from its own cursor to
		// where it moves, overwritten or skipped: [k.expected, next), next
		// the producer's ringbuf Decision.To. The decision's From is the
		// cursor the producer last saw acknowledged, this one unless an ack
		// was lost on the way (then this one is further: the producer's
		// m.Missed counts from the older one, and a version 1 producer
		// counts the overwritten ones only).
		ce := &messages.CursorExpired{Node: m.ProducerNode, Group: m.Group, Missed: m.NextCursor - k.expected, Reason: "fell behind the buffer",
			ProducerIncarnation: m.ProducerIncarnation, From: k.expected, To: plant.ExpiredTo(m.NextCursor),
			AllStored: m.AllStored && k.expected >= m.AllStoredFrom} // [k.expected, next) within what the producer vouched for
		if w.dur != nil {
			pos := core.ProducerPos{Node: m.ProducerNode, Group: m.Group, Incarnation: m.ProducerIncarnation, Next: m.NextCursor}
			if err := w.dur.Lost(pos, ce); err != nil {
				return w.reject("expire", m.ProducerNode, fmt.Errorf("durable store: %w", err))
			}
		}
		w.expired(ce)
		k.expected = m.NextCursor
	}
	ack := w.ack(messages.AckStatus_ACK_STATUS_OK, k.expected)
	ack.ExpiredTold = told && w.version != messages.PreviousProtocolVersion
	if ack.ExpiredTold {
		ack.ExpiredFrom = &from
	}
	return ack
}

// retire ends a producer incarnation that stopped gracefully.
func (w *worker) retire(m *messages.Retire) *messages.BatchAck {
	if err := w.check(m.ProtocolVersion, m.PubsubName, m.Group, m.ProducerNode); err != nil {
		return w.reject("retire", m.ProducerNode, err)
	}
	if w.version == messages.PreviousProtocolVersion || m.ProtocolVersion == messages.PreviousProtocolVersion {
		return w.reject("retire", m.ProducerNode, fmt.Errorf("protocol version 1 has no Retire"))
	}
	k := w.producer(m.ProducerNode, m.ProducerIncarnation)
	if k == nil {
		return w.ack(messages.AckStatus_ACK_STATUS_UNKNOWN_PRODUCER, 0)
	}
	told := m.FinalCursor > k.expected
	ce := &messages.CursorExpired{Node: m.ProducerNode, Group: m.Group, Missed: m.FinalCursor - k.expected,
		Reason: "producer stopped before this node got everything", ProducerIncarnation: m.ProducerIncarnation, From: k.expected, To: m.FinalCursor}
	if w.dur != nil {
		pos := core.ProducerPos{Node: m.ProducerNode, Group: m.Group, Incarnation: m.ProducerIncarnation, Next: max(m.FinalCursor, k.expected)}
		var err error
		if told {
			err = w.dur.Lost(pos, ce)
		}
		if err == nil {
			err = w.dur.Retired(pos)
		}
		if err != nil {
			return w.reject("retire", m.ProducerNode, fmt.Errorf("durable store: %w", err))
		}
	}
	if told {
		w.expired(ce)
		k.expected = m.FinalCursor
	}
	k.retired = true
	ack := w.ack(messages.AckStatus_ACK_STATUS_OK, k.expected)
	ack.ExpiredTold = told
	return ack
}

// expired tells this node's subscribers, and counts it.
func (w *worker) expired(ce *messages.CursorExpired) {
	w.m.ExpiredReceived.Add(context.Background(), 1, w.m.Group(w.group))
	w.d.Expired(ce)
}

// producer is the table's entry for this producer incarnation, marked heard
// from now; nil when the worker does not hold that incarnation.
func (w *worker) producer(node string, inc uint64) *known {
	k := w.table.producers[node]
	if k == nil || k.incarnation != inc {
		return nil
	}
	k.seen = time.Now()
	return k
}

// ack answers a Batch, Expire or Retire.
func (w *worker) ack(status messages.AckStatus, next uint64) *messages.BatchAck {
	return &messages.BatchAck{Status: status, NextCursor: next, WorkerNode: w.node, WorkerIncarnation: w.inc}
}

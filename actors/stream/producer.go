package stream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/actors/delivery"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/internal/faults"
	"github.com/echopubsub/echopubsub/internal/plant"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/ringbuf"
)

// Entry is one buffered broadcast, as a producer's ring holds it.
type Entry struct {
	Topic       string
	PayloadType string
	Payload     []byte
	// Exclude is the key (address/id) of a subscriber that must not get it.
	Exclude string
	// OnlyNode, when set, is the one node whose subscribers get it.
	OnlyNode string
}

// Write asks a producer to buffer one broadcast. Msg, when set, is the
// original message, handed as is to this node's subscribers.
type Write struct {
	Entry Entry
	Msg   proto.Message
}

// StatsQuery asks a producer for its *messages.GroupStats.
type StatsQuery struct{}

// Drain asks a producer to finish (graceful Stop): flush at once, and retire
// its incarnation with every node that is reachable, once that node
// acknowledged everything written. The producer answers *Drained when no
// reachable node is left to wait for, or when Budget (if > 0) has passed,
// whichever comes first: a node whose calls time out (stopped, its remote
// shut down) costs a CallTimeout per call, and must not cost the answer.
// Nodes that are away (absent, failing drainGiveUp calls in a row, or not
// done within Budget) are not waited for.
type Drain struct{ Budget time.Duration }

// Drained answers Drain.
type Drained struct {
	Group uint32
	// Retired counts the nodes that acknowledged everything; Away the nodes
	// not waited for, with what they had not acknowledged. Owed: some node
	// of Away may lack messages (a lag above 0, or a node never registered
	// with after this producer wrote); a node that is away owing nothing
	// (stopped on purpose after acknowledging everything) is not a loss.
	Retired int
	Away    map[string]uint64
	Owed    bool
	// Incarnation and WriteCursor: where this producer incarnation ended
	// (its last write is WriteCursor - 1), and LastWrite when (zero: it
	// wrote nothing; only with core.Durable.Leases).
	Incarnation, WriteCursor uint64
	LastWrite                time.Time
}

type (
	flushTick   struct{}
	retryPeer   struct{ node string }
	forgetCheck struct{ node string }
	drainDue    struct{} // Drain.Budget passed
)

// peer is one remote node as this producer sees it.
type peer struct {
	m          cluster.Member
	worker     *actor.PID
	next       uint64 // next-needed cursor: everything below it is acked
	registered bool   // joined the worker incarnation workerInc
	// workerInc is the worker incarnation this producer last joined (0:
	// never); next is that worker's cursor.
	workerInc uint64
	// since is the latest bound, on this producer's clock, before which the
	// worker incarnation sinceInc had not started (see register).
	since    int64
	sinceInc uint64
	probes   int // probes of this registration so far
	// sent is the end of the last batch sent (next <= sent): batches cover
	// [next, sent), up to MaxBatchesInFlight of them (flight) at once. epoch
	// changes whenever sent is wound back to next (a refused, lost or
	// failed batch), so answers to batches sent before count as acks only.
	sent     uint64
	flight   int
	epoch    uint64
	inFlight bool // a register, join, expire or retire call: alone on the link
	retrying bool
	absent   bool
	retired  bool // acknowledged Retire (graceful Stop)
	// callable: the node accepted a connection or answered a call since
	// its last failed call; until then a call waits for reach (reach.go).
	callable bool
	gauge    *core.PeerGauge
	// version is the protocol version pe's worker incarnation speaks, as
	// learnt from its answers: 0 not known yet (try the current one), or
	// messages.PreviousProtocolVersion after it refused the current one.
	version uint32
	// listed is when this producer first listed the node (monotonic): a
	// version 1 join owes it what was written since.
	listed int64
	// toldFor is the last join (join_id, or for a version 1 worker its
	// incarnation) this producer counted as told CursorExpired, so that
	// answers reporting the same join count it once.
	toldFor  uint64
	lastAck  time.Time
	expired  int
	failures int
	lastErr  string
	// failingSince is when the current run of failed calls began, and
	// failWarned whether it was logged as a warning (see failed).
	failingSince time.Time
	failWarned   bool
	// lastFail is the error of the last failed call; progressNext and
	// progressLag the read cursor and lag watch last saw (the stall rule).
	lastFail                  string
	progressNext, progressLag uint64
	stalled                   bool // as last logged

	retryCancel, forgetCancel scheduler.CancelFunc

	// due: a flush (BatchInterval) came while a part batch waited for an
	// ack; it goes once nothing is in flight.
	due bool
	// burst: a full batch was sent since the last flush (see burstTail).
	burst bool
	// mark and markSize: the batch bytes (entrySize) written before cursor
	// mark; kept at sent while batches advance it, counted again when sent
	// moves otherwise (see full).
	mark, markSize uint64
}

// epoch is the origin of the producers' monotonic write times (and of
// core.Write.At).
var epoch = core.Epoch

func monotonic() int64 { return int64(time.Since(epoch)) }

// probeRTT is the round trip under which a probe's answer is taken as it
// is; a slower one (a request queued while the connection was being made)
// is followed by another probe, up to maxProbes.
const (
	probeRTT  = 20 * time.Millisecond
	maxProbes = 5
)

type producer struct {
	cfg     core.Config
	group   uint32
	node    string
	root    *actor.PID
	d       *delivery.Dispatcher
	queue   *core.WriteQueue
	hook    faults.Hook
	version uint32 // the newest protocol version spoken (faults.Pinned in tests)
	m       *core.Metrics
	gm      metric.MeasurementOption // this group's attributes
	log     zerolog.Logger
	// departed reports whether a node's pubsub stopped on purpose (its
	// producers retired with this node's workers; core.Runtime.Departed).
	departed func(node string) bool

	buf  *store                // the buffered messages, compact
	ring *ringbuf.Ring[record] // buf's ring: cursors, times and every decision
	// recent are the last MaxBatchesInFlight batches built (a ring, at
	// recentAt): a node that needs a range another node was sent gets the
	// same encoding. enc builds them.
	recent      []*outBatch
	recentAt    int
	enc         messages.BatchEncoder
	joins       uint64 // join ids given so far (Register.join_id)
	inc         uint64
	peers       map[string]*peer
	sched       *scheduler.TimerScheduler
	flushCancel scheduler.CancelFunc
	timer       bool
	dead        bool
	restarted   bool
	listed      bool // the membership's first complete list came (cluster.Listed)
	// dur, when set, knows this node's previous incarnation of the group
	// (told to joining workers: see Register.predecessor_incarnation).
	dur      core.Durable
	lease    lease
	lastWarn time.Time
	drainTo  *actor.PID // who asked Drain; nil when not draining
	drainDue scheduler.CancelFunc
	// drainLate: Drain.Budget passed; the nodes not done are away.
	drainLate bool
	// dialCtx bounds reach's connection checks; dialStop ends them when the
	// producer stops or restarts.
	dialCtx  context.Context
	dialStop context.CancelFunc
	// metered is the write cursor the metrics have counted up to; delivered
	// the own-node deliveries since (both recorded at each flush).
	metered   uint64
	delivered int64
}

// NewProducer makes the producer of pool group group: it buffers the
// group's writes, hands each to this node's subscribers through d at write
// time, and streams them to every other member's worker. root answers its
// MembersQuery.
func NewProducer(rt *core.Runtime, group uint32, root *actor.PID, d *delivery.Dispatcher) actor.Producer {
	starts := 0 // incarnations of this producer; only the current one runs
	return func() actor.Actor {
		starts++
		return &producer{cfg: rt.Cfg, group: group, node: rt.Node, root: root, d: d, queue: rt.Queues[group], hook: rt.Hook,
			version: faults.Version(rt.Hook), m: rt.Metrics, gm: rt.Metrics.Group(group), log: rt.Log.With().Uint32("group", group).Logger(), restarted: starts > 1,
			dur: rt.Durable, departed: rt.Departed}
	}
}

func (p *producer) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *core.WritesReady:
		p.takeMore(ctx)
	case *flushTick:
		p.timer = false
		p.flushAll(ctx)
	case *retryPeer:
		if pe := p.peers[m.node]; pe != nil {
			pe.retrying = false
			p.service(ctx, pe)
		}
	case *cluster.Event:
		p.member(ctx, m)
	case *core.MemberSnapshot:
		p.listed = p.listed || m.Listed
		for _, mem := range m.Members {
			p.member(ctx, &cluster.Event{Kind: cluster.Joined, Member: mem})
		}
	case *forgetCheck:
		p.forget(m.node)
	case *reached:
		if !p.dead {
			p.onReached(ctx, m)
		}
	case *StatsQuery:
		ctx.Respond(p.stats())
	case *Drain:
		p.drainTo = ctx.Sender()
		if m.Budget > 0 {
			p.drainDue = p.sched.SendOnce(m.Budget, ctx.Self(), &drainDue{})
		}
		for p.takeWrites(ctx) { // Stop closed the queue to new writes before sending Drain: take them all
		}
		p.flushAll(ctx)
		p.checkDrain(ctx)
	case *drainDue:
		p.drainLate = true
		p.checkDrain(ctx)
	case *actor.Started:
		buf, err := newStore(p.cfg.BufferSize)
		if err != nil { // Validate rules this out; say so rather than crash-loop silently.
			p.log.Error().Err(err).Msg("producer cannot start")
			return
		}
		p.buf, p.ring = buf, buf.ring
		p.inc = uint64(time.Now().UnixNano())
		p.peers = map[string]*peer{}
		p.sched = scheduler.NewTimerScheduler(ctx.ActorSystem().Root)
		p.dialCtx, p.dialStop = context.WithCancel(context.Background())
		p.log.Info().Uint64("incarnation", p.inc).Bool("restarted", p.restarted).Msg("producer started")
		p.lease = newLease(p.dur, p.group) // before this incarnation records its own
		if p.restarted {
			// This node's subscribers got the old incarnation's messages at
			// write time, but the write that crashed it may not have reached
			// them: tell them, as every remote worker will tell theirs.
			p.d.Expired(&messages.CursorExpired{Node: p.node, Group: p.group, Reason: "producer restarted"})
		}
		ctx.Request(p.root, &core.MembersQuery{})
		// Take what is queued: a producer spawned anew (its pool group
		// restarted) has none of the old one's mailbox, and a WritesReady
		// sent while no producer was registered was a dead letter; the
		// queue's notified flag would stay set and no WritesReady be sent
		// again.
		p.takeMore(ctx)
	case *actor.Restarting, *actor.Stopping:
		p.dead = true
		p.stopTimers()
	}
}

// armFlush schedules one flush after BatchInterval, unless one is pending.
// With BatchInterval 0 the flush is a message to self: it runs after the
// writes already queued in the mailbox, so they coalesce into one batch
// instead of each costing a round trip, and adds no delay when idle.
func (p *producer) armFlush(ctx actor.Context) {
	if p.timer {
		return
	}
	p.timer = true
	if p.cfg.BatchInterval == 0 {
		ctx.Send(ctx.Self(), &flushTick{})
		return
	}
	p.flushCancel = p.sched.SendOnce(p.cfg.BatchInterval, ctx.Self(), &flushTick{})
}

// stopTimers cancels every pending timer, so none fires into a stopped or
// restarted producer.
func (p *producer) stopTimers() {
	for _, c := range []scheduler.CancelFunc{p.flushCancel, p.drainDue} {
		if c != nil {
			c()
		}
	}
	if p.dialStop != nil {
		p.dialStop()
	}
	for _, pe := range p.peers {
		for _, c := range []scheduler.CancelFunc{pe.retryCancel, pe.forgetCancel} {
			if c != nil {
				c()
			}
		}
	}
}

// takeWrites handles the writes queued since the last take, in order, up
// to one batch's worth (MaxBatchMessages), and sends at once each node's
// full batches (see full): BatchInterval holds back only a part batch. It
// reports whether writes are left (see takeMore).
func (p *producer) takeWrites(ctx actor.Context) bool {
	taken, more := p.queue.Take(p.cfg.MaxBatchMessages)
	if len(taken) > 0 && p.lease.on {
		p.renewLease()
	}
	var it delivery.Item // reused for the take: all its writes were queued before it (see Item)
	for i := range taken {
		p.write(ctx, &taken[i], &it)
	}
	if len(taken) == 0 {
		return more
	}
	if p.lease.on {
		p.lease.lastWrite = time.Now()
	}
	for _, pe := range p.peers {
		if pe.registered && !pe.absent && !pe.inFlight && !pe.retrying && pe.flight < p.window(pe) && (p.full(pe) || p.burstTail(pe)) {
			p.service(ctx, pe)
		}
	}
	return more
}

// takeMore takes a batch's worth of writes and, if more are queued, has
// the rest taken after what is in the mailbox now: a take of everything
// (up to MaxPendingWrites) kept the producer from the acks queued behind
// it, so the window stayed full while the receivers, done with their
// batches, had nothing to do.
func (p *producer) takeMore(ctx actor.Context) {
	if p.takeWrites(ctx) {
		ctx.Send(ctx.Self(), &core.WritesReady{}) // the queue stays notified: no publisher sends one
	}
}

func (p *producer) write(ctx actor.Context, w *core.Write, it *delivery.Item) {
	e := w
	at := e.At // when Broadcast accepted it (0: not through Enqueue)
	if at == 0 {
		at = monotonic()
	}
	c, err := p.buf.write(e, at)
	if err != nil {
		p.log.Error().Err(err).Str("topic", e.Topic).Msg("broadcast not buffered")
		return
	}
	if e.OnlyNode == "" || e.OnlyNode == p.node {
		p.delivered++
		it.Topic, it.Message, it.PayloadType, it.Payload, it.Exclude = e.Topic, w.Msg, e.PayloadType, e.Payload, e.Exclude
		it.Node, it.Group, it.Incarnation, it.Cursor, it.StoreCursor = p.node, p.group, p.inc, c, e.StoreCursor
		p.d.Deliver(it)
	}
	p.armFlush(ctx)
}

func (p *producer) flushAll(ctx actor.Context) {
	if w := p.ring.WriteCursor(); w > p.metered { // metrics cost per flush, not per message
		p.m.Published.Add(context.Background(), int64(w-p.metered), p.gm)
		p.m.Delivered.Add(context.Background(), p.delivered, p.gm)
		p.metered, p.delivered = w, 0
	}
	for _, pe := range p.peers {
		pe.due = true // a part batch waiting for an ack has waited enough
		p.service(ctx, pe)
		pe.burst = false // a burst lasts until the interval passes without one
	}
}

// capacity warns (throttled by CapacityWarningInterval) when a node's lag
// reaches CapacityWarningThreshold of the buffer: it is the slowest node
// that crosses it first.
func (p *producer) capacity(ctx actor.Context, pe *peer, lag uint64) {
	if float64(lag) < p.cfg.CapacityWarningThreshold*float64(p.cfg.BufferSize) ||
		time.Since(p.lastWarn) < p.cfg.CapacityWarningInterval {
		return
	}
	p.lastWarn = time.Now()
	p.log.Warn().Str("peer", pe.m.Name).Uint64("lag", lag).Int("buffer_size", p.cfg.BufferSize).
		Msg("buffer capacity warning: a node is far behind")
	ctx.ActorSystem().EventStream.Publish(&messages.CapacityWarning{Pubsub: p.cfg.Name, Group: p.group,
		Node: pe.m.Name, Lag: lag, Capacity: p.cfg.BufferSize})
}

// service sends pe what it needs next, if it can take it now. At most one
// call is in flight per node, which keeps each node's stream in order.
func (p *producer) service(ctx actor.Context, pe *peer) {
	if pe.absent || pe.inFlight || pe.retrying {
		return
	}
	if !pe.callable {
		p.reach(ctx, pe)
		return
	}
	if !pe.registered {
		if pe.flight == 0 {
			p.register(ctx, pe)
		}
		return
	}
	d, err := p.ring.Decide(pe.next)
	if err != nil { // a cursor ahead of the write cursor: never set by us
		p.log.Error().Err(err).Str("peer", pe.m.Name).Msg("read cursor ahead of write cursor: re-registering")
		pe.next, pe.registered = p.ring.WriteCursor(), false
		p.rewind(pe)
		return
	}
	p.capacity(ctx, pe, d.Lag)
	pe.gauge.SetLag(d.Lag, p.cfg.BufferSize)
	p.watch(pe, d.Lag)
	switch d.Kind {
	case ringbuf.CaughtUp:
		pe.due = false
		if p.drainTo != nil && !pe.retired && pe.flight == 0 {
			p.sendRetire(ctx, pe)
		}
	case ringbuf.Messages:
		if pe.sent < d.From { // everything below next is acked: never resend it
			pe.sent = d.From
		}
		for pe.sent < d.To && !pe.retrying { // a failed send stops the round
			if p.partWaits(pe) {
				break
			}
			if pe.flight >= p.window(pe) {
				break // a full batch waits for a slot: the ack that frees one sends it
			}
			p.sendBatch(ctx, pe, ringbuf.Decision{Kind: ringbuf.Messages, From: pe.sent, To: d.To})
		}
		if pe.sent >= d.To {
			pe.due = false
		}
	case ringbuf.Expired:
		if pe.flight == 0 { // what is in flight may still be acked: decide after it
			p.sendExpire(ctx, pe, d)
		}
	}
}

// partWaits reports whether a part batch for pe (less than full, see full)
// waits for the batches in flight to be acknowledged. With a BatchInterval
// it does: under light load that makes fewer and fuller batches, and the
// interval already bounds the wait. With BatchInterval 0 it goes as soon as
// the window has room: the flush that sends it runs after the writes queued
// in the mailbox (armFlush), which coalesces them, and waiting for the ack
// in flight would add up to a round trip to every message published while a
// batch is out (BenchmarkTailStages: 90-99 % of the messages at or above
// p99 had waited so).
func (p *producer) partWaits(pe *peer) bool {
	return p.cfg.BatchInterval > 0 && pe.flight > 0 && !p.full(pe)
}

// burstTail reports whether pe's part batch goes without waiting for the
// flush: nothing is in flight and a full batch went since the last flush.
// The load fills batches, so the window, not the interval, paces them; the
// interval would only delay the part batch that ends the burst (a
// repetition's last part batch waited up to BatchInterval: BatchInterval
// 100 ms measured 0.75-0.97 of 0's throughput in the harness). Under light
// load no batch is full and the interval batches as before.
func (p *producer) burstTail(pe *peer) bool {
	return p.cfg.BatchInterval > 0 && pe.burst && pe.flight == 0 && pe.sent < p.ring.WriteCursor()
}

// rewind forgets what was sent past next: the next batch starts at next.
// Answers to batches sent before count as acks only.
func (p *producer) rewind(pe *peer) {
	pe.sent = pe.next
	pe.epoch++
}

// sendBatch sends the batch starting at d.From (== pe.sent) as one of the
// peer's batches in flight. The worker takes a batch only at its next
// cursor: one that arrives after a lost one is refused (OUT_OF_ORDER) and
// the producer sends again from the worker's cursor, so the stream a worker
// delivers has no hole, whatever the network dropped.
func (p *producer) sendBatch(ctx actor.Context, pe *peer, d ringbuf.Decision) {
	b := p.batch(d, p.speaks(pe))
	target := d.From + uint64(b.n)
	epoch := pe.epoch
	pe.burst = pe.burst || b.full
	pe.sentTo(target, b.size)
	pe.flight++
	pe.next = plant.Advance(pe.next, target)
	sent := time.Now()
	p.m.BatchesSent.Add(context.Background(), 1, pe.gauge.Attrs)
	p.request(ctx, pe, b.wire, func(res interface{}, err error) {
		pe.flight--
		ack, ok := res.(*messages.BatchAck)
		if err == nil && ok && ack.Status == messages.AckStatus_ACK_STATUS_OK {
			rtt := time.Since(sent)
			p.m.BatchesAcked.Add(context.Background(), 1, pe.gauge.Attrs)
			p.m.RoundTrip.Record(context.Background(), rtt.Seconds(), pe.gauge.Attrs)
			ctx.ActorSystem().EventStream.Publish(&messages.Flushed{Pubsub: p.cfg.Name, Group: p.group, Node: pe.m.Name, Messages: b.n, RoundTrip: rtt})
			p.acked(pe, ack.NextCursor)
			p.answered(pe)
			// A slot is free: a full batch goes now; a part batch at the
			// flush armFlush sends (BatchInterval 0: it runs after the
			// writes queued meanwhile), or, with a BatchInterval, once
			// nothing is in flight and a flush came for it (partWaits) or
			// it ends a burst (burstTail).
			if p.drainTo != nil || p.full(pe) || (pe.due && pe.flight == 0) || p.burstTail(pe) {
				p.service(ctx, pe)
			} else if pe.sent < p.ring.WriteCursor() {
				p.armFlush(ctx)
			}
			return
		}
		if err == nil && ok && ack.Status == messages.AckStatus_ACK_STATUS_OUT_OF_ORDER {
			// The worker missed a batch before this one: everything below its
			// cursor is delivered, nothing from it on. The worker knows what
			// its node got: send again from there (once per epoch).
			if epoch == pe.epoch {
				pe.next = min(ack.NextCursor, p.ring.WriteCursor())
				p.rewind(pe)
			} else {
				p.acked(pe, ack.NextCursor)
			}
			p.service(ctx, pe)
			return
		}
		if epoch != pe.epoch {
			// A batch sent before the last rewind: its failure is handled.
			// The last one back lets a waiting register or expire go.
			if pe.flight == 0 {
				p.service(ctx, pe)
			}
			return
		}
		p.rewind(pe)
		if err == nil {
			p.nack(pe, res)
			err = fmt.Errorf("%s", pe.lastErr)
		}
		p.failed(ctx, pe, err)
	})
}

// acked advances pe's cursor to what the worker says it delivered.
func (p *producer) acked(pe *peer, workerNext uint64) {
	n := workerNext
	if n > p.ring.WriteCursor() { // trusted only within what was written
		n = p.ring.WriteCursor()
	}
	if n > pe.next {
		pe.next = n
	}
	if pe.sent < pe.next {
		pe.sent = pe.next
	}
	// The lag gauge and the stall watch see the ack now: the ack of the
	// last batch is not followed by a service call when nothing is left
	// (the gauge kept the lag it had at the send, and an idle, caught-up
	// peer showed as stalled).
	if d, err := p.ring.Decide(pe.next); err == nil {
		pe.gauge.SetLag(d.Lag, p.cfg.BufferSize)
		p.watch(pe, d.Lag)
	}
}

// full reports whether a full batch is buffered for pe past what was sent:
// MaxBatchMessages entries, or MaxBatchBytes worth. Such a batch goes as
// soon as the window has room; BatchInterval bounds only how long a part
// batch waits.
func (p *producer) full(pe *peer) bool {
	w := p.ring.WriteCursor()
	if pe.sent >= w {
		return false
	}
	if w-pe.sent >= uint64(p.cfg.MaxBatchMessages) {
		return true
	}
	if pe.mark != pe.sent {
		// sent moved other than by a batch (a join, a rewind, an ack past
		// it): count its bytes again, fewer than MaxBatchMessages entries.
		size := uint64(0)
		for c := pe.sent; c < w; c++ {
			topic, _, payload, ex, err := p.buf.at(c)
			if err != nil { // overwritten: Decide sends Expire, not a batch
				return false
			}
			size += uint64(entrySize(topic, payload, ex.exclude, ex.onlyNode))
		}
		pe.mark, pe.markSize = pe.sent, p.buf.size-size
	}
	return p.buf.size-pe.markSize >= uint64(p.cfg.MaxBatchBytes)
}

// sentTo moves pe's sent to target past a batch of size bytes (entrySize
// summed), keeping the byte mark at sent.
func (pe *peer) sentTo(target uint64, size int) {
	if pe.mark == pe.sent {
		pe.mark, pe.markSize = target, pe.markSize+uint64(size)
	}
	pe.sent = target
}

// outBatch is a batch as sent: its range, its size (entrySize summed) and
// its encoding in one protocol version. Never modified once built.
type outBatch struct {
	first, inc uint64
	n, size    int
	version    uint32
	// full: cut by MaxBatchMessages or MaxBatchBytes, not by the write
	// cursor: any decision from first that reaches past it gets the same.
	full bool
	wire *messages.Batch // messages.Encoded
}

// batch returns the batch for decision d in protocol version version: from
// d.From, as many entries as MaxBatchMessages and MaxBatchBytes allow (at
// least one), encoded once. Nodes that need the same range share it (see
// recent).
func (p *producer) batch(d ringbuf.Decision, version uint32) *outBatch {
	for _, b := range p.recent {
		if b != nil && b.first == d.From && b.inc == p.inc && b.version == version &&
			(b.first+uint64(b.n) == d.To || b.full && b.first+uint64(b.n) <= d.To) {
			return b
		}
	}
	b := &outBatch{first: d.From, inc: p.inc, version: version}
	p.enc.Reset()
	to := min(d.To, d.From+uint64(p.cfg.MaxBatchMessages))
	b.full = to-d.From == uint64(p.cfg.MaxBatchMessages) // any longer decision gets the same
	// The ring's records in one or two runs: no per-cursor At (a tenth of a
	// publishing node's CPU went to reading the buffer back).
	runA, runB, err := p.ring.Span(d.From, to)
	if err != nil { // never for a decision the ring made: an empty batch, not cached
		p.log.Error().Err(err).Msg("decided messages not buffered")
		b.full = false
	}
	c := d.From
entries:
	for _, run := range [2][]record{runA, runB} {
		for _, rec := range run {
			topic, typ, payload, ex := p.buf.entry(c, rec)
			sz := entrySize(topic, payload, ex.exclude, ex.onlyNode)
			if p.enc.Len() > 0 && b.size+sz > p.cfg.MaxBatchBytes {
				b.full = true
				break entries
			}
			p.enc.Add(topic, typ, payload, ex.exclude, ex.onlyNode, ex.stored)
			b.size += sz
			c++
		}
	}
	b.n = p.enc.Len()
	b.wire = messages.Encoded(p.enc.Encode(messages.BatchHeader{ProtocolVersion: version, PubsubName: p.cfg.Name,
		ProducerNode: p.node, ProducerIncarnation: p.inc, Group: p.group, FirstCursor: d.From}))
	if err != nil {
		return b
	}
	if p.recent == nil {
		p.recent = make([]*outBatch, max(p.cfg.MaxBatchesInFlight, 1))
	}
	p.recent[p.recentAt] = b
	p.recentAt = (p.recentAt + 1) % len(p.recent)
	return b
}

// speaks is the protocol version of the requests to pe: the current one
// unless pe's worker (or this build, pinned) speaks only the previous one.
func (p *producer) speaks(pe *peer) uint32 {
	if p.version == messages.PreviousProtocolVersion || pe.version == messages.PreviousProtocolVersion {
		return messages.PreviousProtocolVersion
	}
	return messages.ProtocolVersion
}

// supported is what this producer lists in a Register (version 1 lists
// nothing).
func (p *producer) supported() []uint32 {
	if p.version == messages.PreviousProtocolVersion {
		return nil
	}
	return messages.SupportedVersions()
}

// window is the batches pe may have in flight: one for a version 1 worker,
// which takes a batch past its cursor as a gap (told, but a loss) where a
// current one refuses it for a resend.
func (p *producer) window(pe *peer) int {
	if p.speaks(pe) == messages.PreviousProtocolVersion {
		return 1
	}
	return p.cfg.MaxBatchesInFlight
}

func (p *producer) sendExpire(ctx actor.Context, pe *peer, d ringbuf.Decision) {
	req := &messages.Expire{ProtocolVersion: p.speaks(pe), PubsubName: p.cfg.Name, ProducerNode: p.node,
		ProducerIncarnation: p.inc, Group: p.group, Missed: d.Missed, NextCursor: d.To}
	p.log.Warn().Str("peer", pe.m.Name).Uint64("missed", d.Missed).Uint64("overwritten", d.Overwritten).Msg("node fell behind the buffer: sending cursor expired")
	p.call(ctx, pe, req, func(res interface{}) bool {
		ack, ok := res.(*messages.BatchAck)
		if !ok || ack.Status != messages.AckStatus_ACK_STATUS_OK {
			return p.nack(pe, res)
		}
		if d.To > pe.next {
			pe.next = d.To
		}
		// Counted only when this Expire told the node (a retried one whose
		// first ack was lost was told then); a version 1 worker does not
		// say, and tells every Expire that moves its cursor.
		if ack.ExpiredTold || p.speaks(pe) == messages.PreviousProtocolVersion {
			p.expired(ctx, pe, d.Missed, d.Overwritten)
		}
		p.service(ctx, pe)
		return true
	})
}

// register joins pe's worker in two steps (see messages.Register): a probe
// learns the worker's view, then the producer decides where the node's
// stream starts, and a join tells the worker. The cursor decision itself is
// ringbuf's: Decide from the worker's own cursor when it knows this producer
// or this producer knows it, Join from the worker's start otherwise.
func (p *producer) register(ctx actor.Context, pe *peer) {
	if p.speaks(pe) == messages.PreviousProtocolVersion {
		p.registerV1(ctx, pe)
		return
	}
	sent := time.Now()
	req := &messages.Register{ProtocolVersion: messages.ProtocolVersion, PubsubName: p.cfg.Name, ProducerNode: p.node,
		ProducerIncarnation: p.inc, Group: p.group, SupportedVersions: p.supported()}
	p.call(ctx, pe, req, func(res interface{}) bool {
		ack, ok := res.(*messages.RegisterAck)
		if ok && ack.Status == messages.AckStatus_ACK_STATUS_REJECTED && len(ack.SupportedVersions) == 0 &&
			strings.Contains(ack.Error, fmt.Sprintf("protocol version %d not supported", messages.ProtocolVersion)) {
			// A version 1 node (it lists no versions, and refuses ours in
			// version 1's words): speak version 1 to this incarnation of it.
			pe.version, pe.probes = messages.PreviousProtocolVersion, 0
			p.log.Info().Str("peer", pe.m.Name).Msg("node speaks protocol version 1 only: falling back to it until it is upgraded")
			p.registerV1(ctx, pe)
			return true
		}
		if !ok || ack.Status != messages.AckStatus_ACK_STATUS_OK {
			pe.probes = 0
			return p.nack(pe, res)
		}
		rtt := time.Since(sent)
		if ack.Known {
			p.joined(ctx, pe, ack)
			return true
		}
		// The worker's age names an instant between the node's Start call
		// and its return (see worker.startedAgo), ack.StartedAgoNanos before
		// it answered, and it answered after we sent: so the instant is not
		// before sent - age, on our clock. Messages stamped from there on
		// (core.Write.At, inside Broadcast) are owed to the node. Several
		// probes keep the tightest bound. A margin covers the two monotonic
		// clocks running at slightly different rates (NTP slews up to
		// 500 ppm each): at worst some history is delivered, never a message
		// from after Start returned withheld.
		age := int64(ack.StartedAgoNanos)
		since := int64(sent.Sub(epoch)) - age - age/1000
		if pe.sinceInc != ack.WorkerIncarnation || since > pe.since {
			pe.since, pe.sinceInc = since, ack.WorkerIncarnation
		}
		pe.probes++
		if rtt > probeRTT && pe.probes < maxProbes {
			p.register(ctx, pe) // answered late: a fresh probe bounds the start tighter
			return true
		}
		p.join(ctx, pe, ack)
		return true
	})
}

// join decides where pe's worker starts and seeds it there.
func (p *producer) join(ctx actor.Context, pe *peer, ack *messages.RegisterAck) {
	pe.probes = 0
	var d ringbuf.Decision
	switch {
	case pe.workerInc != 0 && pe.workerInc == ack.WorkerIncarnation:
		// The worker dropped us (absent past ForgetAfter) but we know its
		// cursor: it is owed everything from there.
		var err error
		if d, err = p.ring.Decide(pe.next); err != nil {
			d = ringbuf.Decision{Kind: ringbuf.Expired, To: p.ring.WriteCursor()}
		}
	case ack.Forgot:
		// Both sides forgot: where the node was is not known.
		d = ringbuf.Decision{Kind: ringbuf.Expired, To: p.ring.WriteCursor()}
	default:
		// A node this producer never reached in this incarnation: it is owed
		// what was written since it started.
		d = p.ring.Join(plant.JoinSince(pe.since))
	}
	req := &messages.Register{ProtocolVersion: messages.ProtocolVersion, PubsubName: p.cfg.Name, ProducerNode: p.node,
		ProducerIncarnation: p.inc, Group: p.group, Join: true, WorkerIncarnation: ack.WorkerIncarnation, NextCursor: d.From,
		SupportedVersions: p.supported()}
	p.joins++
	req.JoinId = p.joins
	if p.dur != nil && !p.restarted { // a restarted actor's predecessor is this process's crashed one
		req.PredecessorIncarnation, req.PredecessorFinal = p.dur.Predecessor(p.group)
	}
	if pe.workerInc != ack.WorkerIncarnation && !ack.Forgot {
		// First join of this worker incarnation: was it owed what an
		// earlier incarnation of this producer wrote?
		req.PredecessorOwed = p.lease.owedByEarlier(pe.since, p.inc)
	}
	if d.Kind == ringbuf.Expired {
		req.NextCursor, req.MissedWrites = d.To, true
		p.log.Warn().Str("peer", pe.m.Name).Msg("messages owed to a joining node were overwritten before it was reached: it will be told CursorExpired")
	}
	p.call(ctx, pe, req, func(res interface{}) bool {
		ack, ok := res.(*messages.RegisterAck)
		if !ok || ack.Status != messages.AckStatus_ACK_STATUS_OK || !ack.Known {
			return p.nack(pe, res)
		}
		p.joined(ctx, pe, ack) // counts the CursorExpired the join told, if it did
		return true
	})
}

// registerV1 registers with a worker that speaks protocol version 1 only
// (or as a build pinned to it): one step, no probe. A node not reached yet
// in this incarnation is owed what was written since this producer listed
// it (version 1 cannot learn when the node started); one reached before
// resumes from what it acknowledged, and the worker keeps its own cursor if
// that is further.
func (p *producer) registerV1(ctx actor.Context, pe *peer) {
	next, missed := pe.next, false
	if pe.workerInc == 0 {
		d := p.ring.Join(pe.listed)
		next = d.From
		if d.Kind == ringbuf.Expired {
			next, missed = d.To, true
			p.log.Warn().Str("peer", pe.m.Name).Msg("messages owed to a joining node were overwritten before it was reached: it will be told CursorExpired")
		}
	}
	req := &messages.Register{ProtocolVersion: messages.PreviousProtocolVersion, PubsubName: p.cfg.Name, ProducerNode: p.node,
		ProducerIncarnation: p.inc, Group: p.group, NextCursor: next, MissedWrites: missed, SupportedVersions: p.supported()}
	if p.version != messages.PreviousProtocolVersion { // a current worker reports the join by this id
		p.joins++
		req.JoinId = p.joins
	}
	p.call(ctx, pe, req, func(res interface{}) bool {
		ack, ok := res.(*messages.RegisterAck)
		if !ok || ack.Status != messages.AckStatus_ACK_STATUS_OK {
			return p.nack(pe, res)
		}
		if len(ack.SupportedVersions) == 0 && missed && pe.toldFor != ack.WorkerIncarnation {
			// A version 1 worker does not say whether it told; it tells
			// every join with missed_writes of a producer it does not hold.
			p.expired(ctx, pe, 0, 0)
			pe.toldFor = ack.WorkerIncarnation
		}
		p.joined(ctx, pe, ack)
		return true
	})
}

// joined takes the worker's cursor for this producer incarnation.
func (p *producer) joined(ctx actor.Context, pe *peer, ack *messages.RegisterAck) {
	pe.probes = 0
	if ack.ToldJoin != 0 && pe.toldFor != ack.ToldJoin {
		// Counted from the worker's word, once per join that told: not for
		// a join the worker already held (it kept its cursor, told nothing
		// and names the join that seeded it).
		p.expired(ctx, pe, 0, 0)
		pe.toldFor = ack.ToldJoin
	}
	if messages.Speaks(ack.SupportedVersions, messages.ProtocolVersion) && pe.version != 0 {
		pe.version = 0 // upgraded: the next registration speaks the current version
	}
	if ack.NextCursor > p.ring.WriteCursor() { // never written by this incarnation: say so, resume at the write cursor
		p.log.Error().Str("peer", pe.m.Name).Uint64("worker_next", ack.NextCursor).Uint64("write", p.ring.WriteCursor()).
			Msg("worker expects a cursor this producer never wrote")
		ack.NextCursor = p.ring.WriteCursor()
	}
	if pe.workerInc != 0 && pe.workerInc != ack.WorkerIncarnation {
		p.log.Info().Str("peer", pe.m.Name).Msg("node restarted: it gets what was written since")
	}
	pe.next, pe.workerInc, pe.registered = ack.NextCursor, ack.WorkerIncarnation, true
	p.rewind(pe) // batches of a previous registration count for nothing here
	pe.m.Incarnation = ack.WorkerIncarnation
	p.log.Info().Str("peer", pe.m.Name).Uint64("next", pe.next).Uint32("protocol", p.speaks(pe)).Msg("registered with node")
	p.service(ctx, pe)
}

// sendRetire ends this incarnation with pe, which acknowledged everything.
func (p *producer) sendRetire(ctx actor.Context, pe *peer) {
	if p.speaks(pe) == messages.PreviousProtocolVersion {
		// Version 1 has no Retire: the node got everything written, and
		// its subscribers will be told "producer restarted" when this
		// node's next incarnation joins (version 1's behaviour).
		pe.retired = true
		p.checkDrain(ctx)
		return
	}
	req := &messages.Retire{ProtocolVersion: messages.ProtocolVersion, PubsubName: p.cfg.Name, ProducerNode: p.node,
		ProducerIncarnation: p.inc, Group: p.group, FinalCursor: p.ring.WriteCursor()}
	p.call(ctx, pe, req, func(res interface{}) bool {
		ack, ok := res.(*messages.BatchAck)
		if !ok || ack.Status != messages.AckStatus_ACK_STATUS_OK {
			return p.nack(pe, res)
		}
		pe.retired = true
		p.checkDrain(ctx)
		return true
	})
}

// drainGiveUp is the consecutive failed calls after which a draining
// producer stops waiting for a node: a refusal or two is often passing (a
// peer that has not listed this node yet), a node down for good fails fast.
const drainGiveUp = 3

// checkDrain answers Drain once no reachable node is left to wait for, or
// at once when drainLate.
func (p *producer) checkDrain(ctx actor.Context) {
	if p.drainTo == nil {
		return
	}
	res := &Drained{Group: p.group, Away: map[string]uint64{}, Incarnation: p.inc, WriteCursor: p.ring.WriteCursor(), LastWrite: p.lease.lastWrite}
	for _, pe := range p.peers {
		switch {
		case pe.retired:
			res.Retired++
		case p.drainLate || pe.absent || pe.failures >= drainGiveUp:
			lag := uint64(0)
			if d, err := p.ring.Decide(pe.next); err == nil && pe.workerInc != 0 {
				lag = d.Lag
			}
			res.Away[pe.m.Name] = lag
			res.Owed = res.Owed || lag > 0 || (pe.workerInc == 0 && p.ring.WriteCursor() > 0)
		default:
			return // reachable and not done yet
		}
	}
	ctx.Send(p.drainTo, res)
	p.drainTo = nil
	if p.drainDue != nil {
		p.drainDue()
	}
}

// nack handles an answer that is not OK. It returns false to have the call
// treated as failed (retried after RetryInterval).
func (p *producer) nack(pe *peer, res interface{}) bool {
	status, detail := messages.AckStatus_ACK_STATUS_UNSPECIFIED, fmt.Sprintf("%T", res)
	switch r := res.(type) {
	case *messages.BatchAck:
		status, detail = r.Status, r.Error
	case *messages.RegisterAck:
		status, detail = r.Status, r.Error
	}
	if status == messages.AckStatus_ACK_STATUS_UNKNOWN_PRODUCER {
		pe.registered = false // the worker lost us (it restarted): handshake again
		pe.version = 0        // in whatever version its new incarnation speaks
		pe.lastErr = "worker does not know this producer"
		return false
	}
	pe.lastErr = fmt.Sprintf("%v: %s", status, detail)
	return false
}

// call sends req to pe's worker as a request and runs onAck with the answer
// on the producer's goroutine. onAck returns false for a negative answer.
func (p *producer) call(ctx actor.Context, pe *peer, req proto.Message, onAck func(res interface{}) bool) {
	pe.inFlight = true
	p.request(ctx, pe, req, func(res interface{}, err error) {
		pe.inFlight = false
		if err == nil && onAck(res) {
			p.answered(pe)
			return
		}
		if err == nil {
			err = fmt.Errorf("%s", pe.lastErr)
		}
		p.failed(ctx, pe, err)
	})
}

// request sends req to pe's worker and runs done with the answer on the
// producer's goroutine; a send the fault hook refuses is answered at once
// with its error. A continuation of a restarted producer or a forgotten peer
// is dropped.
func (p *producer) request(ctx actor.Context, pe *peer, req proto.Message, done func(res interface{}, err error)) {
	if p.hook != nil {
		if err := p.hook.Send(pe.m.Name, req); err != nil {
			done(nil, err)
			return
		}
	}
	f := ctx.RequestFuture(pe.worker, req, p.cfg.CallTimeout)
	ctx.ReenterAfter(f, func(res interface{}, err error) {
		if p.dead || p.peers[pe.m.Name] != pe {
			return
		}
		done(res, err)
	})
}

// answered records that pe answered a call: its failures end.
func (p *producer) answered(pe *peer) {
	if pe.failures > 0 {
		p.log.Info().Str("peer", pe.m.Name).Int("failed_calls", pe.failures).Msg("node reachable again")
	}
	pe.failures, pe.lastErr, pe.lastAck, pe.callable = 0, "", time.Now(), true
	pe.failWarned = false
	pe.gauge.Failures.Store(0)
}

// failed leaves pe's cursor where it is and retries after RetryInterval. It
// logs the first failure and then every 50th, never one line per attempt.
//
// A healthy start or a normal stop does not warn: while a run of failures
// is younger than StallAfter, a node that never answered this producer (it
// is still starting), whose pubsub is not running (a dead letter: it is
// starting or was stopped on purpose) or that retired its own producers
// here (stopped on purpose) is logged at Info, once. A run that
// lasts longer is a warning, the first time a failure sees it so.
func (p *producer) failed(ctx actor.Context, pe *peer, err error) {
	pe.failures++
	pe.lastFail = err.Error()
	pe.callable = false // the next call waits until the node accepts a connection (reach.go)
	if pe.failures == 1 {
		pe.failingSince = time.Now()
	}
	failingFor := time.Since(pe.failingSince)
	quiet := failingFor < p.cfg.StallAfter() &&
		(pe.lastAck.IsZero() || errors.Is(err, actor.ErrDeadLetter) || p.departed(pe.m.Address))
	switch {
	case quiet && pe.failures == 1:
		p.log.Info().Str("peer", pe.m.Name).Err(err).
			Msg("node not answering yet (its pubsub is starting, or was stopped): will retry")
	case !quiet && (!pe.failWarned || pe.failures%50 == 0):
		pe.failWarned = true
		p.log.Warn().Str("peer", pe.m.Name).Err(err).Int("failures", pe.failures).
			Dur("failing_for_ms", failingFor.Round(time.Millisecond)).Msg("call to node failed: will retry")
	}
	pe.retrying = true
	pe.retryCancel = p.sched.SendOnce(p.cfg.RetryInterval, ctx.Self(), &retryPeer{node: pe.m.Name})
	p.m.Retries.Add(context.Background(), 1, pe.gauge.Attrs)
	pe.gauge.Failures.Store(int64(pe.failures))
	es := ctx.ActorSystem().EventStream
	es.Publish(&messages.SyncFailed{Pubsub: p.cfg.Name, Group: p.group, Node: pe.m.Name, Err: err.Error(), Failures: pe.failures})
	es.Publish(&messages.RetryScheduled{Pubsub: p.cfg.Name, Group: p.group, Node: pe.m.Name, After: p.cfg.RetryInterval})
	p.checkDrain(ctx) // a node that fails calls is not waited for
}

// expired counts and announces a CursorExpired told to pe (missed 0: not
// known; overwritten: the part of missed that was overwritten).
func (p *producer) expired(ctx actor.Context, pe *peer, missed, overwritten uint64) {
	pe.expired++
	p.m.ExpiredSent.Add(context.Background(), 1, pe.gauge.Attrs)
	ctx.ActorSystem().EventStream.Publish(&messages.Expired{Pubsub: p.cfg.Name, Group: p.group, Node: pe.m.Name, Missed: missed, Overwritten: overwritten})
}

func (p *producer) member(ctx actor.Context, ev *cluster.Event) {
	if ev.Kind == cluster.Listed { // after the Joined of every member it lists
		p.listed = true
		return
	}
	m := ev.Member
	if m.Name == "" {
		m.Name = m.Address
	}
	if m.Address == p.node || m.Name == p.node {
		return
	}
	pe := p.peers[m.Name]
	switch ev.Kind {
	case cluster.Joined, cluster.Updated:
		if pe == nil {
			pe = &peer{m: m, worker: actor.NewPID(m.Address, core.WorkerName(p.cfg.Name, p.group)), gauge: p.m.Peer(p.group, m.Name),
				listed: monotonic()}
			pe.gauge.Watch(core.Monotonic(), p.cfg.StallAfter())
			p.peers[m.Name] = pe
		} else {
			if pe.absent {
				p.log.Info().Str("peer", m.Name).Msg("node is back in the membership: resuming from its read cursor")
			}
			pe.absent = false
			if pe.forgetCancel != nil {
				pe.forgetCancel()
			}
			if m.Incarnation != 0 && pe.m.Incarnation != 0 && m.Incarnation != pe.m.Incarnation {
				pe.registered, pe.version = false, 0 // restarted node: handshake again (maybe upgraded), keep the cursor
			}
			if m.Incarnation != 0 {
				pe.m.Incarnation = m.Incarnation
			}
		}
		p.service(ctx, pe)
	case cluster.Reachable:
		if pe != nil && pe.retrying {
			pe.retrying = false
			p.service(ctx, pe)
		}
	case cluster.Left:
		if pe != nil && !pe.absent {
			pe.absent = true
			p.log.Info().Str("peer", m.Name).Dur("forget_after_ms", p.cfg.ForgetAfter).Msg("node left the membership: keeping its read cursor")
			pe.forgetCancel = p.sched.SendOnce(p.cfg.ForgetAfter, ctx.Self(), &forgetCheck{node: m.Name})
			p.checkDrain(ctx)
		}
	}
}

func (p *producer) forget(node string) {
	pe := p.peers[node]
	if pe == nil || !pe.absent {
		return
	}
	delete(p.peers, node)
	p.m.Forget(p.group, node)
	p.log.Info().Str("peer", node).Msg("forgot node after ForgetAfter: if it returns, its worker's cursor decides what it gets")
}

func (p *producer) stats() *messages.GroupStats {
	gs := &messages.GroupStats{Group: p.group, Incarnation: p.inc, Capacity: p.cfg.BufferSize, Listed: p.listed}
	if p.ring == nil {
		return gs
	}
	gs.WriteCursor = p.ring.WriteCursor()
	gs.Nodes = append(gs.Nodes, messages.NodeStats{Node: p.node, Next: gs.WriteCursor, Registered: true})
	for _, pe := range p.peers {
		ns := messages.NodeStats{Node: pe.m.Name, Next: pe.next, Registered: pe.registered, InFlight: pe.inFlight || pe.flight > 0,
			Absent: pe.absent, Failures: pe.failures, LastAck: pe.lastAck, Expirations: pe.expired}
		if d, err := p.ring.Decide(pe.next); err == nil {
			ns.Lag, ns.Expired = d.Lag, d.Kind == ringbuf.Expired
		}
		if pe.workerInc == 0 { // never joined in this incarnation: owed what was written since it started
			switch {
			case p.speaks(pe) == messages.PreviousProtocolVersion: // owed since listed (see registerV1)
				ns.Next, ns.Lag, ns.Expired = joinStats(p.ring.Join(pe.listed))
			case pe.sinceInc != 0: // a probe answered: the bound register keeps
				ns.Next, ns.Lag, ns.Expired = joinStats(p.ring.Join(pe.since))
			default: // when it started is not known yet: at most everything written
				ns.Next, ns.Lag, ns.Expired, ns.LagUnknown = 0, gs.WriteCursor, false, true
			}
		}
		p.watch(pe, ns.Lag)
		if ns.Stalled = pe.gauge.Stalled(ns.Lag, core.Monotonic()); ns.Stalled {
			ns.StallReason = stallReason(pe)
		}
		gs.Nodes = append(gs.Nodes, ns)
	}
	return gs
}

// watch records pe's progress for the stall rule (core.Stalled): its read
// cursor moved since last seen, or it is owed nothing, or it was owed
// nothing when last seen (the clock starts when it starts being owed, not
// at the end of an idle spell).
func (p *producer) watch(pe *peer, lag uint64) {
	now := core.Monotonic()
	if pe.next != pe.progressNext || lag == 0 || pe.progressLag == 0 {
		pe.progressNext = pe.next
		pe.gauge.Progressed(now)
	}
	pe.progressLag = lag
	if stalled := pe.gauge.Stalled(lag, now); stalled != pe.stalled { // logged once per change
		pe.stalled = stalled
		if stalled {
			p.log.Warn().Str("peer", pe.m.Name).Uint64("lag", lag).Uint64("next", pe.next).Str("reason", stallReason(pe)).
				Dur("stall_after_ms", p.cfg.StallAfter()).Msg("peer stream stalled: owed messages, read cursor not moving")
		} else {
			p.log.Info().Str("peer", pe.m.Name).Uint64("next", pe.next).Msg("peer stream moves again")
		}
	}
}

// stallReason says why pe's stream makes no progress, as far as the
// producer knows.
func stallReason(pe *peer) string {
	switch {
	case pe.failures > 0:
		return fmt.Sprintf("%d calls in a row failed, the last: %s", pe.failures, pe.lastFail)
	case pe.absent:
		return "the node left the membership"
	case !pe.registered:
		return "not joined with the node's worker yet"
	default:
		return fmt.Sprintf("the node's worker answers but its read cursor stays at %d", pe.next)
	}
}

// joinStats is a join decision as NodeStats' Next, Lag and Expired.
func joinStats(d ringbuf.Decision) (next, lag uint64, expired bool) {
	return d.From, d.Lag, d.Kind == ringbuf.Expired
}

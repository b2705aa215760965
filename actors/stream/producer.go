package stream

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/metric"

	"github.com/echopubsub/echopubsub/actors/delivery"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/internal/faults"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/ringbuf"
)

type (
	flushTick   struct{}
	retryPeer   struct{ node string }
	forgetCheck struct{ node string }
	drainDue    struct{} // Drain.Budget passed
	ackCheck    struct{ node string }
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
	// awaits are the receipts waiting on this producer's writes
	// (producer_receipt.go).
	awaits []*core.Await
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
	case *messages.BatchAck:
		p.onBatchAck(ctx, m)
	case *ackCheck:
		p.onAckCheck(ctx, m)
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
		for _, c := range []scheduler.CancelFunc{pe.retryCancel, pe.forgetCancel, pe.checkCancel} {
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
		if pe.registered && !pe.absent && !pe.inFlight && !pe.retrying && p.windowOpen(pe) && (p.full(pe) || p.burstTail(pe)) {
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
		it.Traceparent, it.Tracestate = e.Trace.Headers()
		p.d.Deliver(it)
	} else if pe := p.peers[e.OnlyNode]; pe != nil { // a write no store keeps (rare: not a Broadcast's cost)
		pe.unstored.Forget(pe.next) // no Expire to pe starts below its cursor
		pe.unstored.Mark(c)
	}
	if w.Await != nil {
		p.track(w.Await, c)
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

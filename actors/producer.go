package actors

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/cluster"
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

// CapacityWarning is published on the actor system's event stream when the
// slowest node's lag reaches Config.CapacityWarningThreshold of BufferSize.
type CapacityWarning struct {
	Pubsub   string
	Group    uint32
	Node     string
	Lag      uint64
	Capacity int
}

// StatsQuery asks a producer for its *GroupStats.
type StatsQuery struct{}

// GroupStats is one producer's view of the cluster.
type GroupStats struct {
	Group       uint32
	Incarnation uint64
	WriteCursor uint64
	Capacity    int
	Nodes       []NodeStats
}

// NodeStats is one node as a producer sees it. The own node is always
// caught up (its subscribers get each message at write time).
type NodeStats struct {
	Node string
	// Next is the next cursor the node needs; Lag is how many messages the
	// producer holds for it (from ringbuf's decision).
	Next       uint64
	Lag        uint64
	Expired    bool // its lag exceeds the buffer: it will be told CursorExpired
	Registered bool
	InFlight   bool
	Absent     bool // left the membership; cursor kept until ForgetAfter
	Failures   int  // consecutive failed calls
}

type (
	flushTick   struct{}
	retryPeer   struct{ node string }
	forgetCheck struct{ node string }
)

// peer is one remote node as this producer sees it.
type peer struct {
	m          cluster.Member
	worker     *actor.PID
	next       uint64 // next-needed cursor: everything below it is acked
	registered bool   // handshake done for this producer incarnation
	ever       bool   // ever registered: next is a real cursor, not a seed
	missed     bool   // forgotten once and missed writes: tell it on register
	since      uint64 // write cursor when this producer started to reach the node
	inFlight   bool
	retrying   bool
	absent     bool
	failures   int
	lastErr    string

	retryCancel, forgetCancel scheduler.CancelFunc
}

type producer struct {
	cfg     Config
	group   uint32
	node    string
	root    *actor.PID
	d       *Dispatcher
	credits chan struct{}
	hook    FaultHook
	log     zerolog.Logger

	ring        *ringbuf.Ring[*Entry] // pointers into the Write messages: 8 bytes a slot for the GC to scan
	lastBatch   *messages.Batch       // the last batch built, reused for a peer that needs the same range
	inc         uint64
	peers       map[string]*peer
	forgotten   map[string]uint64 // node -> write cursor when forgotten
	sched       *scheduler.TimerScheduler
	flushCancel scheduler.CancelFunc
	timer       bool
	dead        bool
	restarted   bool
	lastWarn    time.Time
}

func newProducer(cfg Config, group uint32, node string, root *actor.PID, d *Dispatcher, credits chan struct{}, hook FaultHook, log zerolog.Logger) actor.Producer {
	starts := 0 // incarnations of this producer; only the current one runs
	return func() actor.Actor {
		starts++
		return &producer{cfg: cfg, group: group, node: node, root: root, d: d, credits: credits, hook: hook,
			log: log.With().Uint32("group", group).Logger(), restarted: starts > 1}
	}
}

// WorkerName is the actor name of a pubsub's worker for group, on every node.
func WorkerName(pubsub string, group uint32) string {
	return fmt.Sprintf("%s/g%d/worker", RootName(pubsub), group)
}

// RootName is the actor name of a pubsub's root supervisor.
func RootName(pubsub string) string { return "echopubsub/" + pubsub }

func (p *producer) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *Write:
		p.write(ctx, m)
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
	case *MemberSnapshot:
		for _, mem := range m.Members {
			p.member(ctx, &cluster.Event{Kind: cluster.Joined, Member: mem})
		}
	case *forgetCheck:
		p.forget(m.node)
	case *StatsQuery:
		ctx.Respond(p.stats())
	case *actor.Started:
		ring, err := ringbuf.New[*Entry](p.cfg.BufferSize)
		if err != nil { // Validate rules this out; say so rather than crash-loop silently.
			p.log.Error().Err(err).Msg("producer cannot start")
			return
		}
		p.ring = ring
		p.inc = uint64(time.Now().UnixNano())
		p.peers = map[string]*peer{}
		p.forgotten = map[string]uint64{}
		p.sched = scheduler.NewTimerScheduler(ctx.ActorSystem().Root)
		p.log.Info().Uint64("incarnation", p.inc).Bool("restarted", p.restarted).Msg("producer started")
		if p.restarted {
			// This node's subscribers got the old incarnation's messages at
			// write time, but the write that crashed it may not have reached
			// them: tell them, as every remote worker will tell theirs.
			p.d.Expired(&messages.CursorExpired{Node: p.node, Group: p.group, Reason: "producer restarted"})
		}
		ctx.Request(p.root, &MembersQuery{})
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
	if p.flushCancel != nil {
		p.flushCancel()
	}
	for _, pe := range p.peers {
		for _, c := range []scheduler.CancelFunc{pe.retryCancel, pe.forgetCancel} {
			if c != nil {
				c()
			}
		}
	}
}

func (p *producer) write(ctx actor.Context, w *Write) {
	select { // release the sender's credit first: nothing below may keep it
	case <-p.credits:
	default:
	}
	e := &w.Entry
	c, err := p.ring.Write(e)
	if err != nil {
		p.log.Error().Err(err).Str("topic", e.Topic).Msg("broadcast not buffered")
		return
	}
	if e.OnlyNode == "" || e.OnlyNode == p.node {
		p.d.Deliver(&Item{Topic: e.Topic, Message: w.Msg, PayloadType: e.PayloadType, Payload: e.Payload,
			Exclude: e.Exclude, Node: p.node, Group: p.group, Incarnation: p.inc, Cursor: c})
	}
	w.Msg = nil // the ring keeps w (through e) for BufferSize writes: not the original message
	p.armFlush(ctx)
}

func (p *producer) flushAll(ctx actor.Context) {
	for _, pe := range p.peers {
		p.service(ctx, pe)
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
	p.log.Warn().Str("node", pe.m.Name).Uint64("lag", lag).Int("buffer_size", p.cfg.BufferSize).
		Msg("buffer capacity warning: a node is far behind")
	ctx.ActorSystem().EventStream.Publish(&CapacityWarning{Pubsub: p.cfg.Name, Group: p.group,
		Node: pe.m.Name, Lag: lag, Capacity: p.cfg.BufferSize})
}

// service sends pe what it needs next, if it can take it now. At most one
// call is in flight per node, which keeps each node's stream in order.
func (p *producer) service(ctx actor.Context, pe *peer) {
	if pe.absent || pe.inFlight || pe.retrying {
		return
	}
	if !pe.registered {
		p.register(ctx, pe)
		return
	}
	d, err := p.ring.Decide(pe.next)
	if err != nil { // a cursor ahead of the write cursor: never set by us
		p.log.Error().Err(err).Str("node", pe.m.Name).Msg("read cursor ahead of write cursor: re-registering")
		pe.next, pe.registered = p.ring.WriteCursor(), false
		return
	}
	p.capacity(ctx, pe, d.Lag)
	switch d.Kind {
	case ringbuf.Messages:
		p.sendBatch(ctx, pe, d)
	case ringbuf.Expired:
		p.sendExpire(ctx, pe, d)
	}
}

func (p *producer) sendBatch(ctx actor.Context, pe *peer, d ringbuf.Decision) {
	req := p.batch(d)
	target := d.From + uint64(req.Len())
	capped := target < d.To
	pe.next = plant.Advance(pe.next, target)
	p.call(ctx, pe, req, func(res interface{}) bool {
		ack, ok := res.(*messages.BatchAck)
		if !ok || ack.Status != messages.AckStatus_ACK_STATUS_OK {
			return p.nack(pe, res)
		}
		if target > pe.next {
			pe.next = target
		}
		if capped {
			p.service(ctx, pe)
		} else if pe.next < p.ring.WriteCursor() {
			p.armFlush(ctx)
		}
		return true
	})
}

// batch builds the batch for decision d: from d.From, as many entries as
// MaxBatchMessages and MaxBatchBytes allow (at least one). Peers that need
// the same range share one batch, which is never modified once sent.
func (p *producer) batch(d ringbuf.Decision) *messages.Batch {
	n, size := 0, 0
	for c := d.From; c < d.To && n < p.cfg.MaxBatchMessages; c++ {
		e, err := p.ring.At(c)
		if err != nil {
			p.log.Error().Err(err).Msg("decided messages not buffered")
			break
		}
		sz := len(e.Payload) + len(e.Topic) + len(e.Exclude) + len(e.OnlyNode) + 8
		if n > 0 && size+sz > p.cfg.MaxBatchBytes {
			break
		}
		n++
		size += sz
	}
	if b := p.lastBatch; b != nil && b.FirstCursor == d.From && b.Len() == n && b.ProducerIncarnation == p.inc {
		return b
	}
	b := &messages.Batch{ProtocolVersion: messages.ProtocolVersion, PubsubName: p.cfg.Name, ProducerNode: p.node,
		ProducerIncarnation: p.inc, Group: p.group, FirstCursor: d.From,
		TopicIndex: make([]uint32, 0, n), TypeIndex: make([]uint32, 0, n), PayloadSize: make([]uint32, 0, n),
		Payloads: make([]byte, 0, size)}
	for c := d.From; c < d.From+uint64(n); c++ {
		e, _ := p.ring.At(c)
		b.Add(e.Topic, e.PayloadType, e.Payload, e.Exclude, e.OnlyNode)
	}
	p.lastBatch = b
	return b
}

func (p *producer) sendExpire(ctx actor.Context, pe *peer, d ringbuf.Decision) {
	req := &messages.Expire{ProtocolVersion: messages.ProtocolVersion, PubsubName: p.cfg.Name, ProducerNode: p.node,
		ProducerIncarnation: p.inc, Group: p.group, Missed: d.Missed, NextCursor: d.To}
	p.log.Warn().Str("node", pe.m.Name).Uint64("missed", d.Missed).Msg("node fell behind the buffer: sending cursor expired")
	p.call(ctx, pe, req, func(res interface{}) bool {
		ack, ok := res.(*messages.BatchAck)
		if !ok || ack.Status != messages.AckStatus_ACK_STATUS_OK {
			return p.nack(pe, res)
		}
		if d.To > pe.next {
			pe.next = d.To
		}
		p.service(ctx, pe)
		return true
	})
}

func (p *producer) register(ctx actor.Context, pe *peer) {
	if !pe.ever {
		// A node counts as joined from its first successful registration and
		// is seeded at the write cursor then: no backlog. If writes happened
		// while we were trying to reach it, its subscribers (if it already
		// has any) may have missed them: say so, rather than skip silently.
		pe.next = p.ring.WriteCursor()
		if pe.since < pe.next {
			pe.missed = true
		}
	}
	req := &messages.Register{ProtocolVersion: messages.ProtocolVersion, PubsubName: p.cfg.Name, ProducerNode: p.node,
		ProducerIncarnation: p.inc, Group: p.group, NextCursor: pe.next, MissedWrites: pe.missed}
	p.call(ctx, pe, req, func(res interface{}) bool {
		ack, ok := res.(*messages.RegisterAck)
		if !ok || ack.Status != messages.AckStatus_ACK_STATUS_OK {
			return p.nack(pe, res)
		}
		// The worker may already hold more than we think (an ack was lost):
		// trust it only within what was written.
		if ack.NextCursor > pe.next && ack.NextCursor <= p.ring.WriteCursor() {
			pe.next = ack.NextCursor
		}
		if pe.m.Incarnation != 0 && ack.WorkerIncarnation != 0 && ack.WorkerIncarnation != pe.m.Incarnation {
			p.log.Info().Str("node", pe.m.Name).Msg("node restarted: resuming from its read cursor")
		}
		pe.m.Incarnation = ack.WorkerIncarnation
		pe.registered, pe.ever, pe.missed = true, true, false
		p.log.Info().Str("node", pe.m.Name).Uint64("next", pe.next).Msg("registered with node")
		p.service(ctx, pe)
		return true
	})
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
	if p.hook != nil {
		if err := p.hook.Send(pe.m.Name, req); err != nil {
			pe.inFlight = false
			p.failed(ctx, pe, err)
			return
		}
	}
	f := ctx.RequestFuture(pe.worker, req, p.cfg.CallTimeout)
	ctx.ReenterAfter(f, func(res interface{}, err error) {
		if p.dead || p.peers[pe.m.Name] != pe {
			return // a stale continuation of a restarted producer or a forgotten peer
		}
		pe.inFlight = false
		if err == nil && onAck(res) {
			if pe.failures > 0 {
				p.log.Info().Str("node", pe.m.Name).Int("failed_calls", pe.failures).Msg("node reachable again")
			}
			pe.failures, pe.lastErr = 0, ""
			return
		}
		if err == nil {
			err = fmt.Errorf("%s", pe.lastErr)
		}
		p.failed(ctx, pe, err)
	})
}

// failed leaves pe's cursor where it is and retries after RetryInterval. It
// logs the first failure and then every 50th, never one line per attempt.
func (p *producer) failed(ctx actor.Context, pe *peer, err error) {
	pe.failures++
	if pe.failures == 1 || pe.failures%50 == 0 {
		p.log.Warn().Str("node", pe.m.Name).Err(err).Int("failures", pe.failures).Msg("call to node failed: will retry")
	}
	pe.retrying = true
	pe.retryCancel = p.sched.SendOnce(p.cfg.RetryInterval, ctx.Self(), &retryPeer{node: pe.m.Name})
}

func (p *producer) member(ctx actor.Context, ev *cluster.Event) {
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
			_, missed := p.forgotten[m.Name]
			missed = missed && p.forgotten[m.Name] < p.ring.WriteCursor()
			delete(p.forgotten, m.Name)
			pe = &peer{m: m, worker: actor.NewPID(m.Address, WorkerName(p.cfg.Name, p.group)), missed: missed,
				since: p.ring.WriteCursor()}
			p.peers[m.Name] = pe
		} else {
			if pe.absent {
				p.log.Info().Str("node", m.Name).Msg("node is back in the membership: resuming from its read cursor")
			}
			pe.absent = false
			if pe.forgetCancel != nil {
				pe.forgetCancel()
			}
			if m.Incarnation != 0 && pe.m.Incarnation != 0 && m.Incarnation != pe.m.Incarnation {
				pe.registered = false // restarted node: handshake again, keep the cursor
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
			p.log.Info().Str("node", m.Name).Dur("forget_after", p.cfg.ForgetAfter).Msg("node left the membership: keeping its read cursor")
			pe.forgetCancel = p.sched.SendOnce(p.cfg.ForgetAfter, ctx.Self(), &forgetCheck{node: m.Name})
		}
	}
}

func (p *producer) forget(node string) {
	pe := p.peers[node]
	if pe == nil || !pe.absent {
		return
	}
	delete(p.peers, node)
	p.forgotten[node] = p.ring.WriteCursor()
	p.log.Info().Str("node", node).Msg("forgot node after ForgetAfter: it will be told CursorExpired if it returns after missing writes")
}

func (p *producer) stats() *GroupStats {
	gs := &GroupStats{Group: p.group, Incarnation: p.inc, Capacity: p.cfg.BufferSize}
	if p.ring == nil {
		return gs
	}
	gs.WriteCursor = p.ring.WriteCursor()
	gs.Nodes = append(gs.Nodes, NodeStats{Node: p.node, Next: gs.WriteCursor, Registered: true})
	for _, pe := range p.peers {
		ns := NodeStats{Node: pe.m.Name, Next: pe.next, Registered: pe.registered, InFlight: pe.inFlight,
			Absent: pe.absent, Failures: pe.failures}
		if d, err := p.ring.Decide(pe.next); err == nil {
			ns.Lag, ns.Expired = d.Lag, d.Kind == ringbuf.Expired
		}
		if !pe.ever { // not joined yet: nothing is held for it
			ns.Lag, ns.Next = 0, gs.WriteCursor
		}
		gs.Nodes = append(gs.Nodes, ns)
	}
	return gs
}

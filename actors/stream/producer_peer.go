package stream

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"

	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/ringbuf"
)

// peer is one remote node as this producer sees it. Its fields are grouped
// by concern (the groups are embedded: pe.sent is pe.sending.sent).
type peer struct {
	m          cluster.Member
	worker     *actor.PID
	next       uint64 // next-needed cursor: everything below it is acked
	registered bool   // joined the worker incarnation workerInc
	inFlight   bool   // a register, join, expire or retire call: alone on the link
	retrying   bool
	absent     bool
	retired    bool // acknowledged Retire (graceful Stop)
	gauge      *core.PeerGauge
	// unstored marks the cursors of the writes to this node that no store
	// keeps (DirectBroadcast, requests: core.Write.OnlyNode), so that an
	// Expire can say whether the range it skips held one (sendExpire).
	// Nothing before the peer was listed is known.
	unstored ringbuf.Marks

	retryCancel, forgetCancel scheduler.CancelFunc

	joining
	sending
	health
}

// joining is what a peer's registration knows (producer_join.go).
type joining struct {
	// workerInc is the worker incarnation this producer last joined (0:
	// never); next is that worker's cursor.
	workerInc uint64
	// since is the latest bound, on this producer's clock, before which the
	// worker incarnation sinceInc had not started (see register).
	since    int64
	sinceInc uint64
	probes   int // probes of this registration so far
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
	toldFor uint64
}

// sending is a peer's batches in flight (producer_send.go).
type sending struct {
	// sent is the end of the last batch sent (next <= sent): batches cover
	// [next, sent), within the window (windowOpen: MaxBatchesInFlight full
	// batches' worth, in batches of any size). epoch
	// changes whenever sent is wound back to next (a refused, lost or
	// failed batch), so answers to batches sent before count as acks only.
	sent  uint64
	epoch uint64
	// flights are the batches sent and not yet answered, oldest first
	// (flightMsgs entries and flightBytes bytes in all): a
	// worker answers in the order it was sent, and one OK answer may
	// cover several (cumulative acks: see onBatchAck). checking: an
	// ackCheck is scheduled (checkCancel cancels it).
	flights []flight
	// cumulative: the worker incarnation joined answers batches sent as
	// the producer itself, cumulatively (RegisterAck.cumulative_answers);
	// false: one future per batch (an earlier build).
	cumulative              bool
	flightMsgs, flightBytes int
	checking                bool
	checkCancel             scheduler.CancelFunc
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

// health is how a peer's calls fare and whether its stream moves
// (producer_call.go, producer_stats.go).
type health struct {
	// callable: the node accepted a connection or answered a call since
	// its last failed call; until then a call waits for reach (reach.go).
	callable bool
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
				joining: joining{listed: monotonic()}, unstored: ringbuf.NewMarks(p.ring.WriteCursor())}
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
			p.reachability(pe, core.Unreachable)
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

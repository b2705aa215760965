package stream

import (
	"errors"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/internal/plant"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/ringbuf"
)

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
		var refused *messages.VersionError
		if ok && len(ack.SupportedVersions) == 0 && errors.As(ack.Refusal(), &refused) && refused.Version == messages.ProtocolVersion {
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
		// Messages stamped (core.Write.At, inside Broadcast) from since on
		// are owed to the node (ringbuf.JoinSince). Several probes keep the
		// tightest bound.
		since := ringbuf.JoinSince(int64(sent.Sub(epoch)), int64(ack.StartedAgoNanos))
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
	told := ack.ToldJoin != 0 && pe.toldFor != ack.ToldJoin
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
	p.settleJoin(pe, ack.NextCursor, told, pe.workerInc == ack.WorkerIncarnation)
	pe.next, pe.workerInc, pe.registered = ack.NextCursor, ack.WorkerIncarnation, true
	pe.cumulative = ack.CumulativeAnswers
	p.rewind(pe) // batches of a previous registration count for nothing here
	pe.m.Incarnation = ack.WorkerIncarnation
	p.log.Info().Str("peer", pe.m.Name).Uint64("next", pe.next).Uint32("protocol", p.speaks(pe)).Msg("registered with node")
	p.service(ctx, pe)
}

package stream

import (
	"fmt"

	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/ringbuf"
)

// StatsQuery asks a producer for its *messages.GroupStats.
type StatsQuery struct{}

func (p *producer) stats() *messages.GroupStats {
	gs := &messages.GroupStats{Group: p.group, Incarnation: p.inc, Capacity: p.cfg.BufferSize, Listed: p.listed}
	if p.ring == nil {
		return gs
	}
	gs.WriteCursor = p.ring.WriteCursor()
	gs.Nodes = append(gs.Nodes, messages.NodeStats{Node: p.node, Next: gs.WriteCursor, Registered: true})
	for _, pe := range p.peers {
		ns := messages.NodeStats{Node: pe.m.Name, Next: pe.next, Registered: pe.registered, InFlight: pe.inFlight || len(pe.flights) > 0,
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

package stream

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/echopubsub/echopubsub/messages"
)

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

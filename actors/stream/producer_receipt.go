package stream

import (
	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/messages"
)

// Receipts: the BroadcastAwait calls waiting on this producer's writes
// (core.Write.Await). The producer reports to each what the acks it gets
// anyway say: nothing is sent for a receipt, and a write without one costs
// a nil check when it is taken; every other hook below returns at once
// while no receipt waits (len(p.awaits) == 0).
//
// What a node's answer means for an awaited write at cursor c:
//   - an OK batch ack, or an OUT_OF_ORDER answer, whose next cursor passes c:
//     the worker handed c to its node's subscribers' mailboxes (and, for a
//     durable topic, to its store first) before answering: Delivered;
//   - an acknowledged Expire whose range holds c: Expired when c is at or
//     past the worker's cursor before it (expired_from: the node was told
//     CursorExpired for c), Delivered below it (the batch's ack was lost),
//     Unknown when the worker does not say;
//   - with AwaitStored, a Delivered whose answer does not say the node's
//     store appended the batch (BatchAck.stored) is NotStored;
//   - a join past c: Expired when the join told CursorExpired, Delivered
//     when the worker kept its own cursor (this producer incarnation had
//     reached it), NotOwed otherwise (the node started after c);
//   - a failed call, or the node leaving the membership: Unreachable until
//     an answer decides (an answer since puts it back to Pending).

// track starts reporting to a, whose write this producer buffered at
// cursor c and has handed to this node's subscribers.
func (p *producer) track(a *core.Await, c uint64) {
	a.Taken(p.node, p.group, p.inc, c)
	if a.Set(p.node, core.Delivered) {
		return
	}
	for _, pe := range p.peers {
		if pe.absent || pe.failures > 0 {
			a.Set(pe.m.Address, core.Unreachable)
		}
	}
	p.prune()
	p.awaits = append(p.awaits, a)
}

// awaited reports whether a receipt waits on a write in [from, to): its
// batch asks to be answered as soon as it is delivered
// (messages.Batch.awaited), not after the worker's AckInterval. A batch
// cached for a range is built after the writes in it were taken (track),
// so the flag is right for every node it goes to.
func (p *producer) awaited(from, to uint64) bool {
	for _, a := range p.awaits {
		if c := a.Cursor(); c >= from && c < to {
			return true
		}
	}
	return false
}

// settle reports to the receipts waiting on cursors below to that pe's
// answer put them in status s. A Delivered that does not say stored is
// NotStored for a receipt that asked for the append (settleStored).
func (p *producer) settle(pe *peer, to uint64, s core.NodeStatus) {
	p.settleStored(pe, to, s, false)
}

// settleStored is settle for an answer that may say its node's durable
// store appended the writes (BatchAck.stored).
func (p *producer) settleStored(pe *peer, to uint64, s core.NodeStatus, stored bool) {
	if len(p.awaits) == 0 {
		return
	}
	for _, a := range p.awaits {
		if a.Cursor() < to {
			st := s
			if st == core.Delivered && !stored && a.Stored() {
				st = core.NotStored
			}
			a.Set(pe.m.Address, st)
		}
	}
	p.prune()
}

// settleExpire reports an acknowledged Expire that moved pe to to: the
// writes below the worker's own cursor before it (BatchAck.expired_from)
// were delivered (their own ack was lost), the rest Expired. A worker that
// does not say where it stood (a retried Expire, an earlier build) leaves
// the writes not decided yet Unknown: never a false Expired.
func (p *producer) settleExpire(pe *peer, to uint64, ack *messages.BatchAck) {
	if len(p.awaits) == 0 {
		return
	}
	if ack.ExpiredFrom == nil {
		p.settle(pe, to, core.Unknown)
		return
	}
	p.settle(pe, min(*ack.ExpiredFrom, to), core.Delivered)
	p.settle(pe, to, core.Expired)
}

// reachability reports pe's reachability to every receipt waiting on it:
// Unreachable after a failed call or a departure, Pending after an answer.
func (p *producer) reachability(pe *peer, s core.NodeStatus) {
	if len(p.awaits) == 0 {
		return
	}
	for _, a := range p.awaits {
		a.Set(pe.m.Address, s)
	}
	p.prune()
}

// settleJoin reports a join that starts pe at next: the receipts waiting on
// a cursor below it that pe had not answered are decided by the join.
func (p *producer) settleJoin(pe *peer, next uint64, told, sameWorker bool) {
	s := core.NotOwed
	switch {
	case told:
		s = core.Expired
	case sameWorker:
		s = core.Delivered
	}
	p.settle(pe, next, s)
}

// prune drops the receipts that are settled or whose caller stopped
// waiting.
func (p *producer) prune() {
	kept := p.awaits[:0]
	for _, a := range p.awaits {
		if !a.Finished() {
			kept = append(kept, a)
		}
	}
	for i := len(kept); i < len(p.awaits); i++ {
		p.awaits[i] = nil
	}
	p.awaits = kept
}

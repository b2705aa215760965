package durable

import (
	"time"

	"github.com/echopubsub/echopubsub/store"
)

// A producer incarnation that ends before it reached a node (the node was
// unreachable for its whole life, or it was killed before its first join)
// could not tell that node what it wrote for it. With a node-local store
// the next incarnation tells it: each producer records a lease in its
// node's store, "this incarnation writes nothing after T without
// recording a new lease first" (renewed about every second while it
// writes, a position-only write: no fsync, never per message), and a
// graceful Stop replaces it with the time of the last write. The next
// incarnation reads it before it records its own: a node whose pubsub
// started before the earlier incarnation could last have written, and
// that never held that incarnation, is told CursorExpired when this one
// joins it (Register.predecessor_owed; Missed 0: how many is not known).
// A node that started later was owed nothing: no alarm in a cold start.

// leaseNode keys the producers' leases in the positions of a LocalStore:
// Incarnation is the producer incarnation, Next the lease's end in Unix
// nanoseconds (0: it never wrote).
const leaseNode = "\x00lease"

// Leases implements core.Durable.
func (d *Engine) Leases() bool { return d.Local() != nil }

// Lease implements core.Durable.
func (d *Engine) Lease(group uint32, incarnation uint64, until time.Time) error {
	l := d.Local()
	if l == nil {
		return nil
	}
	var end uint64
	if !until.IsZero() {
		end = uint64(until.UnixNano())
	}
	ctx, cancel := d.Ctx()
	defer cancel()
	return l.AppendAt(ctx, nil, store.ProducerPosition{Node: leaseNode, Group: group, Incarnation: incarnation, Next: end})
}

// Earlier implements core.Durable.
func (d *Engine) Earlier(group uint32) (uint64, time.Time, bool) {
	l := d.Local()
	if l == nil {
		return 0, time.Time{}, false
	}
	ctx, cancel := d.Ctx()
	defer cancel()
	pos, ok, err := l.Position(ctx, leaseNode, group)
	if err != nil {
		d.Log.Warn().Err(err).Uint32("group", group).Msg("durable streams: could not read the earlier producer incarnation's lease: nodes it never reached are not told")
		return 0, time.Time{}, false
	}
	if !ok || pos.Incarnation == 0 {
		return 0, time.Time{}, false
	}
	var until time.Time
	if pos.Next != 0 {
		until = time.Unix(0, int64(pos.Next))
	}
	return pos.Incarnation, until, true
}

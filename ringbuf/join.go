package ringbuf

// The join boundary: which messages a node that joins is owed. JoinSince
// turns a probe's answer into the instant the node is owed messages from,
// and Join turns that instant into a decision. Producers call both; the
// worker reports the age (actors/stream, worker.startedAgo) and the package
// doc of echopubsub, "Joined", states the guarantee.

// JoinSince is the earliest instant, in WriteAt's clock, at which a node
// may have started: a probe sent at sent (same clock) was answered by the
// node's worker, which said its node's Start returned age ago (on the
// node's own monotonic clock, 0 while Start still runs). The instant the
// answer names lies between the node's Start call and its return, and the
// worker answered after the probe was sent, so it is not before sent - age.
// A margin of age/999 covers the two monotonic clocks running at slightly
// different rates: NTP slews each by at most 500 ppm, so they differ by up
// to 1.0005/0.9995 - 1, about 1000.5 ppm (age/1000 would be short by
// about 0.5 ppm of the age). The bound errs only
// towards earlier: some history may be delivered, never a message written
// after Start returned withheld. A later probe's bound, when greater, is
// tighter. Pass the result to Join.
func JoinSince(sent, age int64) int64 { return sent - age - age/999 }

// Join is the flush decision for a node that joins now and is owed every
// message written at or after since (in WriteAt's clock), nothing before.
// Messages and CaughtUp start at the first such message still buffered. For
// Expired, a message the node is owed was overwritten: To is the write
// cursor, where the node's cursor moves, and Missed is 0 because how many of
// the overwritten messages were written after since is not known (at least
// one was). O(log Cap()).
func (r *Ring[T]) Join(since int64) Decision {
	lo, hi := r.oldest(), r.write
	if lo > 0 && r.evictedAt >= since {
		return Decision{Kind: Expired, Lag: r.write - lo, From: lo, To: r.write}
	}
	for lo < hi { // first cursor in [lo, hi) written at or after since
		mid := lo + (hi-lo)/2
		if r.times[mid%uint64(len(r.slots))] >= since {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	if lo == r.write {
		return Decision{Kind: CaughtUp, From: lo, To: lo}
	}
	return Decision{Kind: Messages, Lag: r.write - lo, From: lo, To: r.write}
}

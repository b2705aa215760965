package stream

import (
	"time"

	"github.com/echopubsub/echopubsub/internal/core"
)

// leaseTerm is how far ahead a producer's lease reaches: it records "this
// incarnation writes nothing after now + leaseTerm without recording a
// new lease first" about every leaseTerm/2 while it writes (see
// internal/durable/lease.go).
const leaseTerm = 2 * time.Second

// leaseRetry is the wait after a failed Lease call before the next one.
const leaseRetry = 10 * time.Second

// lease is a producer's lease in its node's store, and what the
// incarnation before it recorded. Owned by the producer actor.
type lease struct {
	on  bool // the node records leases (core.Durable.Leases)
	dur core.Durable
	// group, incarnation: whose lease this is (set at newLease, inc later).
	group uint32
	// until: this incarnation's recorded lease; lastWrite its last take.
	until, lastWrite time.Time
	failing          bool      // the last Lease call failed (logged once)
	retryAt          time.Time // after a failure: not tried again before (a store that hangs costs a stall per leaseRetry, not per take)
	// earlierInc and earlierUntil: the lease of the incarnation before
	// (0: none recorded), read before this one records its own.
	earlierInc   uint64
	earlierUntil time.Time
}

func newLease(dur core.Durable, group uint32) lease {
	if dur == nil || !dur.Leases() {
		return lease{}
	}
	l := lease{on: true, dur: dur, group: group}
	l.earlierInc, l.earlierUntil, _ = dur.Earlier(group)
	return l
}

// renewLease records a new lease when the one recorded ends within
// leaseTerm/2: the writes of this take fall under it.
func (p *producer) renewLease() {
	l := &p.lease
	now := time.Now()
	if now.Before(l.until.Add(-leaseTerm/2)) || now.Before(l.retryAt) {
		return
	}
	until := now.Add(leaseTerm)
	if err := l.dur.Lease(p.group, p.inc, until); err != nil {
		if !l.failing {
			p.log.Error().Err(err).Msg("durable store: could not record this producer's lease: if it dies before reaching a node, its next incarnation may not tell that node what it missed")
		}
		l.failing, l.retryAt = true, time.Now().Add(leaseRetry)
		return
	}
	if l.failing {
		p.log.Info().Msg("durable store: this producer's lease is recorded again")
	}
	l.until, l.failing = until, false
}

// owedByEarlier reports whether the incarnation before this one (born at
// inc, Unix nanoseconds) may have written for a node after it started: the
// node started at or after since (monotonic, core.Epoch) and before the
// earlier incarnation's last possible write (its lease's end, or, as it
// had ended by then, this incarnation's birth).
func (l *lease) owedByEarlier(since int64, inc uint64) bool {
	if l.earlierInc == 0 || l.earlierInc == inc || l.earlierUntil.IsZero() {
		return false
	}
	end := l.earlierUntil
	if born := time.Unix(0, int64(inc)); born.Before(end) {
		end = born
	}
	// On the wall clock, as the lease was recorded: the earliest the node
	// may have started.
	started := time.Unix(0, epoch.UnixNano()+since)
	return started.Before(end)
}

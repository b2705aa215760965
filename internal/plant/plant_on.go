//go:build plantdefect

package plant

import (
	"math"
	"os"
	"sync"
	"sync/atomic"
)

// Enabled reports whether this build can plant defects.
const Enabled = true

var (
	defect = os.Getenv(Env)
	count  atomic.Int64

	mu      sync.Mutex
	resumed = map[string]int{} // per subscriber: messages since its last RESUMED (-1: none pending)
)

func every(n int64) bool { return count.Add(1)%n == 0 }

// DropLocal reports whether to drop this delivery (local: it came from
// this node's own producer).
func DropLocal(local bool) bool { return defect == LocalDrop && local && every(LocalDropEvery) }

// Noticed tells the plant that subscriber sub was sent a back-pressure
// notice (resumed: a RESUMED one).
func Noticed(sub string, isResumed bool) {
	if defect != LossAfterResumed {
		return
	}
	mu.Lock()
	defer mu.Unlock()
	if isResumed {
		resumed[sub] = 0
	} else {
		delete(resumed, sub)
	}
}

// DropAfterResumed reports whether to drop this message to sub.
func DropAfterResumed(sub string) bool {
	if defect != LossAfterResumed {
		return false
	}
	mu.Lock()
	defer mu.Unlock()
	n, ok := resumed[sub]
	if !ok {
		return false
	}
	n++
	if n == LossAfterResumedAt {
		delete(resumed, sub)
		return true
	}
	resumed[sub] = n
	return false
}

// ExpiredTo is the To a worker names in a CursorExpired for a node that
// fell behind the buffer (planted: to + 1).
func ExpiredTo(to uint64) uint64 {
	if defect == ExpiredToOff {
		return to + 1
	}
	return to
}

// SkipEntry reports whether a worker skips this batch entry.
func SkipEntry() bool { return defect == WorkerSkip && every(WorkerSkipEvery) }

// Advance is the read cursor a producer keeps for a peer when it sends a
// batch that ends at target (planted: target, before any ack).
func Advance(next, target uint64) uint64 {
	if defect == ProducerAdvance && target > next {
		return target
	}
	return next
}

// DeliveredHook is the part of faults.Hook AckFirst calls.
type DeliveredHook interface {
	Delivered(from string, cursor uint64)
}

// AckFirst lets a worker record entry c as delivered (*expected = c+1) and
// run the hook before it delivers it, as if the ack went out first: a
// worker crash there loses the entry, as its redelivery is skipped.
func AckFirst[H DeliveredHook](expected *uint64, c uint64, hook H, from string) {
	if defect != AckBeforeDeliver || any(hook) == nil {
		return
	}
	*expected = c + 1
	hook.Delivered(from, c) // may panic: the crash hook
}

// SkipCatchUpRow reports whether a catch-up skips this message row.
func SkipCatchUpRow() bool { return defect == CatchUpSkip && every(CatchUpSkipEvery) }

// ResumeFrom is the cursor a WithFrom(from) catch-up starts at (planted:
// one below).
func ResumeFrom(from uint64) uint64 {
	if defect == ResumeRedeliver && from > 1 {
		return from - 1
	}
	return from
}

// DropGapNotice reports whether a catch-up passes over a gap row silently.
func DropGapNotice() bool { return defect == GapNoticeLost }

// DropTruncatedNotice reports whether a catch-up passes over rows
// retention removed without its *StreamTruncated.
func DropTruncatedNotice() bool { return defect == TruncatedNoticeLost }

// IgnoreAppendError reports whether a durable broadcast whose append
// failed is queued anyway, as if stored (with no cursor).
func IgnoreAppendError() bool { return defect == AppendErrorIgnored }

// JoinSince is the instant a joining node is owed messages from (planted:
// none written so far: the node starts at the producer's write cursor, and
// what was written between its Start and its registration is skipped).
func JoinSince(since int64) int64 {
	if defect == JoinAtWrite {
		return math.MaxInt64
	}
	return since
}

// SkipPresenceChange reports whether a presence tracker skips this change
// of another node's stream (and follows past it, as if applied).
func SkipPresenceChange() bool { return defect == PresenceLostDiff && every(PresenceLostDiffEvery) }

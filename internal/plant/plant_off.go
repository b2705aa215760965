//go:build !plantdefect

package plant

// Enabled reports whether this build can plant defects.
const Enabled = false

// DropLocal reports whether to drop this delivery (local: it came from
// this node's own producer).
func DropLocal(local bool) bool { return false }

// Noticed tells the plant that subscriber sub was sent a back-pressure
// notice (resumed: a RESUMED one).
func Noticed(sub string, resumed bool) {}

// DropAfterResumed reports whether to drop this message to sub.
func DropAfterResumed(sub string) bool { return false }

// ExpiredTo is the To a worker names in a CursorExpired for a node that
// fell behind the buffer (planted: to + 1).
func ExpiredTo(to uint64) uint64 { return to }

// SkipEntry reports whether a worker skips this batch entry.
func SkipEntry() bool { return false }

// Advance is the read cursor a producer keeps for a peer when it sends a
// batch that ends at target (planted: target, before any ack).
func Advance(next, target uint64) uint64 { return next }

// DeliveredHook is the part of faults.Hook AckFirst calls (a type
// parameter, so the hook is passed without an interface conversion).
type DeliveredHook interface {
	Delivered(from string, cursor uint64)
}

// AckFirst lets a worker record entry c as delivered (*expected = c+1) and
// run the hook before it delivers it (planted), as if the ack went out first.
func AckFirst[H DeliveredHook](expected *uint64, c uint64, hook H, from string) {}

// SkipCatchUpRow reports whether a catch-up skips this message row.
func SkipCatchUpRow() bool { return false }

// ResumeFrom is the cursor a WithFrom(from) catch-up starts at (planted:
// one below).
func ResumeFrom(from uint64) uint64 { return from }

// DropGapNotice reports whether a catch-up passes over a gap row silently.
func DropGapNotice() bool { return false }

// DropTruncatedNotice reports whether a catch-up passes over rows
// retention removed without its *StreamTruncated.
func DropTruncatedNotice() bool { return false }

// IgnoreAppendError reports whether a durable broadcast whose append
// failed is queued anyway, as if stored (with no cursor).
func IgnoreAppendError() bool { return false }

// JoinSince is the instant a joining node is owed messages from (planted:
// none written so far: the node starts at the producer's write cursor, and
// what was written between its Start and its registration is skipped).
func JoinSince(since int64) int64 { return since }

// SkipPresenceChange reports whether a presence tracker skips this change
// of another node's stream.
func SkipPresenceChange() bool { return false }

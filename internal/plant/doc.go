// Package plant plants defects in the library for the tests that prove the
// chaos soak catches them. In a normal build (without the plantdefect build
// tag) every function is a constant false that the compiler inlines away:
// the call sites cost nothing.
//
// Built with -tags plantdefect, the environment variable
// ECHOPUBSUB_PLANT_DEFECT chooses one defect (read once, at start):
//
//	local_drop        the dispatcher silently drops one local delivery in LocalDropEvery
//	loss_after_resume the dispatcher silently drops a subscriber's LossAfterResumedAt-th
//	                  message after a RESUMED notice
//	worker_skip       a worker skips one batch entry in WorkerSkipEvery (and advances past it)
//	producer_advance  a producer advances a peer's read cursor when it sends a batch, not
//	                  when the batch is acknowledged. Not in All: since workers refuse a
//	                  batch past their cursor (OUT_OF_ORDER) and the producer takes the
//	                  worker's cursor, this defect heals itself after one refusal (a lost
//	                  batch is sent again, or its loss told as an expiry); run it by hand
//	                  to see the soak stay clean
//	ack_first         a worker marks an entry delivered (what it acknowledges) before
//	                  delivering it, with the crash hook in between
//	join_at_write     a producer starts a node it joins at its write cursor: what was
//	                  written after the node's Start and before the join is skipped
//	                  (the bug bb62e44 fixed; only publishing during a join exposes it)
//	expired_to_off    a worker's CursorExpired for a node that fell behind the buffer
//	                  names one cursor too many: To + 1 (the checker's range rule; only
//	                  a node away longer than the buffer exposes it)
//
// Session defects (caught by test/e2e's session soak, not in All):
//
//	catchup_skip      a WithFrom catch-up skips one message row in CatchUpSkipEvery
//	                  that it read from the store
//	resume_redeliver  a WithFrom(c) subscription with c > 1 starts at c-1: the row
//	                  the owner acknowledged last is delivered again
//	gap_notice_lost   a catch-up passes over a gap row without its *StreamGap
//	truncated_notice_lost  a catch-up passes over rows retention removed without
//	                  its *StreamTruncated (only retention exposes it)
//	append_error_ignored   a durable broadcast whose append failed is queued as if
//	                  stored, with no cursor (only a failing store exposes it:
//	                  the soak's PostgreSQL faults)
//
// Presence defects (caught by test/chaos's presence soak, not in All):
//
//	presence_lost_diff  a presence tracker skips one change of another node's
//	                  stream in PresenceLostDiffEvery while it follows past it
//	                  (package presence's build-tagged plant_on.go)
package plant

// Env is the environment variable that chooses the defect.
const Env = "ECHOPUBSUB_PLANT_DEFECT"

// Defects, the values of Env.
const (
	LocalDrop        = "local_drop"
	LossAfterResumed = "loss_after_resume"
	WorkerSkip       = "worker_skip"
	ProducerAdvance  = "producer_advance"
	AckBeforeDeliver = "ack_first"
	JoinAtWrite      = "join_at_write"
	ExpiredToOff     = "expired_to_off"

	CatchUpSkip         = "catchup_skip"
	ResumeRedeliver     = "resume_redeliver"
	GapNoticeLost       = "gap_notice_lost"
	TruncatedNoticeLost = "truncated_notice_lost"
	AppendErrorIgnored  = "append_error_ignored"

	PresenceLostDiff = "presence_lost_diff"
)

// Sessions lists the session defects the session soak must catch.
var Sessions = []string{CatchUpSkip, ResumeRedeliver, GapNoticeLost, TruncatedNoticeLost, AppendErrorIgnored}

// All lists every defect the soak must catch (see producer_advance above).
var All = []string{LocalDrop, LossAfterResumed, WorkerSkip, AckBeforeDeliver, JoinAtWrite, ExpiredToOff}

// Rates of the planted defects.
const (
	LocalDropEvery     = 2000
	LossAfterResumedAt = 10
	WorkerSkipEvery    = 2000
	CatchUpSkipEvery   = 100
	// PresenceLostDiffEvery: one remote presence change in this many.
	PresenceLostDiffEvery = 20
)

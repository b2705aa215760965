package session

import (
	"time"

	"github.com/echopubsub/echopubsub/internal/core"
)

// # Stalled sessions
//
// A session whose owner holds deliveries (pending > 0) and acknowledges
// none of them for Limits.StallAfter is stalled: the engine counts it
// (Stalled), logs the transition and sends its owner one notice built by
// the StallNotice set with SetStallNotice; the owner's next ack ends the
// stall with one more notice and log line. Nothing else changes: the
// delivery rules (pacing, SoftQueue, HardQueue) go on as before. A stall
// is a report, not an action.
//
// The clock is the one pacing uses for "acknowledged nothing" (acks, see
// pace.go), measured from a timestamp instead of a mark: quiet is the time
// of the last ack, or of the delivery that made pending non-zero,
// whichever is later. One timer per session (watch, made at its first
// durable delivery and reset, never reallocated) checks it when it runs
// out and re-arms for what is left, so an ack costs one clock read and no
// timer operation. For a Handoff session only deliveries already handed on
// to the consumer count (heldOn): what waits in the owner's own queue is
// the server's time, not the consumer's, so the clock starts when the
// consumer is handed its first unacknowledged delivery.

// StallNotice builds the notice a session's owner gets at a stall
// transition: stalled true when s just stalled, false when an ack ended
// it. pending is the session's pending count, quiet how long it went
// without an ack. It runs under s's lock and must not call into the
// engine.
type StallNotice func(s *Session, stalled bool, pending int, quiet time.Duration) interface{}

// SetStallNotice sets how stall notices are built. Call it before the first
// session opens; without one (or with Limits.StallAfter 0) stalls are not
// watched.
func (e *Engine) SetStallNotice(n StallNotice) { e.stallNotice = n }

// Stalled is the number of this engine's sessions that are stalled now.
func (e *Engine) Stalled() int64 { return e.stalledN.Load() }

// Stats is one session's view (SessionStats).
type Stats struct {
	Pending int
	// Stalled: pending and no ack for StallAfter (a notice was sent).
	Stalled bool
	// Quiet is how long the session has held deliveries without an ack; 0
	// when it holds none.
	Quiet time.Duration
	// Waiting: a durable delivery (live, or a catch-up row) waits for acks
	// to make room (Limits.SoftQueue reached; see Pace).
	Waiting bool
}

// Stats returns session id's stats, or ErrUnknownSession.
func (e *Engine) Stats(id string) (Stats, error) {
	s, err := e.openLocked(id)
	if err != nil {
		return Stats{}, err
	}
	defer s.mu.Unlock()
	st := Stats{Pending: len(s.res), Stalled: s.idle, Waiting: s.waiting || s.roomWanted}
	if len(s.res) > 0 {
		st.Quiet = time.Duration(core.Monotonic() - s.quiet)
	}
	return st, nil
}

// watchDelivery runs before a durable delivery reserves: the first pending
// delivery starts the quiet clock, and the watch if it is not running.
// Caller holds s.mu.
func (e *Engine) watchDelivery(s *Session) {
	if e.stallNotice == nil || e.lim.StallAfter <= 0 || len(s.res) > 0 || s.handoff {
		return
	}
	s.quiet = core.Monotonic()
	e.arm(s, e.lim.StallAfter)
}

// watchHanded runs when a Handoff session's owner reports deliveries up to
// deliveryID handed on (s.handed is still the previous report): those
// still pending now wait for the consumer, and the first of them starts
// its clock. Caller holds s.mu.
func (e *Engine) watchHanded(s *Session, deliveryID uint64) {
	if e.stallNotice == nil || e.lim.StallAfter <= 0 {
		return
	}
	before := s.heldOn
	for id := s.handed + 1; id <= deliveryID; id++ {
		if _, ok := s.res[id]; ok {
			s.heldOn++
		}
	}
	if before == 0 && s.heldOn > 0 {
		s.quiet = core.Monotonic()
		e.arm(s, e.lim.StallAfter)
	}
}

// holds reports whether s's consumer holds deliveries to ack: pending ones,
// for a Handoff session pending ones it was handed. Caller holds s.mu.
func (s *Session) holds() bool {
	if s.handoff {
		return s.heldOn > 0
	}
	return len(s.res) > 0
}

// watchAck runs on every ack (of deliveryID, already released): it
// restarts the quiet clock and ends a stall. Caller holds s.mu.
func (e *Engine) watchAck(s *Session, deliveryID uint64) {
	if e.stallNotice == nil || e.lim.StallAfter <= 0 {
		return
	}
	if s.handoff && deliveryID <= s.handed {
		s.heldOn--
	}
	now := core.Monotonic()
	quiet := time.Duration(now - s.quiet)
	s.quiet = now
	if s.idle {
		e.transition(s, false, quiet)
		if s.holds() {
			e.arm(s, e.lim.StallAfter)
		}
	}
}

// arm starts s's watch to check in d, unless it runs already. Caller holds
// s.mu.
func (e *Engine) arm(s *Session, d time.Duration) {
	if s.watching {
		return
	}
	s.watching = true
	if s.watch == nil {
		s.watch = time.AfterFunc(d, func() { e.check(s) })
		return
	}
	s.watch.Reset(d)
}

// check is the watch running out: s stalled if its consumer held
// deliveries and acked none for StallAfter; otherwise it checks again when
// that could first be so (or, when it holds none, once it is given one).
func (e *Engine) check(s *Session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watching = false
	if !s.open || s.idle || !s.holds() {
		return
	}
	now := core.Monotonic()
	if left := time.Duration(s.quiet + int64(e.lim.StallAfter) - now); left > 0 {
		e.arm(s, left)
		return
	}
	e.transition(s, true, time.Duration(now-s.quiet))
}

// transition records, counts, logs and notifies one stall transition.
// Caller holds s.mu.
func (e *Engine) transition(s *Session, stalled bool, quiet time.Duration) {
	s.idle = stalled
	ev := e.log.Info()
	msg := "session resumed: its owner acknowledged again"
	if stalled {
		e.stalledN.Add(1)
		ev, msg = e.log.Warn(), "session stalled: deliveries pending and no ack for StallAfter"
	} else {
		e.stalledN.Add(-1)
	}
	ev.Str("session", s.id).Str("owner", s.owner.String()).Int("pending", len(s.res)).
		Dur("quiet_ms", quiet).Dur("stall_after_ms", e.lim.StallAfter).Msg(msg)
	e.out.Send(s.owner, e.stallNotice(s, stalled, len(s.res), quiet))
}

// unwatch stops s's watch when it closes; a stalled session leaves the
// count (its owner is told SessionClosed, not resumed). Caller holds s.mu.
func (e *Engine) unwatch(s *Session) {
	if s.watch != nil {
		s.watch.Stop()
	}
	s.watching = false
	if s.idle {
		s.idle = false
		e.stalledN.Add(-1)
	}
}

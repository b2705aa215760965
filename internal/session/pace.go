package session

import (
	"time"
)

// Held is the Outcome of Pace for a delivery that must wait for room:
// nothing was reserved or sent; Pace it again after Pacer.Room.
const Held Outcome = NotOpen + 1

// Pacer is how the engine lets a session's actor wait for room (SetPacer).
// Both run under the session's lock, so a Room never overtakes the Hold it
// ends; they must not call back into the engine.
type Pacer interface {
	// Hold: a delivery of s is held (Pace returned Held): s's actor
	// handles no further delivery until Room. Called on every Held, so it
	// must be idempotent.
	Hold(s *Session)
	// Room: s has room again, its owner stalled (Limits.Wait passed), or
	// s closed: its actor may go on.
	Room(s *Session)
}

// SetPacer sets how sessions wait for room. Call it before the first
// session opens; without one (or with Limits.Wait 0) Pace is Deliver.
func (e *Engine) SetPacer(p Pacer) { e.pacer = p }

// Pace is Deliver for a live delivery that may wait for room (see Pacing):
// a durable delivery of a session whose pending count is at SoftQueue or
// above is held (Held), unless its owner stalled. Ephemeral deliveries,
// which reserve nothing, are never held.
func (e *Engine) Pace(s *Session, durable bool, build func(deliveryID uint64) interface{}) Outcome {
	return e.deliver(s, durable, e.pacer != nil && e.lim.Wait > 0, build)
}

// hold reports whether a durable delivery of open session s must wait for
// room, and if so makes it wait. Caller holds s.mu.
func (e *Engine) hold(s *Session) bool {
	if s.stalled || len(s.res) < e.lim.SoftQueue {
		return false
	}
	e.wait(s)
	return true
}

// wait makes s's actor wait for room, with the stall timer running. Caller
// holds s.mu.
func (e *Engine) wait(s *Session) {
	if !s.waiting {
		s.waiting = true
		s.wait = time.AfterFunc(e.lim.Wait, func() { e.stall(s) })
	}
	e.pacer.Hold(s) // again on every Held: a restarted actor's mailbox was resumed
}

// stall ends a wait that Limits.Wait outlasted with no ack: the owner is not
// keeping up, and its deliveries go on under Deliver's rules until it acks.
func (e *Engine) stall(s *Session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.waiting || !s.open {
		return
	}
	s.waiting, s.stalled = false, true
	e.log.Warn().Str("owner", s.owner.String()).Int("pending", len(s.res)).Dur("wait_ms", e.lim.Wait).
		Msg("session owner acknowledged nothing while deliveries waited for room: delivering on, HardQueue applies")
	e.pacer.Room(s)
}

// acked runs on every release of a reservation (an ack): the owner keeps
// up, and a held delivery (or a catch-up row that was NoRoom) goes on once
// pending is down to SoftQueue/2. Caller holds s.mu.
func (e *Engine) acked(s *Session) {
	s.stalled = false
	if (s.waiting || s.roomWanted) && len(s.res) <= e.lim.SoftQueue/2 {
		e.endWait(s)
	}
}

// endWait tells the actor of a session that waits for room (held, or
// NoRoom) to go on. Caller holds s.mu.
func (e *Engine) endWait(s *Session) {
	if s.waiting {
		s.waiting = false
		s.wait.Stop()
	}
	s.roomWanted = false
	e.pacer.Room(s)
}

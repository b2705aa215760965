package session

import (
	"fmt"
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

// wait makes s's actor wait for room, with its clock started. Caller holds
// s.mu.
func (e *Engine) wait(s *Session) {
	if !s.waiting {
		s.waiting = true
		e.startClock(s)
	}
	e.pacer.Hold(s) // again on every Held: a restarted actor's mailbox was resumed
}

// startClock (re)starts the clock of waiting session s: Limits.Wait from
// now with no ack stalls it. For a session whose owner hands its
// deliveries on (Handoff) the clock stays stopped while a delivery it was
// given is not yet handed on: that time is spent in the owner's own
// queue, not by the consumer who acks; Handed starts it once everything
// was. Caller holds s.mu.
func (e *Engine) startClock(s *Session) {
	e.stopClock(s)
	if s.handoff && s.handed+1 < s.next {
		return // stopped until Handed
	}
	s.ackMark = s.acks
	gen := s.clock
	s.wait = time.AfterFunc(e.lim.Wait, func() { e.stall(s, gen) })
}

// stopClock stops s's clock; a timer of the clock that already fired is
// ignored (its generation is old). Caller holds s.mu.
func (e *Engine) stopClock(s *Session) {
	s.clock++
	if s.wait != nil {
		s.wait.Stop()
		s.wait = nil
	}
}

// stall ends a wait that Limits.Wait outlasted with no ack: the owner is not
// keeping up, and its deliveries go on under Deliver's rules until it acks.
// An ack since the clock started restarts it instead: the clock measures
// Wait with no ack, not Wait until there is room.
func (e *Engine) stall(s *Session, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.waiting || !s.open || gen != s.clock {
		return
	}
	if s.acks != s.ackMark {
		e.startClock(s)
		return
	}
	s.wait = nil
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
	s.acks++
	if (s.waiting || s.roomWanted) && len(s.res) <= e.lim.SoftQueue/2 {
		e.endWait(s)
	}
}

// endWait tells the actor of a session that waits for room (held, or
// NoRoom) to go on. Caller holds s.mu.
func (e *Engine) endWait(s *Session) {
	if s.waiting {
		s.waiting = false
		e.stopClock(s)
	}
	s.roomWanted = false
	e.pacer.Room(s)
}

// Handoff marks s as a session whose owner hands its deliveries on to the
// consumer that acks them (a socket's writer) and reports each with
// Handed: its clock (see Pacing) then counts only time after a delivery
// was handed on. Call it right after Open, before the first delivery.
func (e *Engine) Handoff(s *Session) {
	s.mu.Lock()
	s.handoff = true
	s.mu.Unlock()
}

// Handed records that session id's owner handed its deliveries up to
// deliveryID on to their consumer (ids only grow: an older report changes
// nothing). A delivery id the session never issued is ErrUnknownDelivery.
func (e *Engine) Handed(id string, deliveryID uint64) error {
	s, err := e.openLocked(id)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	if deliveryID == 0 || deliveryID >= s.next {
		return fmt.Errorf("%w: %d was never issued (next is %d)", ErrUnknownDelivery, deliveryID, s.next)
	}
	if deliveryID <= s.handed {
		return nil
	}
	stopped := s.waiting && s.wait == nil
	e.watchHanded(s, deliveryID)
	s.handed = deliveryID
	if stopped && s.handed+1 >= s.next {
		e.startClock(s)
	}
	return nil
}

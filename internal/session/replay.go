package session

// Offer hands one replayed durable delivery to s's owner when the session's
// pressure rules let it in without raising pressure: the session's pending
// count stays at or below SoftQueue, and the node-wide table has room.
// Otherwise nothing is sent and it returns Refused (for a full table the
// session is told RESERVATIONS_FULL once, as for a live delivery). Replay
// is asked for by the consumer: it never takes a session above SoftQueue,
// so it can neither close a session (HardQueue) nor leave live deliveries
// without their headroom. build runs under the session's lock, as in
// Deliver.
func (e *Engine) Offer(s *Session, build func(deliveryID uint64) interface{}) Outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.open {
		return NotOpen
	}
	if len(s.res)+1 > e.lim.SoftQueue {
		return Refused
	}
	id, ok := e.reserve(s)
	if !ok {
		return Refused
	}
	e.out.Send(s.owner, build(id))
	return Delivered
}

// NoRoom is the Outcome of Catch for a row that would take the session
// above SoftQueue when deliveries are not held (Limits.Wait 0): nothing was
// reserved or sent, the rows wait in the store, and the engine calls
// Pacer.Room once acks bring pending down to SoftQueue/2 (or the session
// closes): offer the row again then. A catch-up so goes at its owner's
// pace, with no timer to guess it.
const NoRoom Outcome = Held + 1

// Catch hands one catch-up row (a WithFrom subscription reading the store)
// to s's owner, paced much as a live durable delivery is (Pace): at
// SoftQueue it is Held until acks make room. An owner that acks nothing
// for Limits.Wait (one that acks in groups larger than what it was given)
// gets one more row per Wait, never up to HardQueue: a catch-up never
// closes a session, its rows wait in the store. Unlike Pace, with
// Limits.Wait 0 a row that would take pending above SoftQueue is not
// counted against HardQueue: it is NoRoom (Refused without a pacer), the
// row waits in the store and the caller offers it again on Pacer.Room. A
// full reservation table is Refused (the session was told, as for a live
// delivery): room there is made by other sessions' acks, which do not call
// this session's Room.
func (e *Engine) Catch(s *Session, build func(deliveryID uint64) interface{}) Outcome {
	s.mu.Lock()
	if !s.open {
		s.mu.Unlock()
		return NotOpen
	}
	if len(s.res)+1 > e.lim.SoftQueue {
		if e.pacer == nil {
			s.mu.Unlock()
			return Refused
		}
		if e.lim.Wait <= 0 {
			s.roomWanted = true
			s.mu.Unlock()
			return NoRoom
		}
		stalled := s.stalled
		s.stalled = false // one row per stall: the next waits again
		if !stalled || len(s.res)+1 >= e.lim.HardQueue {
			e.wait(s)
			s.mu.Unlock()
			return Held
		}
	}
	s.mu.Unlock()
	return e.deliver(s, true, false, build)
}

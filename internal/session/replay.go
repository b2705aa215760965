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

// Catch hands one catch-up row (a WithFrom subscription reading the store)
// to s's owner, paced much as a live durable delivery is (Pace): at
// SoftQueue it is Held until acks make room. An owner that acks nothing
// for Limits.Wait (one that acks in groups larger than what it was given)
// gets one more row per Wait, never up to HardQueue: a catch-up never
// closes a session, its rows wait in the store. Unlike Pace, without pacing (no pacer, or Limits.Wait 0) a row that
// would take pending above SoftQueue is Refused instead of counting
// against HardQueue: the rows wait in the store, and the caller offers the
// row again later. A full reservation table is Refused too (the session
// was told, as for a live delivery).
func (e *Engine) Catch(s *Session, build func(deliveryID uint64) interface{}) Outcome {
	s.mu.Lock()
	if !s.open {
		s.mu.Unlock()
		return NotOpen
	}
	if len(s.res)+1 > e.lim.SoftQueue {
		if e.pacer == nil || e.lim.Wait <= 0 {
			s.mu.Unlock()
			return Refused
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

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
// to s's owner under Offer's rule, never above SoftQueue, and waits for
// room where Offer refuses: a row that would take pending above SoftQueue
// is Held (nothing sent; the pacer's Room comes once acks bring pending
// down to SoftQueue/2 or the session closes, and Catch is called again
// with the same row). The owner never stalls a catch-up into delivering
// on: the rows wait in the store, not in memory. A full reservation table
// is Refused (the session was told, as for a live delivery): offer the row
// again later. Without a pacer, a row at SoftQueue is Refused as well.
func (e *Engine) Catch(s *Session, build func(deliveryID uint64) interface{}) Outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.open {
		return NotOpen
	}
	if len(s.res)+1 > e.lim.SoftQueue {
		if e.pacer == nil {
			return Refused
		}
		if !s.waiting { // without the stall timer: a catch-up waits for acks
			s.waiting, s.wait = true, nil
		}
		e.pacer.Hold(s)
		return Held
	}
	id, ok := e.reserve(s)
	if !ok {
		return Refused
	}
	e.out.Send(s.owner, build(id))
	return Delivered
}

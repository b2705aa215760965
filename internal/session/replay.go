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

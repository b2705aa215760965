package echopubsub

import (
	"time"

	"github.com/echopubsub/echopubsub/internal/session"
)

// SessionStalled tells a session's owner that the session holds
// deliveries (Pending of them) and none was acknowledged for Quiet, at
// least SessionConfig.StallAfter: the consumer behind the owner stopped
// acking, or is stuck on one message. It is a report, not an action:
// deliveries go on under the usual rules (SoftQueue's notice, HardQueue's
// SlowConsumerAction). One is sent per transition, in order with the
// session's envelopes; the owner's next ack ends the stall with one
// SessionResumed. SessionStats says the same; the gauge
// echopubsub.session.stalled counts the node's stalled sessions.
type SessionStalled struct {
	SessionID string
	Pending   int
	Quiet     time.Duration
	Node      string
}

// SessionResumed tells a session's owner that an ack ended its stall
// (after a SessionStalled): Pending is the count after that ack, Quiet how
// long the session went without one.
type SessionResumed struct {
	SessionID string
	Pending   int
	Quiet     time.Duration
	Node      string
}

// SessionStats is one session's state (PubSub.SessionStats).
type SessionStats struct {
	// Pending is the session's count of delivered, unacknowledged durable
	// deliveries (as Pending).
	Pending int
	// Stalled: the session holds deliveries and acknowledged none for
	// SessionConfig.StallAfter (its owner was told SessionStalled, and not
	// yet SessionResumed).
	Stalled bool
	// Quiet is how long the session has held deliveries without an ack (0
	// when it holds none).
	Quiet time.Duration
	// Waiting: a durable delivery, live or a WithFrom catch-up's row, waits
	// for room: Pending reached SessionConfig.SoftQueue, and it goes once
	// acks bring Pending down to SoftQueue/2 (or after RoomWait with no
	// ack: see RoomWait).
	Waiting bool
}

// SessionStats returns the state of session id, a session of this node;
// ErrUnknownSession when it is not open.
func (ps *PubSub) SessionStats(id string) (SessionStats, error) {
	st, err := ps.sess.engine.Stats(id)
	if err != nil {
		return SessionStats{}, err
	}
	return SessionStats{Pending: st.Pending, Stalled: st.Stalled, Quiet: st.Quiet, Waiting: st.Waiting}, nil
}

// stallNotice builds the session engine's stall notices.
func stallNotice(node string) session.StallNotice {
	return func(s *session.Session, stalled bool, pending int, quiet time.Duration) interface{} {
		if stalled {
			return &SessionStalled{SessionID: s.ID(), Pending: pending, Quiet: quiet, Node: node}
		}
		return &SessionResumed{SessionID: s.ID(), Pending: pending, Quiet: quiet, Node: node}
	}
}

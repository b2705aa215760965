package echopubsub

import (
	"errors"
	"fmt"
	"time"

	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/store"
)

// SlowConsumerAction is what happens to a session whose pending count
// would exceed SessionConfig.HardQueue.
type SlowConsumerAction int

const (
	// SlowConsumerDisconnect closes the session: the owner gets a
	// *messages.SessionClosed, its reservations are released and later
	// calls with its id fail with ErrUnknownSession.
	SlowConsumerDisconnect SlowConsumerAction = iota
	// SlowConsumerExitOwner does what SlowConsumerDisconnect does, then stops the owner actor: it
	// is sent a PoisonPill, so it handles what its mailbox already holds,
	// the SessionClosed notice last, and stops.
	SlowConsumerExitOwner
)

func (a SlowConsumerAction) String() string {
	switch a {
	case SlowConsumerDisconnect:
		return "Disconnect"
	case SlowConsumerExitOwner:
		return "ExitOwner"
	}
	return fmt.Sprintf("SlowConsumerAction(%d)", int(a))
}

// The three MaxDeliveryReservations profiles of the original (Wiregrid).
const (
	ReservationsSmall    = 100_000
	ReservationsBalanced = 2_000_000
	ReservationsLarge    = 20_000_000
)

// ErrSoftQueueNotBelowHardQueue: SoftQueue must be strictly below
// HardQueue. Validate wraps it with both values.
var ErrSoftQueueNotBelowHardQueue = errors.New("echopubsub: config SoftQueue must be below HardQueue")

// SessionConfig holds the settings of acknowledged sessions (OpenSession).
// It is embedded in Config, so its fields read as Config's own.
type SessionConfig struct {
	// SoftQueue: when a session's pending (delivered, not acknowledged)
	// count rises above it, the owner gets one *messages.SessionPressure
	// notice, and one more when it is back at or below. Must be > 0 and
	// below HardQueue. Defaults to 500.
	SoftQueue int
	// HardQueue is the most deliveries a session may hold unacknowledged:
	// a durable delivery that would exceed it is rolled back and
	// SlowConsumerAction applies. Defaults to 2000.
	HardQueue int
	// SlowConsumerAction: SlowConsumerDisconnect (the default) or
	// SlowConsumerExitOwner.
	SlowConsumerAction SlowConsumerAction
	// MaxDeliveryReservations bounds the reservations held by every
	// session of this pubsub on this node together. A full table refuses a
	// durable delivery before it reaches the owner's mailbox, and the
	// session is told (SessionPressure RESERVATIONS_FULL, once per
	// transition). Profiles: ReservationsSmall, ReservationsBalanced,
	// ReservationsLarge. Defaults to ReservationsBalanced (2,000,000).
	MaxDeliveryReservations int
	// MaxBatchItems bounds the ids one AckMany call accepts. Defaults to
	// 1000.
	MaxBatchItems int
	// RoomWait: a session is handed its live durable deliveries while its
	// pending count is below SoftQueue; at SoftQueue the next one waits for
	// acks to make room (down to SoftQueue/2), so that a backlog (a node's
	// catch-up after a cut) reaches an owner that acks at once as fast as
	// it acks, and never closes it at HardQueue. What waits stays in the
	// session's queue, under MaxQueueLen like any subscriber's. An owner
	// that acknowledges nothing for RoomWait while a delivery waits is not
	// keeping up: its deliveries go on without waiting until its next ack,
	// and SoftQueue's notice and HardQueue apply; an ack restarts the
	// clock. For a session opened WithHandoff the clock runs only while
	// every envelope the session issued was handed on to the consumer
	// (PubSub.Handed). 0 never waits (a backlog counts against HardQueue
	// as it arrives; a WithFrom catch-up, whose rows can wait in the
	// store, still stops at SoftQueue and goes on when acks make room).
	// Must be >= 0. Defaults to 1s.
	RoomWait time.Duration
	// StallAfter: a session that holds deliveries (pending > 0) and
	// acknowledges none of them for StallAfter is stalled: its owner gets
	// one *SessionStalled notice, SessionStats says Stalled, the gauge
	// echopubsub.session.stalled counts it and one line is logged; its
	// next ack ends the stall with one *SessionResumed. The clock runs from
	// the last ack, or from the delivery that made pending non-zero; for a
	// session opened WithHandoff, only while every envelope it was given
	// was handed on (as RoomWait's). Nothing is delivered differently.
	// Must be > 0. Defaults to 30s.
	StallAfter time.Duration
	// ConsumerMetrics lists the named consumers (WithConsumer) that get
	// series of their own in the consumer metrics
	// (echopubsub.consumer.commits, echopubsub.consumer.unacked, attribute
	// "consumer"); every other name shares the series of consumer
	// "_other", so the metrics' cardinality stays bounded however many
	// names clients make up. Each must be a valid consumer name
	// (store.CheckConsumerName) other than "_other". Defaults to none.
	ConsumerMetrics []string
}

// DefaultSessionConfig returns the session defaults of the original.
func DefaultSessionConfig() SessionConfig {
	return SessionConfig{SoftQueue: 500, HardQueue: 2000, SlowConsumerAction: SlowConsumerDisconnect,
		MaxDeliveryReservations: ReservationsBalanced, MaxBatchItems: 1000, RoomWait: time.Second,
		StallAfter: 30 * time.Second}
}

// validate names the first invalid field and its value.
func (c SessionConfig) validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"SoftQueue", c.SoftQueue}, {"HardQueue", c.HardQueue},
		{"MaxDeliveryReservations", c.MaxDeliveryReservations}, {"MaxBatchItems", c.MaxBatchItems}} {
		if f.v <= 0 {
			return fmt.Errorf("echopubsub: config %s must be > 0, got %d", f.name, f.v)
		}
	}
	if c.RoomWait < 0 {
		return fmt.Errorf("echopubsub: config RoomWait must be >= 0, got %v", c.RoomWait)
	}
	if c.StallAfter <= 0 {
		return fmt.Errorf("echopubsub: config StallAfter must be > 0, got %v", c.StallAfter)
	}
	for i, n := range c.ConsumerMetrics {
		if err := store.CheckConsumerName(n); err != nil || n == core.ConsumerOther {
			return fmt.Errorf("echopubsub: config ConsumerMetrics[%d] must be a consumer name other than %q, got %q", i, core.ConsumerOther, n)
		}
	}
	if c.SoftQueue >= c.HardQueue {
		return fmt.Errorf("%w: SoftQueue is %d, HardQueue is %d", ErrSoftQueueNotBelowHardQueue, c.SoftQueue, c.HardQueue)
	}
	if c.HardQueue > c.MaxDeliveryReservations {
		return fmt.Errorf("echopubsub: config HardQueue must be <= MaxDeliveryReservations, got HardQueue %d, MaxDeliveryReservations %d", c.HardQueue, c.MaxDeliveryReservations)
	}
	if c.SlowConsumerAction != SlowConsumerDisconnect && c.SlowConsumerAction != SlowConsumerExitOwner {
		return fmt.Errorf("echopubsub: config SlowConsumerAction must be SlowConsumerDisconnect or SlowConsumerExitOwner, got %v", c.SlowConsumerAction)
	}
	return nil
}

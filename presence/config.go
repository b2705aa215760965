package presence

import (
	"fmt"
	"time"
	"unicode/utf8"
)

// Config configures a Tracker. Start from DefaultConfig; New validates every
// field and names the one that is wrong.
type Config struct {
	// Topic is the pubsub topic the trackers of one presence instance
	// publish their changes on (every node's tracker must use the same).
	// Defaults to "presence". It takes no user broadcasts: subscribe to it
	// only through a Tracker.
	Topic string
	// DownAfter is the deadline for a node that disappears (kill -9, a
	// partition, a frozen process): a replica that heard nothing from a node
	// for DownAfter removes its presences and tells its subscribers. It must
	// be at least twice HeartbeatInterval. Defaults to 10s.
	DownAfter time.Duration
	// HeartbeatInterval is how often a tracker says it is alive on Topic
	// (at least 10ms). Defaults to 2s.
	HeartbeatInterval time.Duration
	// SyncRetry is how long a replica waits for a node's state after asking
	// for it before it asks again (at least 10ms). A replica that has waited
	// DownAfter drops the node's presences (with a Diff) rather than list
	// what it cannot vouch for, and goes on asking. Defaults to 5s.
	SyncRetry time.Duration
	// SnapshotPart is at most how many presences one part of a node's state
	// carries when a replica asks for it; a part is also cut at a quarter of
	// the pubsub's MaxBatchBytes. Defaults to 1000.
	SnapshotPart int
	// CallTimeout bounds Track, Untrack, Update, Subscribe and Stop's wait
	// for the tracker. Defaults to 5s.
	CallTimeout time.Duration
}

// DefaultConfig is the configuration with every default: Topic "presence",
// DownAfter 10s, HeartbeatInterval 2s, SyncRetry 5s, SnapshotPart 1000,
// CallTimeout 5s.
func DefaultConfig() Config {
	return Config{
		Topic:             "presence",
		DownAfter:         10 * time.Second,
		HeartbeatInterval: 2 * time.Second,
		SyncRetry:         5 * time.Second,
		SnapshotPart:      1000,
		CallTimeout:       5 * time.Second,
	}
}

// Validate reports the first field that is out of range, naming it and its
// value (wrapping ErrInvalidConfig).
func (c Config) Validate() error {
	switch {
	case c.Topic == "" || !utf8.ValidString(c.Topic):
		return fmt.Errorf("%w: Topic must be a non-empty UTF-8 string, got %q", ErrInvalidConfig, c.Topic)
	case c.HeartbeatInterval < 10*time.Millisecond:
		return fmt.Errorf("%w: HeartbeatInterval must be >= 10ms, got %v", ErrInvalidConfig, c.HeartbeatInterval)
	case c.DownAfter < 2*c.HeartbeatInterval:
		return fmt.Errorf("%w: DownAfter must be >= 2 * HeartbeatInterval (%v), got %v", ErrInvalidConfig, c.HeartbeatInterval, c.DownAfter)
	case c.SyncRetry < 10*time.Millisecond:
		return fmt.Errorf("%w: SyncRetry must be >= 10ms, got %v", ErrInvalidConfig, c.SyncRetry)
	case c.SnapshotPart <= 0:
		return fmt.Errorf("%w: SnapshotPart must be > 0, got %d", ErrInvalidConfig, c.SnapshotPart)
	case c.CallTimeout <= 0:
		return fmt.Errorf("%w: CallTimeout must be > 0, got %v", ErrInvalidConfig, c.CallTimeout)
	}
	return nil
}

// tick is how often the tracker checks its timers: a tenth of the shortest
// one, so that a deadline is kept to within a tick.
func (c Config) tick() time.Duration {
	t := c.HeartbeatInterval
	if c.SyncRetry < t {
		t = c.SyncRetry
	}
	return t / 10
}

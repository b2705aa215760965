package echopubsub

// WithRetention makes the pubsub trim its durable streams to r: a
// goroutine of the pubsub, started by Start and ended by Stop, asks the
// store (which must implement Trimmer) to trim every stream at Start and
// then every Config.RetentionInterval. Requires WithStore. With a shared
// store (PostgreSQL) every node trims the same streams: give every node
// the same Retention. Defaults to the zero Retention (keep everything).
// Which rows go is the one rule of package store (Retention.Cut); the
// goroutine is internal/durable's TrimLoop.
func WithRetention(r Retention) Option { return func(o *options) { o.retention = r } }

// StreamTruncated tells a session that rows of Stream it asked for (from
// From, in ReplaySession or a WithFrom catch-up) are no longer kept: the
// store removed everything below FirstKept under its Retention. The rows
// from FirstKept follow. As for CursorExpired, reload what the forgotten
// rows carried from a source of truth.
type StreamTruncated struct {
	SessionID string
	Stream    string
	From      uint64
	FirstKept uint64
}

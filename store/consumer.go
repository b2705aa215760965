package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// ConsumerStore is what a Store adds to keep named consumers' committed
// cursors (echopubsub.WithConsumer): per stream, per consumer name, the
// last cursor the consumer committed (every row at or below it was
// acknowledged, or was a gap row or no longer kept when it got there). It
// is an interface of its own, like Trimmer, so a Store written for an
// earlier release still compiles; SessionSubscribe refuses WithConsumer
// with a store that lacks it, naming the store's type. store/bolt,
// store/seglog, store/postgres and test.MemStore implement it.
//
// The rules every implementation follows (store/storetest checks them):
//
//   - A consumer's cursor survives Close and a reopen (as the rows do);
//     CommitConsumer is durable when it returns nil.
//   - CommitConsumer sets the cursor as given (the pubsub only moves it
//     forward), creating the consumer if it is new; the stream need not
//     have a row yet.
//   - A Store that is also a Trimmer holds its consumers' rows: Trim
//     removes, per stream, no row above the lowest cursor of the stream's
//     consumers, except what Retention.MaxBytes (a hard cap) removes
//     (Retention.CutHeld, with Held of the stream's consumers).
//   - DeleteConsumer of a consumer that does not exist does nothing.
type ConsumerStore interface {
	// CommitConsumer records name's committed cursor in stream (and the
	// store's clock as its Time).
	CommitConsumer(ctx context.Context, stream, name string, cursor uint64) error
	// Consumers lists stream's consumers, by name, and the stream's end
	// (its last cursor handed out; 0: none yet).
	Consumers(ctx context.Context, stream string) (cs []Consumer, end uint64, err error)
	// DeleteConsumer forgets name in stream: it no longer holds rows.
	DeleteConsumer(ctx context.Context, stream, name string) error
}

// Consumer is one named consumer of a stream, as its store keeps it.
type Consumer struct {
	Name string
	// Cursor is the last committed cursor: the consumer resumes after it.
	Cursor uint64
	// Time is when Cursor was committed (the store's clock, UTC, to the
	// microsecond: storekit.Stamp).
	Time time.Time
}

// MaxConsumerName is the longest consumer name, in bytes.
const MaxConsumerName = 128

// ErrBadConsumerName: a consumer name must be 1 to MaxConsumerName bytes
// of [A-Za-z0-9._-]. CheckConsumerName wraps it with the name.
var ErrBadConsumerName = errors.New("echopubsub: bad consumer name")

// CheckConsumerName is the one rule for consumer names: 1 to
// MaxConsumerName bytes, each one of [A-Za-z0-9._-] (a name travels in
// metric attributes, log lines, gateway frames and SQL keys as it is).
func CheckConsumerName(name string) error {
	if name == "" || len(name) > MaxConsumerName {
		return fmt.Errorf("%w: %q is %d bytes, want 1 to %d", ErrBadConsumerName, name, len(name), MaxConsumerName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %q has %q at byte %d; use [A-Za-z0-9._-]", ErrBadConsumerName, name, c, i)
		}
	}
	return nil
}

// NoHold is Held of a stream without consumers: nothing is held.
const NoHold = math.MaxUint64

// Held is the cursor a stream's consumers hold retention at: the lowest
// committed cursor (NoHold: no consumer). Rows above it are kept, except
// what MaxBytes removes (Retention.CutHeld).
func Held(cs []Consumer) uint64 {
	held := uint64(NoHold)
	for _, c := range cs {
		held = min(held, c.Cursor)
	}
	return held
}

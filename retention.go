package echopubsub

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub/internal/core"
)

// Retention bounds what the store keeps of each durable stream. A zero
// field is no limit; the zero Retention keeps everything (the default).
// The oldest rows go first, and a stream's cursors are never reused: a
// replay or a catch-up (WithFrom) from a cursor below what is kept gets a
// *StreamTruncated first, then the rows from its FirstKept.
type Retention struct {
	// MaxAge drops rows appended longer ago than this.
	MaxAge time.Duration
	// MaxRows keeps at most this many rows per stream.
	MaxRows uint64
	// MaxBytes keeps at most this many payload bytes per stream.
	MaxBytes uint64
}

// validate reports a negative MaxAge.
func (r Retention) validate() error {
	if r.MaxAge < 0 {
		return fmt.Errorf("echopubsub: Retention.MaxAge must be >= 0, got %s", r.MaxAge)
	}
	return nil
}

// String names the limits set ("MaxAge 1h0m0s, MaxRows 1000"; "none").
func (r Retention) String() string {
	var parts []string
	if r.MaxAge != 0 {
		parts = append(parts, fmt.Sprintf("MaxAge %s", r.MaxAge))
	}
	if r.MaxRows != 0 {
		parts = append(parts, fmt.Sprintf("MaxRows %d", r.MaxRows))
	}
	if r.MaxBytes != 0 {
		parts = append(parts, fmt.Sprintf("MaxBytes %d", r.MaxBytes))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// WithRetention makes the pubsub trim its durable streams to r: a
// goroutine of the pubsub, started by Start and ended by Stop, asks the
// store (which must implement Trimmer) to trim every stream at Start and
// then every Config.RetentionInterval. Requires WithStore. With a shared
// store (PostgreSQL) every node trims the same streams: give every node
// the same Retention. Defaults to the zero Retention (keep everything).
func WithRetention(r Retention) Option { return func(o *options) { o.retention = r } }

// checkRetention is the options' retention check (Start, through
// newDurability): a valid Retention, and a store that can keep it.
func checkRetention(o *options) error {
	r := o.retention
	if r == (Retention{}) {
		return nil
	}
	if err := r.validate(); err != nil {
		return err
	}
	if o.store == nil {
		return fmt.Errorf("echopubsub: WithRetention (%s) needs WithStore", r)
	}
	if _, ok := o.store.(Trimmer); !ok {
		return fmt.Errorf("echopubsub: WithRetention (%s): store %T cannot trim (it does not implement echopubsub.Trimmer)", r, o.store)
	}
	return nil
}

// trimmer is the goroutine that keeps a store to its Retention. Trims run
// one at a time, on it alone; stop cancels the one under way (the store
// stops between chunks) and waits for the goroutine to end.
type trimmer struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startTrimmer trims store to r now and then every interval, until stop
// or until the pubsub dies (dead).
func startTrimmer(store Trimmer, r Retention, interval time.Duration, dead <-chan struct{}, log zerolog.Logger, m *core.Metrics) *trimmer {
	ctx, cancel := context.WithCancel(context.Background())
	t := &trimmer{cancel: cancel, done: make(chan struct{})}
	log = log.With().Str("retention", r.String()).Logger()
	go func() {
		defer close(t.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			trimOnce(ctx, store, r, log, m)
			select {
			case <-ctx.Done():
				return
			case <-dead:
				return
			case <-tick.C:
			}
		}
	}()
	return t
}

func trimOnce(ctx context.Context, store Trimmer, r Retention, log zerolog.Logger, m *core.Metrics) {
	start := time.Now()
	got, err := store.Trim(ctx, r)
	var rows, bytes uint64
	for _, tr := range got {
		rows, bytes = rows+tr.Rows, bytes+tr.Bytes
		log.Debug().Str("stream", tr.Stream).Uint64("rows", tr.Rows).Uint64("bytes", tr.Bytes).
			Uint64("first_kept", tr.FirstKept).Msg("durable streams: retention trimmed a stream")
	}
	m.RetentionTrimmed(rows, bytes)
	if rows > 0 {
		log.Info().Int("streams", len(got)).Uint64("rows", rows).Uint64("bytes", bytes).
			Dur("took_ms", time.Since(start)).Msg("durable streams: retention trimmed")
	}
	if err != nil && ctx.Err() == nil {
		log.Warn().Err(err).Msg("durable streams: retention could not trim; next try at the next interval")
	}
}

// stop ends the goroutine and waits for it. Safe on nil; idempotent.
func (t *trimmer) stop() {
	if t != nil {
		t.cancel()
		<-t.done
	}
}

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

// truncation is the one rule that tells a read of stream from `from` began
// past it: rows (in cursor order) and next are what Store.Read returned.
// A store's cursors have no hole, so a first row above from, or no row and
// a next above from, means rows below were removed by retention.
func truncation(from uint64, rows []Record, next uint64) (firstKept uint64, truncated bool) {
	from = max(from, 1)
	if len(rows) > 0 {
		return rows[0].Cursor, rows[0].Cursor > from
	}
	return next, next > from
}

package echopubsub

import (
	"context"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub/internal/core"
)

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
	if err := r.Validate(); err != nil {
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

package durable

import (
	"context"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/store"
)

// checkRetention is the options' retention check (New): a valid
// Retention, and a store that can keep it.
func checkRetention(r store.Retention, s store.Store) error {
	if r == (store.Retention{}) {
		return nil
	}
	if err := r.Validate(); err != nil {
		return err
	}
	if s == nil {
		return fmt.Errorf("echopubsub: WithRetention (%s) needs WithStore", r)
	}
	if _, ok := s.(store.Trimmer); !ok {
		return fmt.Errorf("echopubsub: WithRetention (%s): store %T cannot trim (it does not implement echopubsub.Trimmer)", r, s)
	}
	return nil
}

// TrimLoop is the goroutine that keeps a store to its Retention. Trims run
// one at a time, on it alone; stop cancels the one under way (the store
// stops between chunks) and waits for the goroutine to end.
type TrimLoop struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// StartTrimLoop trims s to r now and then every interval, until stop
// or until the pubsub dies (dead).
func StartTrimLoop(s store.Trimmer, r store.Retention, interval time.Duration, dead <-chan struct{}, log zerolog.Logger, m *core.Metrics) *TrimLoop {
	ctx, cancel := context.WithCancel(context.Background())
	t := &TrimLoop{cancel: cancel, done: make(chan struct{})}
	log = log.With().Str("retention", r.String()).Logger()
	go func() {
		defer close(t.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			trimOnce(ctx, s, r, log, m)
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

func trimOnce(ctx context.Context, s store.Trimmer, r store.Retention, log zerolog.Logger, m *core.Metrics) {
	start := time.Now()
	got, err := s.Trim(ctx, r)
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

// Stop ends the goroutine and waits for it. Safe on nil; idempotent.
func (t *TrimLoop) Stop() {
	if t != nil {
		t.cancel()
		<-t.done
	}
}

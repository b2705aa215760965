package consul

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// availability turns per-operation failures into one log line when Consul
// becomes unavailable and one when every operation works again, however
// many attempts happen in between.
type availability struct {
	mu    sync.Mutex
	log   zerolog.Logger
	down  map[string]bool
	since time.Time
}

func (a *availability) fail(op string, err error, retryMax time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.down == nil {
		a.down = map[string]bool{}
	}
	if len(a.down) == 0 {
		a.since = time.Now()
		a.log.Warn().Err(err).Str("op", op).Dur("retry_max", retryMax).
			Msg("consul unavailable: keeping the last known members, retrying with backoff")
	}
	a.down[op] = true
}

func (a *availability) ok(op string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.down[op] {
		return
	}
	delete(a.down, op)
	if len(a.down) == 0 {
		a.log.Info().Dur("unavailable_for", time.Since(a.since).Round(time.Millisecond)).Msg("consul available again")
	}
}

// backoff is exponential between min and max, with jitter in [d/2, d].
type backoff struct{ min, max, cur time.Duration }

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	half := b.cur / 2
	return half + rand.N(b.cur-half+1)
}

func (b *backoff) reset() { b.cur = 0 }

// sleepCtx waits d, or less if ctx ends (then it returns false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

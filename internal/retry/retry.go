// Package retry is the plumbing a membership's workers share while their
// backing service (a Consul agent, a DNS server) fails: one log line when it
// becomes unavailable and one when it is back (Availability), exponential
// backoff with jitter (Backoff), and a sleep that ends with its context
// (Sleep).
package retry

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Availability turns per-operation failures into one log line when the
// service named Service becomes unavailable and one when every operation
// works again, however many attempts happen in between. Safe for concurrent
// use; set Log and Service before the first call.
type Availability struct {
	Log     zerolog.Logger
	Service string // "consul", "dns": the log lines name it

	mu    sync.Mutex
	down  map[string]bool
	since time.Time
}

// Fail records that op failed with err; retryMax is the longest wait
// between attempts (logged, so an operator knows when to expect the next).
func (a *Availability) Fail(op string, err error, retryMax time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.down == nil {
		a.down = map[string]bool{}
	}
	if len(a.down) == 0 {
		a.since = time.Now()
		a.Log.Warn().Err(err).Str("op", op).Dur("retry_max_ms", retryMax).
			Msg(a.Service + " unavailable: keeping the last known members, retrying with backoff")
	}
	a.down[op] = true
}

// OK records that op worked.
func (a *Availability) OK(op string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.down[op] {
		return
	}
	delete(a.down, op)
	if len(a.down) == 0 {
		a.Log.Info().Dur("unavailable_for_ms", time.Since(a.since).Round(time.Millisecond)).Msg(a.Service + " available again")
	}
}

// Backoff is exponential between Min and Max, with jitter in [d/2, d].
// Owned by one goroutine.
type Backoff struct{ Min, Max, cur time.Duration }

// Next is the wait before the next attempt.
func (b *Backoff) Next() time.Duration {
	if b.cur == 0 {
		b.cur = b.Min
	} else {
		b.cur = min(2*b.cur, b.Max)
	}
	half := b.cur / 2
	return half + rand.N(b.cur-half+1)
}

// Reset starts the next failure's backoff at Min again.
func (b *Backoff) Reset() { b.cur = 0 }

// Sleep waits d, or less if ctx ends (then it returns false).
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

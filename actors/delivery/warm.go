package delivery

import (
	"math"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
)

// WarmDispatcher runs mailboxes on a few goroutines that wait for work
// between runs, each keeping the stack it grew, instead of on a new
// goroutine per run. Otherwise it is DrainingDispatcher: a mailbox runs
// until it is empty.
//
// Why: protoactor's dispatcher starts a goroutine for every run of a
// mailbox, and at a few thousand messages a second nearly every message is
// a run of its own. A new goroutine starts with a small stack; the
// producer's path (take the write, deliver it here, encode the batch, hand
// it to the remote) is deeper than that, so each run copied its stack two
// or three times while it grew: 18 % of a publishing node's CPU at 10,000
// msg/s (docs/benchmarks.md, "Figures behind code comments").
//
// Schedule never blocks and never drops a run: when no parked goroutine is
// free it starts one, as protoactor's dispatcher does. The parked
// goroutines end when stop closes (the pubsub's Done); runs scheduled after
// that get goroutines of their own, so a draining Stop still runs them.
type WarmDispatcher struct {
	work chan func()
	stop <-chan struct{}
	wg   sync.WaitGroup
}

// NewWarmDispatcher starts n parked goroutines (at least one) that end
// when stop closes.
func NewWarmDispatcher(n int, stop <-chan struct{}) *WarmDispatcher {
	d := &WarmDispatcher{work: make(chan func()), stop: stop}
	n = max(n, 1)
	d.wg.Add(n)
	for range n {
		go d.park()
	}
	return d
}

func (d *WarmDispatcher) park() {
	defer d.wg.Done()
	for {
		select {
		case fn := <-d.work:
			fn()
		case <-d.stop:
			return
		}
	}
}

// Schedule runs fn on a parked goroutine, or on a new one if none waits.
func (d *WarmDispatcher) Schedule(fn func()) {
	select {
	case d.work <- fn:
	default:
		go fn()
	}
}

// Throughput is DrainingDispatcher's: a mailbox runs until it is empty.
func (d *WarmDispatcher) Throughput() int { return math.MaxInt32 }

// Wait returns once the parked goroutines have ended (after stop closed
// and the runs they held finished).
func (d *WarmDispatcher) Wait() { d.wg.Wait() }

var _ actor.Dispatcher = (*WarmDispatcher)(nil)

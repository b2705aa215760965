package delivery

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// A WarmDispatcher runs every run it is given, on its parked goroutines
// while one is free and on a goroutine of its own otherwise (a run never
// waits for another and is never dropped); its parked goroutines end when
// stop closes, and a run scheduled after that still runs.
func TestWarmDispatcherRunsEveryRunAndEnds(t *testing.T) {
	before := goleak.IgnoreCurrent()
	stop := make(chan struct{})
	d := NewWarmDispatcher(2, stop)
	var wg sync.WaitGroup
	block := make(chan struct{})
	// Three runs that block at once: two parked goroutines take two, the
	// third must not wait for them.
	for range 3 {
		wg.Add(1)
		d.Schedule(func() { defer wg.Done(); <-block })
	}
	ran := make(chan struct{})
	d.Schedule(func() { close(ran) })
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("a run waited for the busy ones")
	}
	close(block)
	wg.Wait()
	const runs = 1000
	var done sync.WaitGroup
	done.Add(runs)
	for range runs {
		d.Schedule(done.Done)
	}
	done.Wait()
	close(stop)
	d.Wait() // the parked goroutines end
	after := make(chan struct{})
	d.Schedule(func() { close(after) })
	select {
	case <-after:
	case <-time.After(5 * time.Second):
		t.Fatal("a run scheduled after stop did not run")
	}
	goleak.VerifyNone(t, before)
}

package chaos

import (
	"context"
	"fmt"
	"time"
)

// The runner both soaks share: RunSoak here and the session soak
// (test/e2e/sessionsoak) differ in their cluster, their faults and their
// verdict; which kinds run, the fault loop and the end of a run
// (SoakEnd) are the same and live here once.

// SplitKinds returns the kinds of want (nil: AllFaults) a run can inject,
// in order, and those it skips: the ones that need network namespaces,
// when netns is false.
func SplitKinds(want []string, netns bool) (kinds, skipped []string) {
	if len(want) == 0 {
		want = AllFaults
	}
	for _, k := range want {
		if needsNetns(k) && !netns {
			skipped = append(skipped, k)
			continue
		}
		kinds = append(kinds, k)
	}
	return kinds, skipped
}

// FaultLoop is a soak's fault phase.
type FaultLoop struct {
	// Name starts the log lines ("soak", "session soak").
	Name string
	// Kinds are injected in turn, round robin.
	Kinds []string
	// Messages: the loop ends once the cluster sent at least this many
	// broadcasts and every kind ran once.
	Messages int64
	// Settle is waited after each fault (the caller settles the cluster
	// before the first).
	Settle time.Duration
	// Inject injects one fault of kind, holds it and heals it; an error
	// ends the run (the soak could not run).
	Inject func(ctx context.Context, kind string) error
	// Logf, when set, gets a line per fault.
	Logf func(format string, args ...interface{})
	// Settled, when set, runs after each fault's Settle (the presence
	// soak's check); an error ends the run.
	Settled func(ctx context.Context, kind string) error
}

// Run runs the loop on c and counts each kind it injected in done.
func (f FaultLoop) Run(ctx context.Context, c *Cluster, done map[string]int) error {
	if len(f.Kinds) == 0 {
		return fmt.Errorf("%s: no fault kind to inject", f.Name)
	}
	start := time.Now()
	for n := 0; ; n++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if c.Sent() >= f.Messages && n >= len(f.Kinds) {
			return nil
		}
		kind := f.Kinds[n%len(f.Kinds)]
		if err := f.Inject(ctx, kind); err != nil {
			return fmt.Errorf("fault %s: %w", kind, err)
		}
		done[kind]++
		if f.Logf != nil {
			f.Logf("%s: %s done; %d messages sent, %d live violations so far (%.0fs)",
				f.Name, kind, c.Sent(), len(c.Violations()), time.Since(start).Seconds())
		}
		if err := Sleep(ctx, f.Settle); err != nil {
			return err
		}
		if f.Settled != nil {
			if err := f.Settled(ctx, kind); err != nil {
				return err
			}
		}
	}
}

// SoakEnd ends a soak's cluster for its verdict: it closes c (the race
// detector reports on exit, too; the records are complete then) and
// returns the data races the nodes reported and every process's record.
func SoakEnd(c *Cluster) (races int, records []RecordFile, err error) {
	c.Close()
	races = c.DataRaces()
	records, err = c.Records()
	return races, records, err
}

// Sleep waits d, or until ctx ends (its error then).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

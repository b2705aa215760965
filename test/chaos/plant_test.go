package chaos_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub/internal/plant"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/chaos"
)

// plantCase is one planted defect, the short soak that exposes it, and the
// violation the verdict must name.
type plantCase struct {
	defect string
	kinds  []string // faults injected
	slow   int      // slow subscribers per node
	buffer int      // BufferSize (0: 2000)
	// named reports whether the result names this defect's violation.
	named func(r *chaos.Result) bool
}

// subNode is the node of a subscriber or publisher name ("n0#1/s2" -> "n0").
func subNode(name string) string { return name[:strings.IndexByte(name, '#')] }

func hasGap(r *chaos.Result, ok func(v test.Violation) bool) bool {
	for _, v := range r.Violations {
		if v.Kind != test.Reorder && ok(v) {
			return true
		}
	}
	return false
}

var plantCases = []plantCase{
	{defect: plant.LocalDrop, kinds: []string{chaos.FaultProducerCrash},
		// A gap at a subscriber on the publisher's own node (local delivery).
		named: func(r *chaos.Result) bool {
			return hasGap(r, func(v test.Violation) bool { return subNode(v.Subscriber) == subNode(v.Publisher) })
		}},
	{defect: plant.WorkerSkip, kinds: []string{chaos.FaultProducerCrash},
		// A gap at a subscriber on another node (through a worker).
		named: func(r *chaos.Result) bool {
			return hasGap(r, func(v test.Violation) bool { return subNode(v.Subscriber) != subNode(v.Publisher) })
		}},
	{defect: plant.LossAfterResumed, kinds: []string{chaos.FaultProducerCrash}, slow: 1,
		// A gap at a slow subscriber (s1: after the one that keeps up).
		named: func(r *chaos.Result) bool {
			return hasGap(r, func(v test.Violation) bool { return strings.HasSuffix(v.Subscriber, "/s1") })
		}},
	{defect: plant.JoinAtWrite, kinds: []string{chaos.FaultProxyLatency},
		// What a producer wrote after a node's Start and before it joined
		// that node is skipped: a start gap at a subscriber on another node
		// than the publisher's. No fault restarts a node here: only the
		// soak's start, every node publishing while the others join,
		// exposes it.
		named: func(r *chaos.Result) bool {
			return hasGap(r, func(v test.Violation) bool {
				return v.Kind == test.StartGap && subNode(v.Subscriber) != subNode(v.Publisher)
			})
		}},
	{defect: plant.ExpiredToOff, kinds: []string{chaos.FaultProxyCut}, buffer: 300,
		// A node cut off longer than the buffer is told a range one
		// cursor too long: the next cursor it gets is in it.
		named: func(r *chaos.Result) bool {
			for _, v := range r.Violations {
				if v.Kind == test.RangeOver {
					return true
				}
			}
			return false
		}},
	{defect: plant.AckBeforeDeliver, kinds: []string{chaos.FaultWorkerCrash},
		// The entry marked delivered before the crash is never delivered:
		// a gap at a subscriber on another node than the publisher's.
		named: func(r *chaos.Result) bool {
			return hasGap(r, func(v test.Violation) bool { return subNode(v.Subscriber) != subNode(v.Publisher) })
		}},
}

// TestSoakCatchesPlantedDefects builds the node binary with -tags
// plantdefect and runs a short soak with each planted defect
// (internal/plant): the verdict must fail, naming the defect's violation.
// CI runs two of them (the default); ECHOPUBSUB_PLANT_ALL=1 runs all seven.
func TestSoakCatchesPlantedDefects(t *testing.T) {
	if testing.Short() {
		t.Skip("short soaks: -short skips them")
	}
	cases := plantCases
	if os.Getenv("ECHOPUBSUB_PLANT_ALL") == "" {
		cases = []plantCase{plantCases[0], plantCases[1]}
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	bin, err := chaos.BuildNodeTags(ctx, dir, false, "plantdefect")
	if err != nil {
		t.Fatal(err)
	}
	for _, pc := range cases {
		t.Run(pc.defect, func(t *testing.T) {
			t.Setenv(plant.Env, pc.defect) // the node processes inherit it
			run := t.TempDir()
			buffer := 2000
			if pc.buffer != 0 {
				buffer = pc.buffer
			}
			res, err := chaos.RunSoak(ctx, chaos.SoakOptions{
				Cluster: chaos.ClusterOptions{Binary: bin, Dir: run, Nodes: 3, Buffer: buffer, Pool: 2,
					BatchInterval: 20 * time.Millisecond, CallTimeout: time.Second, Retry: 100 * time.Millisecond,
					LogLevel: "warn", Logf: t.Logf},
				Messages: 15_000, Publishers: 2, Rate: 180, Subscribers: 1, SlowSubscribers: pc.slow, SlowMicros: 1500,
				Kinds: pc.kinds, Hold: 3 * time.Second, Settle: 2 * time.Second, Drain: 30 * time.Second,
				Seed: time.Now().UnixNano(),
			})
			if err != nil {
				t.Fatalf("the soak could not run: %v", err)
			}
			t.Logf("soak result with %s planted:\n%s", pc.defect, res.Summary())
			if res.Counts.SilentGaps == 0 && res.Counts.Reorders == 0 && res.Counts.WrongRanges == 0 && res.Counts.StreamGaps == 0 {
				t.Fatalf("planted defect %s: the soak passed", pc.defect)
			}
			if !pc.named(res) {
				t.Fatalf("planted defect %s: the soak failed, but without the defect's violation: %v", pc.defect, res.Violations)
			}
		})
	}
}

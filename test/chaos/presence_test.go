package chaos_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub/internal/plant"
	"github.com/echopubsub/echopubsub/test/chaos"
)

// presenceSoak runs a short soak with a presence tracker and its churn on
// every node (package presence): after each fault has settled, every live
// node's List must equal the union of what the live nodes track, within
// within.
func presenceSoak(t *testing.T, bin string, kinds []string, within time.Duration) *chaos.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := chaos.RunSoak(ctx, chaos.SoakOptions{
		Cluster: chaos.ClusterOptions{Binary: bin, Dir: t.TempDir(), Nodes: 3, Netns: chaos.DefaultNetns(), Buffer: 2000, Pool: 2,
			BatchInterval: 20 * time.Millisecond, CallTimeout: time.Second, Retry: 100 * time.Millisecond,
			LogLevel: "warn", Logf: t.Logf},
		Messages: 2_000, Publishers: 1, Rate: 100, Subscribers: 1,
		Kinds: kinds, Hold: 2 * time.Second, Settle: 1500 * time.Millisecond, Drain: 30 * time.Second,
		Seed:              time.Now().UnixNano(),
		PresenceDownAfter: 1500 * time.Millisecond, PresenceWithin: within,
	})
	if err != nil {
		t.Fatalf("the soak could not run: %v", err)
	}
	t.Logf("soak result:\n%s", res.Summary())
	return res
}

// TestSoakPresence: presence through every fault kind, each held longer
// than DownAfter: a cut or blackholed node's presences leave and come back,
// a kill -9 and restart's old process's presences leave and the new one's
// join, a SIGSTOP, latency, producer and worker crashes, a cold restart of
// every node; as root, the partitions and packet loss too (without root
// those three are skipped, as in TestSoakShort).
func TestSoakPresence(t *testing.T) {
	if testing.Short() {
		t.Skip("a soak: -short skips it")
	}
	bin, err := chaos.BuildNode(context.Background(), t.TempDir(), os.Getenv("ECHOPUBSUB_CHAOS_RACE") != "")
	if err != nil {
		t.Fatal(err)
	}
	res := presenceSoak(t, bin, chaos.AllFaults, 15*time.Second)
	if want := len(chaos.AllFaults) - len(res.Skipped) + 1; res.PresenceChecks < want {
		t.Errorf("%d presence checks, want one per fault and one at the end (%d)", res.PresenceChecks, want)
	}
	if len(res.PresenceViolations) > 0 {
		t.Errorf("a replica's List differed from the union of live tracks:\n%s", strings.Join(res.PresenceViolations, "\n"))
	}
	if res.DataRaces > 0 {
		t.Errorf("the race-built nodes reported %d data races (ECHOPUBSUB_CHAOS_RACE)", res.DataRaces)
	}
	if res.Counts.SilentGaps != 0 || res.Counts.Reorders != 0 || res.Counts.FalseAlarms != 0 {
		t.Errorf("the pubsub's guarantee, with presence traffic: %d silent gaps, %d reorders, %d false alarms",
			res.Counts.SilentGaps, res.Counts.Reorders, res.Counts.FalseAlarms)
	}
}

// TestSoakCatchesLostPresenceDiff: with presence_lost_diff planted (a
// tracker skips one change of another node's stream in 20 and follows past
// it), the presence check must fail. The fault is added latency, which
// loses nothing: no resync repairs the replica behind the check's back.
func TestSoakCatchesLostPresenceDiff(t *testing.T) {
	if testing.Short() {
		t.Skip("a soak: -short skips it")
	}
	bin, err := chaos.BuildNodeTags(context.Background(), t.TempDir(), false, "plantdefect")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(plant.Env, plant.PresenceLostDiff) // the node processes inherit it
	// A check that fails waits 5 s.
	res := presenceSoak(t, bin, []string{chaos.FaultProxyLatency}, 5*time.Second)
	if len(res.PresenceViolations) == 0 {
		t.Fatalf("planted %s: every presence check passed", plant.PresenceLostDiff)
	}
}

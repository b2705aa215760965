//go:build !race

// Several nodes in one process: not in the race-checked run (see RACE_PKGS
// in the Makefile); make test runs it in the root module's phase.

package presence_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/presence"
	"github.com/echopubsub/echopubsub/test"
)

// testConfig is DefaultConfig with test-sized timings.
func testConfig() presence.Config {
	cfg := presence.DefaultConfig()
	cfg.DownAfter = time.Second
	cfg.HeartbeatInterval = 100 * time.Millisecond
	cfg.SyncRetry = 300 * time.Millisecond
	cfg.CallTimeout = 2 * time.Second
	return cfg
}

// startTrackers starts a tracker on every node; they stop when the test
// ends, before the nodes (cleanups run last first).
func startTrackers(t *testing.T, nodes []*test.Node, cfg presence.Config) []*presence.Tracker {
	t.Helper()
	trs := make([]*presence.Tracker, len(nodes))
	for i, nd := range nodes {
		tr, err := presence.New(nd.PS, cfg)
		if err != nil {
			t.Fatalf("presence.New on %s: %v", nd.Addr, err)
		}
		trs[i] = tr
		t.Cleanup(func() { _ = tr.Stop(context.Background()) })
	}
	return trs
}

// render is a topic's presences as one comparable line: key, node, ref and
// meta of each, in List's order.
func render(l map[string][]presence.Meta) string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		for _, m := range l[k] {
			fmt.Fprintf(&b, "%s@%s#%s%v ", k, m.Node, m.Ref, m.Meta)
		}
	}
	return b.String()
}

// truth is the union of what each live node tracks itself (the metas whose
// node is the tracker's own): what every replica's List must equal.
func truth(nodes []*test.Node, trs []*presence.Tracker, live []int, topic string) string {
	all := map[string][]presence.Meta{}
	for _, i := range live {
		for k, metas := range trs[i].List(topic) {
			for _, m := range metas {
				if m.Node == nodes[i].Addr {
					all[k] = append(all[k], m)
				}
			}
		}
	}
	for _, metas := range all {
		sort.Slice(metas, func(a, b int) bool {
			if metas[a].Node != metas[b].Node {
				return metas[a].Node < metas[b].Node
			}
			return metas[a].Ref < metas[b].Ref
		})
	}
	return render(all)
}

// converged waits until every live replica's List of topic equals the
// truth and has want presences.
func converged(t *testing.T, nodes []*test.Node, trs []*presence.Tracker, live []int, topic string, want int, within time.Duration) {
	t.Helper()
	var last string
	test.Eventually(t, within, func() bool {
		tr := truth(nodes, trs, live, topic)
		if strings.Count(tr, "@") != want {
			last = "truth has not " + fmt.Sprint(want) + " presences: " + tr
			return false
		}
		for _, i := range live {
			if got := render(trs[i].List(topic)); got != tr {
				last = fmt.Sprintf("node %d lists %q, truth %q", i, got, tr)
				return false
			}
		}
		return true
	}, func() string { return last })
}

// spawnProc spawns a process to track (any local actor).
func spawnProc(nd *test.Node) *actor.PID {
	return nd.System.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
}

// diffSteps is what c received about key, as "+key" (a join) and "-key"
// (a leave) steps, in order.
func diffSteps(c *test.Collector, key string) string {
	var b strings.Builder
	for _, m := range c.All() {
		d, ok := m.(*presence.Diff)
		if !ok {
			continue
		}
		for _, s := range []struct {
			sign string
			m    map[string][]presence.Meta
		}{{"-", d.Leaves}, {"+", d.Joins}} {
			keys := make([]string, 0, len(s.m))
			for k := range s.m {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				for range s.m[k] {
					if k != key {
						continue
					}
					fmt.Fprintf(&b, "%s%s ", s.sign, k)
				}
			}
		}
	}
	return b.String()
}

func TestPresenceJoinsAndLeavesAcrossThreeNodes(t *testing.T) {
	nodes := test.StartCluster(t, 3, test.FastConfig())
	cfg := testConfig()
	cfg.DownAfter = time.Minute // every leave here is told, none is a timeout
	trs := startTrackers(t, nodes, cfg)
	live := []int{0, 1, 2}
	watcher := test.SpawnCollector(nodes[2].System)
	if err := trs[2].Subscribe(watcher.PID, "room:1"); err != nil {
		t.Fatal(err)
	}

	alice, bob, bob2 := spawnProc(nodes[0]), spawnProc(nodes[1]), spawnProc(nodes[1])
	must(t, trs[0].Track(alice, "room:1", "alice", map[string]string{"device": "phone"}))
	must(t, trs[1].Track(bob, "room:1", "bob", nil))
	must(t, trs[1].Track(bob2, "room:1", "bob", map[string]string{"tab": "2"})) // one key, two metas
	converged(t, nodes, trs, live, "room:1", 3, 5*time.Second)
	if err := trs[0].Track(alice, "room:1", "alice", nil); !errors.Is(err, presence.ErrAlreadyTracked) {
		t.Fatalf("second Track = %v, want ErrAlreadyTracked", err)
	}

	must(t, trs[1].Update(bob, "room:1", "bob", map[string]string{"away": "yes"}))
	converged(t, nodes, trs, live, "room:1", 3, 5*time.Second)
	if l := trs[2].List("room:1")["bob"]; !(l[0].Meta["away"] == "yes" || l[1].Meta["away"] == "yes") {
		t.Fatalf("node 2 lists bob as %v, want the update", l)
	}
	must(t, trs[0].Untrack(alice, "room:1", "alice"))
	converged(t, nodes, trs, live, "room:1", 2, 5*time.Second)
	nodes[1].System.Root.Stop(bob2) // a tracked process that stops leaves
	converged(t, nodes, trs, live, "room:1", 1, 5*time.Second)

	// The watcher on node 2 saw each step, as a Diff, in order per node.
	for key, want := range map[string]string{"alice": "+alice -alice ", "bob": "+bob +bob -bob +bob -bob "} {
		test.Eventually(t, 5*time.Second, func() bool { return diffSteps(watcher, key) == want },
			func() string { return fmt.Sprintf("diffs about %s %q, want %q", key, diffSteps(watcher, key), want) })
	}

	// A tracker that stops takes its node's presences with it at once (not
	// after DownAfter, a minute here).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	must(t, trs[1].Stop(ctx))
	converged(t, nodes, trs, []int{0, 2}, "room:1", 0, 5*time.Second)
	if err := trs[1].Track(bob, "room:1", "bob", nil); !errors.Is(err, presence.ErrStopped) {
		t.Fatalf("Track after Stop = %v, want ErrStopped", err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestPresencePartitionAndHeal(t *testing.T) {
	nodes := test.StartCluster(t, 3, test.FastConfig())
	cfg := testConfig()
	trs := startTrackers(t, nodes, cfg)
	all := []int{0, 1, 2}
	watcher := test.SpawnCollector(nodes[0].System)
	must(t, trs[0].Subscribe(watcher.PID, "room:1"))
	must(t, trs[0].Track(spawnProc(nodes[0]), "room:1", "alice", nil))
	must(t, trs[1].Track(spawnProc(nodes[1]), "room:1", "bob", nil))
	carol := spawnProc(nodes[2])
	must(t, trs[2].Track(carol, "room:1", "carol", nil))
	converged(t, nodes, trs, all, "room:1", 3, 5*time.Second)
	// A second round, so that no tracker's answer to another's start is
	// still on its way when the cut comes (it would restore, after the heal,
	// what the heal itself must): each node listing every other node's
	// first-round presence had their start requests before, and so
	// answered them before its second-round change.
	for i, tr := range trs {
		must(t, tr.Track(spawnProc(nodes[i]), "room:1", fmt.Sprint("second-", i), nil))
	}
	converged(t, nodes, trs, all, "room:1", 6, 5*time.Second)

	// Node 2 is cut off: each side drops the other's presences by DownAfter
	// after the cut (plus a second of slack for a loaded machine).
	test.Partition(nodes, 2)
	cut := time.Now()
	within := cfg.DownAfter + time.Second
	test.Eventually(t, within, func() bool {
		return len(trs[0].List("room:1")["carol"]) == 0 && len(trs[1].List("room:1")["carol"]) == 0 &&
			len(trs[2].List("room:1")) == 2
	}, func() string {
		return fmt.Sprintf("%v after the cut: node 0 %q, node 1 %q, node 2 %q", time.Since(cut), render(trs[0].List("room:1")),
			render(trs[1].List("room:1")), render(trs[2].List("room:1")))
	})
	test.Eventually(t, 5*time.Second, func() bool { return diffSteps(watcher, "carol") == "+carol -carol " },
		func() string { return "node 0's watcher: " + diffSteps(watcher, "carol") })

	// Both sides change while apart; after the heal each side's next
	// message makes the other ask for its state.
	must(t, trs[2].Untrack(carol, "room:1", "carol"))
	must(t, trs[2].Track(spawnProc(nodes[2]), "room:1", "dave", nil))
	must(t, trs[0].Track(spawnProc(nodes[0]), "room:1", "erin", nil))
	test.Heal(nodes)
	converged(t, nodes, trs, all, "room:1", 7, 10*time.Second)
	test.Eventually(t, 5*time.Second, func() bool { return diffSteps(watcher, "dave") == "+dave " },
		func() string { return "node 0's watcher: " + diffSteps(watcher, "dave") })
}

func TestPresenceCursorExpiredResyncs(t *testing.T) {
	log, captured := test.CapturingLogger(t, zerolog.InfoLevel)
	nodes := test.StartCluster(t, 3, test.FastConfig(), echopubsub.WithLogger(log)) // a 100-message buffer
	cfg := testConfig()
	cfg.DownAfter = time.Minute // only the pubsub's CursorExpired can tell node 2 what it lost
	cfg.HeartbeatInterval = 10 * time.Second
	trs := startTrackers(t, nodes, cfg)
	all := []int{0, 1, 2}
	watcher := test.SpawnCollector(nodes[2].System)
	must(t, trs[2].Subscribe(watcher.PID, "room:1"))
	must(t, trs[0].Track(spawnProc(nodes[0]), "room:1", "alice", nil))
	converged(t, nodes, trs, all, "room:1", 1, 5*time.Second)
	test.WaitJoined(t, nodes) // node 2's cursor on node 0 must be one that can expire

	test.Partition(nodes, 2)
	p := spawnProc(nodes[0])
	for i := 0; i < 120; i++ { // 240 changes: past the 100-message buffer
		must(t, trs[0].Track(p, "room:1", "flip", nil))
		must(t, trs[0].Untrack(p, "room:1", "flip"))
	}
	must(t, trs[0].Track(p, "room:1", "bob", nil))
	test.Eventually(t, 5*time.Second, func() bool { return nodes[0].NodeStats(t, nodes[2].Addr).Expired },
		test.Sprintf("node 2 expired in node 0's view"))
	test.Heal(nodes)
	converged(t, nodes, trs, all, "room:1", 2, 10*time.Second)
	test.Eventually(t, 5*time.Second, func() bool { return diffSteps(watcher, "bob") == "+bob " },
		func() string { return "node 2's watcher: " + diffSteps(watcher, "bob") })
	// The resync was the CursorExpired's (not a later gap's: node 0 sent
	// nothing after bob, and heartbeats come every 10 s).
	if !captured.Contains("presence: messages from a node were lost") {
		t.Fatalf("node 2 did not resync on CursorExpired")
	}
}

// TestPresenceLargeStateInParts: a node's state larger than the pubsub's
// MaxBatchBytes (600 presences of 2 KiB metadata: 1.2 MiB) reaches a tracker
// that starts after it was tracked, in parts that each fit.
func TestPresenceLargeStateInParts(t *testing.T) {
	nodes := test.StartCluster(t, 2, test.FastConfig())
	cfg := testConfig()
	tr0, err := presence.New(nodes[0].PS, cfg)
	must(t, err)
	t.Cleanup(func() { _ = tr0.Stop(context.Background()) })
	big := map[string]string{"blob": strings.Repeat("x", 2048)}
	p := spawnProc(nodes[0])
	for i := 0; i < 600; i++ {
		must(t, tr0.Track(p, "room:1", fmt.Sprint("user-", i), big))
	}
	tr1, err := presence.New(nodes[1].PS, cfg) // learns node 0's state only from its answer
	must(t, err)
	t.Cleanup(func() { _ = tr1.Stop(context.Background()) })
	test.Eventually(t, 10*time.Second, func() bool { return len(tr1.List("room:1")) == 600 },
		func() string { return fmt.Sprintf("node 1 lists %d of 600", len(tr1.List("room:1"))) })
}

// TestPresenceStopLeavesNoGoroutines: a tracker leaves nothing running
// after Stop: no goroutine, and no timer still firing at its address (a
// dead letter every tick; the tick's type is unexported, so it is named
// here by its %T), and every call after it fails with ErrStopped.
func TestPresenceStopLeavesNoGoroutines(t *testing.T) {
	nodes := test.StartCluster(t, 1, test.FastConfig())
	var dead atomic.Int64
	sub := nodes[0].System.EventStream.Subscribe(func(ev interface{}) {
		if d, ok := ev.(*actor.DeadLetterEvent); ok && fmt.Sprintf("%T", d.Message) == "*presence.tick" {
			dead.Add(1)
		}
	})
	defer nodes[0].System.EventStream.Unsubscribe(sub)
	before := goleak.IgnoreCurrent()
	tr, err := presence.New(nodes[0].PS, testConfig())
	must(t, err)
	p, w := spawnProc(nodes[0]), test.SpawnCollector(nodes[0].System)
	must(t, tr.Subscribe(w.PID, "room:1"))
	must(t, tr.Track(p, "room:1", "alice", nil))
	test.Eventually(t, 5*time.Second, func() bool { return diffSteps(w, "alice") == "+alice " }, w.Describe)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	must(t, tr.Stop(ctx))
	must(t, tr.Stop(ctx)) // idempotent
	if err := tr.Untrack(p, "room:1", "alice"); !errors.Is(err, presence.ErrStopped) {
		t.Fatalf("Untrack after Stop = %v, want ErrStopped", err)
	}
	test.Never(t, 300*time.Millisecond, func() bool { return dead.Load() > 0 }, // 30 of testConfig's ticks
		func() string { return fmt.Sprintf("%d messages to the stopped tracker", dead.Load()) })
	nodes[0].System.Root.Stop(p)
	nodes[0].System.Root.Stop(w.PID)
	test.VerifyNoLeaks(t, before)
}

//go:build !race

package presence_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/internal/proc"
	"github.com/echopubsub/echopubsub/presence"
	"github.com/echopubsub/echopubsub/test"
)

// A child node: this test binary run as one node with a tracker, in its own
// process, for kill -9. The parent passes a childSpec in childEnv; the child
// speaks internal/proc's protocol (proc.Child): its "ready" line carries its
// address, and it answers
//
//	track {topic, key} -> spawns a process and tracks it
//
// until killed or its stdin closes.

const childEnv = "ECHOPUBSUB_PRESENCE_CHILD"

type childSpec struct {
	Port  int
	Peers []string
	Cfg   presence.Config
}

type childCommand struct {
	ID    int64  `json:"id"`
	Op    string `json:"op"`
	Topic string `json:"topic,omitempty"`
	Key   string `json:"key,omitempty"`
}

func (c *childCommand) SetID(id int64) { c.ID = id }

type childEvent struct {
	Ev   string `json:"ev"`
	ID   int64  `json:"id,omitempty"`
	Err  string `json:"err,omitempty"`
	Addr string `json:"addr,omitempty"`
}

func init() {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec))
	}
}

func runChild(specJSON string) int {
	log := zerolog.New(os.Stderr).With().Timestamp().Str("child", "1").Logger()
	var spec childSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		log.Error().Err(err).Msg("child: spec")
		return 2
	}
	system := actor.NewActorSystem(echopubsub.ActorSystemLogger(log.Level(zerolog.ErrorLevel)))
	r := remote.NewRemote(system, echopubsub.RemoteConfig("127.0.0.1", spec.Port, log))
	r.Start()
	ps, err := echopubsub.Start(system, test.FastConfig(), echopubsub.WithMembership(cluster.NewStatic(spec.Peers...)), echopubsub.WithLogger(log))
	if err != nil {
		log.Error().Err(err).Msg("child: start")
		return 2
	}
	tr, err := presence.New(ps, spec.Cfg)
	if err != nil {
		log.Error().Err(err).Msg("child: presence.New")
		return 2
	}
	out := proc.NewChild(os.Stdout)
	out.Send(childEvent{Ev: proc.EvReady, Addr: system.Address()})
	for c := range proc.Commands[childCommand](out, os.Stdin) {
		reply := childEvent{Ev: proc.EvReply, ID: c.ID}
		switch c.Op {
		case "track":
			if err := tr.Track(system.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {})), c.Topic, c.Key, nil); err != nil {
				reply.Err = err.Error()
			}
		default:
			reply.Err = fmt.Sprintf("unknown op %q", c.Op)
		}
		out.Send(reply)
	}
	return 0
}

// startChild starts a child node on port; it is killed when the test ends.
func startChild(t *testing.T, port int, peers []string, cfg presence.Config) *proc.Proc {
	t.Helper()
	spec, err := json.Marshal(childSpec{Port: port, Peers: peers, Cfg: cfg})
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "child.log")
	p, err := proc.Start(context.Background(), proc.Spec{Name: "presence child", Argv: []string{os.Args[0], "-test.run=^$"},
		Env: []string{childEnv + "=" + string(spec)}, Log: logPath, Group: true, ReadyTimeout: 15 * time.Second})
	if err != nil {
		t.Fatalf("child did not start: %v", err)
	}
	t.Cleanup(func() {
		_ = p.Kill()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("child log:\n%s", b)
		}
	})
	return p
}

func childTrack(t *testing.T, p *proc.Proc, topic, key string) {
	t.Helper()
	if err := p.Call(&childCommand{Op: "track", Topic: topic, Key: key}, nil, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestPresenceKill9RemovesWithinDownAfter: a node killed with SIGKILL (its
// own process) says nothing; every other node drops its presences within
// DownAfter of the kill, with a Diff, and they stay gone (no zombie). The
// node's next process is a new incarnation: what it tracks shows, what the
// killed one tracked does not.
func TestPresenceKill9RemovesWithinDownAfter(t *testing.T) {
	log := test.Logger(t, zerolog.InfoLevel)
	nodes, addrs := test.NewNodes(t, 2, log)
	port, err := proc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	childAddr := fmt.Sprintf("127.0.0.1:%d", port)
	peers := append(addrs, childAddr)
	for _, nd := range nodes {
		nd.Start(t, test.FastConfig(), echopubsub.WithMembership(cluster.NewStatic(peers...)))
	}
	cfg := testConfig()
	cfg.DownAfter = 2 * time.Second
	cfg.HeartbeatInterval = 200 * time.Millisecond
	trs := startTrackers(t, nodes, cfg)
	watcher := test.SpawnCollector(nodes[1].System)
	must(t, trs[1].Subscribe(watcher.PID, "room:1"))
	must(t, trs[0].Track(spawnProc(nodes[0]), "room:1", "alice", nil))

	child := startChild(t, port, peers, cfg)
	childTrack(t, child, "room:1", "carol")
	childTrack(t, child, "room:1", "dave")
	listed := func(i int, key string) bool {
		for _, m := range trs[i].List("room:1")[key] {
			if m.Node == childAddr {
				return true
			}
		}
		return false
	}
	test.Eventually(t, 10*time.Second, func() bool {
		return listed(0, "carol") && listed(0, "dave") && listed(1, "carol") && listed(1, "dave")
	}, func() string { return render(trs[0].List("room:1")) + " / " + render(trs[1].List("room:1")) })

	if err := child.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// DownAfter after its last message arrived, which was before the kill;
	// the slack is for that arrival's and the check's scheduling on a
	// loaded 2-core machine (once 516 ms at a load average of 10).
	limit := cfg.DownAfter + time.Second
	gone := make([]time.Duration, 2)
	test.Eventually(t, 2*limit, func() bool {
		for i := range trs {
			if gone[i] == 0 && !listed(i, "carol") && !listed(i, "dave") {
				gone[i] = time.Since(killed)
			}
		}
		return gone[0] > 0 && gone[1] > 0
	}, func() string { return render(trs[0].List("room:1")) + " / " + render(trs[1].List("room:1")) })
	t.Logf("the killed node's presences left node 0 after %v, node 1 after %v (DownAfter %v)", gone[0], gone[1], cfg.DownAfter)
	for i, d := range gone {
		if d > limit {
			t.Errorf("node %d dropped the killed node's presences %v after the kill, want within %v", i, d, limit)
		}
	}
	test.Eventually(t, 5*time.Second, func() bool { return diffSteps(watcher, "carol") == "+carol -carol " },
		func() string { return "node 1's watcher: " + diffSteps(watcher, "carol") })
	test.Never(t, 5*cfg.HeartbeatInterval, func() bool { return listed(0, "carol") || listed(1, "carol") },
		func() string { return "a zombie: carol is back" })

	// A new process on the node: a new incarnation.
	child = startChild(t, port, peers, cfg)
	childTrack(t, child, "room:1", "erin")
	test.Eventually(t, 15*time.Second, func() bool { return listed(0, "erin") && listed(1, "erin") },
		func() string { return render(trs[0].List("room:1")) + " / " + render(trs[1].List("room:1")) })
	if listed(0, "carol") || listed(1, "carol") || !strings.Contains(render(trs[1].List("room:1")), "alice@") {
		t.Fatalf("after the restart: %s / %s", render(trs[0].List("room:1")), render(trs[1].List("room:1")))
	}
}

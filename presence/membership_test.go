//go:build !race

package presence_test

import (
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/test"
)

// leavable is a static list whose owner the test can tell that a member
// left, or joined again, as Consul does when a node's TTL lapses and when
// it registers again.
type leavable struct {
	*cluster.Static
	mu  sync.Mutex
	env cluster.Env
}

func (l *leavable) Start(env cluster.Env) error {
	l.mu.Lock()
	l.env = env
	l.mu.Unlock()
	return l.Static.Start(env)
}

func (l *leavable) send(kind cluster.EventKind, addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.env.System.Root.Send(l.env.Owner, &cluster.Event{Kind: kind, Member: cluster.Member{Address: addr, Name: addr}})
}

// TestPresenceMembershipLeft: a node the membership stops listing has its
// presences removed at once (not after DownAfter, a minute here), with a
// Diff; when it is listed again, its next message brings them back.
func TestPresenceMembershipLeft(t *testing.T) {
	nodes, addrs := test.NewNodes(t, 2, test.Logger(t, zerolog.InfoLevel))
	m := &leavable{Static: cluster.NewStatic(addrs...)}
	nodes[0].Start(t, test.FastConfig(), echopubsub.WithMembership(m))
	nodes[1].Start(t, test.FastConfig(), echopubsub.WithMembership(cluster.NewStatic(addrs...)))
	cfg := testConfig()
	cfg.DownAfter = time.Minute
	trs := startTrackers(t, nodes, cfg)
	watcher := test.SpawnCollector(nodes[0].System)
	must(t, trs[0].Subscribe(watcher.PID, "room:1"))
	must(t, trs[1].Track(spawnProc(nodes[1]), "room:1", "bob", nil))
	test.Eventually(t, 5*time.Second, func() bool { return len(trs[0].List("room:1")["bob"]) == 1 },
		func() string { return render(trs[0].List("room:1")) })

	left := time.Now()
	m.send(cluster.Left, addrs[1])
	test.Eventually(t, 5*time.Second, func() bool { return len(trs[0].List("room:1")) == 0 },
		func() string { return render(trs[0].List("room:1")) })
	t.Logf("bob left node 0's list %v after node 1 left the membership", time.Since(left))
	test.Eventually(t, 5*time.Second, func() bool { return diffSteps(watcher, "bob") == "+bob -bob " },
		func() string { return diffSteps(watcher, "bob") })

	m.send(cluster.Joined, addrs[1])
	test.Eventually(t, 15*time.Second, func() bool { return len(trs[0].List("room:1")["bob"]) == 1 },
		func() string { return render(trs[0].List("room:1")) })
	test.Eventually(t, 5*time.Second, func() bool { return diffSteps(watcher, "bob") == "+bob -bob +bob " },
		func() string { return diffSteps(watcher, "bob") })
}

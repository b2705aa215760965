package echopubsub_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster/consul"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
)

// End-to-end tests of Consul membership against a real agent. The
// guarantee they hold it to: every subscriber receives every message in
// order, or is told CursorExpired; these scenarios must never need the
// latter.

func TestConsulThreeNodesFindEachOtherAndDeliver(t *testing.T) {
	agent := test.StartConsulAgent(t)
	nodes := []*test.Node{consulNode(t, agent.Addr), consulNode(t, agent.Addr), consulNode(t, agent.Addr)}
	var cs []*test.Collector
	for _, nd := range nodes {
		cs = append(cs, nd.Subscribe(t, "match"))
	}
	for i := uint64(1); i <= 5; i++ {
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	for _, c := range cs {
		wantStamps(t, c, 1, 2, 3, 4, 5)
	}
	noExpiry(t, cs...)
}

func TestConsulLateJoinerGetsOnlyLaterMessages(t *testing.T) {
	agent := test.StartConsulAgent(t)
	nodes := []*test.Node{consulNode(t, agent.Addr), consulNode(t, agent.Addr)}
	cs := []*test.Collector{nodes[0].Subscribe(t, "match"), nodes[1].Subscribe(t, "match")}
	for i := uint64(1); i <= 3; i++ {
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	for _, c := range cs {
		wantStamps(t, c, 1, 2, 3)
	}

	late := consulNode(t, agent.Addr)
	lc := late.Subscribe(t, "match")
	nodes = append(nodes, late)
	for i := uint64(4); i <= 6; i++ {
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	wantStamps(t, lc, 4, 5, 6)
	for _, c := range cs {
		wantStamps(t, c, 1, 2, 3, 4, 5, 6)
	}
	noExpiry(t, append(cs, lc)...)
}

// TestConsulKilledNodeLeavesAfterTTL: a node in another process is killed
// (SIGKILL: no deregistration). The others see it leave once its TTL check
// lapses (Consul still lists it, critical), keep its read cursor, and keep
// delivering to each other.
func TestConsulKilledNodeLeavesAfterTTL(t *testing.T) {
	agent := test.StartConsulAgent(t)
	nodes := []*test.Node{consulNode(t, agent.Addr), consulNode(t, agent.Addr)}
	cs := []*test.Collector{nodes[0].Subscribe(t, "match"), nodes[1].Subscribe(t, "match")}
	child := startChild(t, childSpec{Consul: agent.Addr})
	// The test is about a registered node leaving: its cursor is kept.
	for _, nd := range nodes {
		test.Eventually(t, 10*time.Second, func() bool { return nd.NodeStats(t, child.addr).Registered },
			test.Sprintf("%s registered with the child node %s", nd.Addr, child.addr))
	}
	nodes[0].Broadcast(t, "match", stamp(1))
	for _, c := range cs {
		wantStamps(t, c, 1)
	}

	killed := time.Now()
	child.kill(t)
	for _, nd := range nodes {
		test.Eventually(t, 10*time.Second, func() bool { return nd.NodeStats(t, child.addr).Absent },
			test.Sprintf("%s sees the killed node %s leave", nd.Addr, child.addr))
	}
	// It left because its TTL lapsed: Consul still lists it, critical.
	status := agent.CheckStatus("scores")
	found := false
	for id, st := range status {
		if strings.HasSuffix(id, "@"+child.addr) {
			found = true
			if st != "critical" {
				t.Fatalf("killed node's check is %q, want critical (TTL lapsed)", st)
			}
		}
	}
	if !found {
		t.Fatalf("killed node %s not registered in consul any more (%v): it was deregistered, not timed out", child.addr, status)
	}
	t.Logf("killed node left %v after SIGKILL (TTL %v)", time.Since(killed).Round(time.Millisecond), test.FastConsulConfig(agent.Addr).TTL)
	for _, nd := range nodes {
		if ns := nd.NodeStats(t, child.addr); ns.Node != child.addr || !ns.Absent {
			t.Fatalf("%s dropped the killed node's read cursor at once: %+v", nd.Addr, ns)
		}
	}
	for i := uint64(2); i <= 4; i++ {
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	for _, c := range cs {
		wantStamps(t, c, 1, 2, 3, 4)
	}
	noExpiry(t, cs...)
}

// TestConsulRestartedMidStreamLosesNothing: Consul crashes and comes back
// empty while messages flow. Nodes keep delivering through the outage,
// register again by themselves, nobody is reported gone, and every
// subscriber gets every message in order with no CursorExpired.
func TestConsulRestartedMidStreamLosesNothing(t *testing.T) {
	agent := test.StartConsulAgent(t)
	var lefts atomic.Int64 // "node left" decisions, by any producer or membership
	countLeft := zerolog.HookFunc(func(_ *zerolog.Event, _ zerolog.Level, msg string) {
		if strings.HasPrefix(msg, "node left the membership") || strings.HasPrefix(msg, "consul: member left") {
			lefts.Add(1)
		}
	})
	nodes := []*test.Node{consulNode(t, agent.Addr, countLeft), consulNode(t, agent.Addr, countLeft), consulNode(t, agent.Addr, countLeft)}
	var cs []*test.Collector
	for _, nd := range nodes {
		cs = append(cs, nd.Subscribe(t, "match"))
	}
	seq := uint64(0)
	burst := func(n int) []uint64 {
		for i := 0; i < n; i++ {
			seq++
			nodes[seq%3].Broadcast(t, "other", stamp(seq)) // other producers stay busy too
			nodes[0].Broadcast(t, "match", stamp(seq))
		}
		return upTo(seq)
	}
	all := burst(10)
	for _, c := range cs {
		wantStamps(t, c, all...)
	}

	agent.Stop(t)
	all = burst(10) // during the outage
	for _, c := range cs {
		wantStamps(t, c, all...)
	}
	agent.Start(t)
	burst(10) // while the nodes register again
	test.Eventually(t, 10*time.Second, func() bool { return agent.HealthyInstances("scores") == 3 },
		test.Sprintf("all 3 nodes registered again in the restarted consul"))
	// From the outage until past the recovery grace, no one is reported gone.
	grace := test.FastConsulConfig(agent.Addr).RecoveryGrace
	test.Never(t, grace+500*time.Millisecond, func() bool { return lefts.Load() != 0 },
		func() string { return fmt.Sprintf("%d 'left' decisions for a Consul restart", lefts.Load()) })
	all = burst(10)
	for _, c := range cs {
		wantStamps(t, c, all...)
	}
	noExpiry(t, cs...)
}

// TestConsulUnreachableAtStartThenJoins: nodes start while Consul is down
// (Start succeeds), and find each other once it comes up.
func TestConsulUnreachableAtStartThenJoins(t *testing.T) {
	agent := test.NewConsulAgent(t) // not started: connections are refused
	nodes := []*test.Node{consulNode(t, agent.Addr), consulNode(t, agent.Addr)}
	cs := []*test.Collector{nodes[0].Subscribe(t, "match"), nodes[1].Subscribe(t, "match")}
	agent.Start(t)
	for i := uint64(1); i <= 3; i++ {
		nodes[1].Broadcast(t, "match", stamp(i))
	}
	for _, c := range cs {
		wantStamps(t, c, 1, 2, 3)
	}
	noExpiry(t, cs...)
}

// --- helpers ---

// consulNode starts a node whose membership is the agent at addr.
// hooks see every log event of the node (its pubsub's included).
func consulNode(t *testing.T, addr string, hooks ...zerolog.Hook) *test.Node {
	t.Helper()
	log := test.Logger(t, zerolog.InfoLevel)
	for _, h := range hooks {
		log = log.Hook(h)
	}
	system, r := test.StartRemote(t, log)
	nd := &test.Node{System: system, Remote: r, Addr: system.Address(), Faults: test.NewFaults()}
	nd.Log = log.With().Str("test_node", nd.Addr).Logger()
	mem, err := consul.New(test.FastConsulConfig(addr))
	if err != nil {
		t.Fatalf("consul.New: %v", err)
	}
	nd.Start(t, fastConfig(), echopubsub.WithMembership(mem))
	return nd
}

func noExpiry(t *testing.T, cs ...*test.Collector) {
	t.Helper()
	for _, c := range cs {
		if n := test.Count[*messages.CursorExpired](c); n != 0 {
			t.Fatalf("%d CursorExpired: %s", n, c.Describe())
		}
	}
}

func upTo(n uint64) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(i + 1)
	}
	return out
}

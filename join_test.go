package echopubsub_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
)

// Join semantics ("Joined" in the package doc): a node's subscribers get
// every message written after its pubsub started, in order, however long the
// first connection takes; nothing from before; a notice only when the buffer
// no longer holds what the node is owed. None of these tests waits for a
// join: users don't.

var callTimeouts = []time.Duration{5 * time.Second, 500 * time.Millisecond}

func permutations(n int) [][]int {
	if n == 1 {
		return [][]int{{0}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := append(append(append([]int{}, p[:i]...), n-1), p[i:]...)
			out = append(out, q)
		}
	}
	return out
}

// Three node processes with a static member list, started one after
// another in each of the six orders; each subscribes right after its Start;
// the first and the last started broadcast as soon as the last Start
// returned. Every node gets everything, and nobody is told anything.
func TestColdStartEveryOrder(t *testing.T) {
	for _, timeout := range callTimeouts {
		for _, order := range permutations(3) {
			t.Run(fmt.Sprintf("call_timeout=%v/order=%v", timeout, order), func(t *testing.T) {
				var peers []string
				var ports []int
				for i := 0; i < 3; i++ {
					ports = append(ports, test.FreePort(t))
					peers = append(peers, fmt.Sprintf("127.0.0.1:%d", ports[i]))
				}
				nodes := make([]*childNode, 3)
				for _, i := range order {
					nodes[i] = startChild(t, childSpec{Port: ports[i], Peers: peers, CallTimeout: timeout})
				}
				nodes[order[0]].publish(t, "first", 100)
				nodes[order[2]].publish(t, "last", 100)
				for _, nd := range nodes {
					wantReceived(t, nd, map[string][2]uint64{"first": {1, 100}, "last": {1, 100}})
				}
			})
		}
	}
}

// The same with Consul membership: a node is listed only once Consul says
// so, which may be after the first broadcast.
func TestConsulColdStartEveryOrder(t *testing.T) {
	agent := test.StartConsulAgent(t)
	run := 0
	for _, timeout := range callTimeouts {
		for _, order := range permutations(3) {
			run++
			name := fmt.Sprintf("cold%d", run) // one service per run: runs do not see each other
			t.Run(fmt.Sprintf("call_timeout=%v/order=%v", timeout, order), func(t *testing.T) {
				nodes := make([]*childNode, 3)
				for _, i := range order {
					nodes[i] = startChild(t, childSpec{Name: name, Consul: agent.Addr, CallTimeout: timeout})
				}
				nodes[order[0]].publish(t, "first", 100)
				nodes[order[2]].publish(t, "last", 100)
				for _, nd := range nodes {
					wantReceived(t, nd, map[string][2]uint64{"first": {1, 100}, "last": {1, 100}})
				}
			})
		}
	}
}

// A node listed from the start but started after 60 writes and 3 s of
// failed dialling gets none of them and no notice, then every later message.
func TestLateNodeGetsNothingFromBefore(t *testing.T) {
	for _, timeout := range callTimeouts {
		t.Run(fmt.Sprintf("call_timeout=%v", timeout), func(t *testing.T) {
			var peers []string
			var ports []int
			for i := 0; i < 3; i++ {
				ports = append(ports, test.FreePort(t))
				peers = append(peers, fmt.Sprintf("127.0.0.1:%d", ports[i]))
			}
			a := startChild(t, childSpec{Port: ports[0], Peers: peers, CallTimeout: timeout})
			b := startChild(t, childSpec{Port: ports[1], Peers: peers, CallTimeout: timeout})
			a.publish(t, "p", 60)
			// The scenario, not a settling wait: the producers dial the
			// absent node for 3 s, queueing and retrying registrations.
			time.Sleep(3 * time.Second)
			late := startChild(t, childSpec{Port: ports[2], Peers: peers, CallTimeout: timeout})
			a.publish(t, "p", 40)
			wantReceived(t, late, map[string][2]uint64{"p": {61, 100}})
			wantReceived(t, a, map[string][2]uint64{"p": {1, 100}})
			wantReceived(t, b, map[string][2]uint64{"p": {1, 100}})
		})
	}
}

// holdFirst makes node's workers stall on the first request that match
// accepts, for d: the request is handled late, after the producer may have
// timed out and retried (a request that "did land").
func holdFirst(nd *test.Node, d time.Duration, match func(proto.Message) bool) *atomic.Bool {
	var held atomic.Bool
	nd.Faults.SetOnReceive(func(_ string, req proto.Message) {
		if match(req) && held.CompareAndSwap(false, true) {
			time.Sleep(d)
		}
	})
	return &held
}

// A Register held back 3 s, a RegisterAck lost (the join handled after the
// producer gave up on it), a BatchAck lost (the batch delivered after the
// producer gave up on it): no expiry, no duplicate, nothing missing.
func TestLateOrLostHandshakeNeitherExpiresNorDuplicates(t *testing.T) {
	probe := func(m proto.Message) bool { r, ok := m.(*messages.Register); return ok && !r.Join }
	join := func(m proto.Message) bool { r, ok := m.(*messages.Register); return ok && r.Join }
	batch := func(m proto.Message) bool { _, ok := m.(*messages.Batch); return ok }
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		match   func(proto.Message) bool
		hold    time.Duration
	}{
		{"register held 3s", 5 * time.Second, probe, 3 * time.Second},
		{"register held 3s", 500 * time.Millisecond, probe, 3 * time.Second},
		{"register ack lost", 500 * time.Millisecond, join, time.Second},
		{"batch ack lost", 500 * time.Millisecond, batch, time.Second},
	} {
		t.Run(fmt.Sprintf("%s/call_timeout=%v", tc.name, tc.timeout), func(t *testing.T) {
			cfg := fastConfig()
			cfg.CallTimeout = tc.timeout
			log := test.Logger(t, zerolog.InfoLevel)
			nodes, addrs := test.NewNodes(t, 2, log)
			held := holdFirst(nodes[1], tc.hold, tc.match)
			var cs []*test.Collector
			for _, nd := range nodes {
				nd.Start(t, cfg, echopubsub.WithMembership(cluster.NewStatic(addrs...)))
				cs = append(cs, nd.Subscribe(t, "match"))
			}
			for i := uint64(1); i <= 20; i++ {
				nodes[0].Broadcast(t, "match", stamp(i))
			}
			for _, c := range cs {
				wantStamps(t, c, upTo(20)...)
			}
			if !held.Load() {
				t.Fatalf("the fault never happened: no matching request reached node 1")
			}
			nodes[0].Broadcast(t, "match", stamp(21))
			for _, c := range cs {
				wantStamps(t, c, upTo(21)...)
			}
			noExpiry(t, cs...)
		})
	}
}

// A node cut off from the start for longer than the buffer covers is told
// CursorExpired, exactly once for the one producer, then gets what follows.
func TestStartupPartitionLongerThanBuffer(t *testing.T) {
	cfg := fastConfig()
	cfg.BufferSize = 10
	log := test.Logger(t, zerolog.InfoLevel)
	nodes, addrs := test.NewNodes(t, 2, log)
	nodes[0].Faults.Cut(nodes[1].Addr)
	for _, nd := range nodes {
		nd.Start(t, cfg, echopubsub.WithMembership(cluster.NewStatic(addrs...)))
	}
	c := nodes[1].Subscribe(t, "match")
	for i := uint64(1); i <= 15; i++ {
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	test.Eventually(t, 5*time.Second, func() bool { return nodes[0].Stats(t).WriteCursor == 15 }, test.Sprintf("written"))
	test.Heal(nodes)
	// As for any expiry, the node's cursor moves to the write cursor (seed
	// 000): what follows the notice is what was written after it.
	test.Eventually(t, 10*time.Second, func() bool { return test.Count[*messages.CursorExpired](c) == 1 }, c.Describe)
	nodes[0].Broadcast(t, "match", stamp(16))
	wantStamps(t, c, 16)
	test.Never(t, 300*time.Millisecond, func() bool { return test.Count[*messages.CursorExpired](c) != 1 }, c.Describe)
	if ce := c.All()[0].(*messages.CursorExpired); ce.Node != nodes[0].Addr {
		t.Fatalf("first message %v, want CursorExpired from %s", ce, nodes[0].Addr)
	}
}

// A node that restarts gets what was written after its restart, nothing from
// while it was down, and no notice: its new subscribers were owed nothing.
func TestRestartedNodeGetsOnlyWhatFollowsItsRestart(t *testing.T) {
	cfg := fastConfig()
	nodes := test.StartCluster(t, 2, cfg)
	nodes[1].StopPubSub(t)
	for i := uint64(1); i <= 5; i++ {
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	test.Eventually(t, 5*time.Second, func() bool { return nodes[0].Stats(t).WriteCursor == 5 }, test.Sprintf("written"))
	// Not a settling wait: it makes 1..5 history (see TestNewJoinerGetsOnlyLaterMessages).
	time.Sleep(300 * time.Millisecond)
	nodes[1].Start(t, cfg, echopubsub.WithMembership(cluster.NewStatic(nodes[0].Addr, nodes[1].Addr)))
	c := nodes[1].Subscribe(t, "match")
	for i := uint64(6); i <= 10; i++ {
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	wantStamps(t, c, 6, 7, 8, 9, 10)
	noExpiry(t, c)
}

// A graceful Stop delivers everything it accepted and retires the producer:
// the node's next start is no news to its peers' subscribers (no "producer
// restarted"), and nothing broadcast before Stop is lost, even mid-stream.
func TestGracefulStopLosesNothingAndRaisesNoAlarm(t *testing.T) {
	cfg := fastConfig()
	cfg.BufferSize = 20_000
	cfg.BatchInterval = 200 * time.Millisecond // writes still buffered when Stop begins
	nodes := test.StartCluster(t, 2, cfg)
	c := nodes[1].Subscribe(t, "match")
	var accepted atomic.Uint64
	done := make(chan struct{})
	go func() { // publishes until Stop refuses (or 10,000 messages); ends then
		defer close(done)
		for i := uint64(1); i <= 10_000; i++ {
			if err := nodes[0].PS.Broadcast(nil, "match", stamp(i)); err != nil {
				return
			}
			accepted.Store(i)
		}
	}()
	test.Eventually(t, 5*time.Second, func() bool { return accepted.Load() >= 500 }, test.Sprintf("publishing"))
	nodes[0].StopPubSub(t)
	<-done
	n := accepted.Load()
	wantUpTo(t, c, n)
	nodes[0].Start(t, cfg, echopubsub.WithMembership(cluster.NewStatic(nodes[0].Addr, nodes[1].Addr)))
	nodes[0].Broadcast(t, "match", stamp(n+1))
	wantUpTo(t, c, n+1)
	noExpiry(t, c)
}

// wantUpTo waits until c received exactly stamps 1..n, in order.
func wantUpTo(t *testing.T, c *test.Collector, n uint64) {
	t.Helper()
	test.Eventually(t, 10*time.Second, func() bool { return equal(c.Stamps(), upTo(n)) },
		func() string { return fmt.Sprintf("want stamps 1..%d, got %s", n, c.Describe()) })
}

// A listed node that never runs does not cost the other pool groups their
// graceful stop: every group retires with the reachable node, so a clean
// restart raises no notice there, in any group. The stop's log line names
// the dead node as a value ({"node": address, "lag": n}), never in a key.
func TestGracefulStopWithADeadListedNodeRetiresEveryGroup(t *testing.T) {
	cfg := fastConfig()
	cfg.PoolSize = 2
	log, logs := test.CapturingLogger(t, zerolog.InfoLevel)
	var nodes []*test.Node
	addrs := []string{fmt.Sprintf("127.0.0.1:%d", test.FreePort(t))} // listed, never started
	for i := 0; i < 2; i++ {
		system, r := test.StartRemote(t, log)
		nodes = append(nodes, &test.Node{System: system, Remote: r, Addr: system.Address(), Faults: test.NewFaults(), Log: log})
		addrs = append(addrs, system.Address())
	}
	for _, nd := range nodes {
		nd.Start(t, cfg, staticOf(addrs))
	}
	c := nodes[1].Subscribe(t, "match")
	nodes[0].Broadcast(t, "match", stamp(1))
	wantStamps(t, c, 1)
	waitJoined(t, nodes) // every group of node 0 joined node 1: each has an incarnation to retire there
	nodes[0].StopPubSub(t)
	if want := `unacked=[{"lag":0,"node":"` + addrs[0] + `"}]`; !logs.Contains(want) || logs.Contains("unacked_") {
		t.Errorf("graceful stop's log: want the away node as a value, %s, and no key built from it; got:\n%s", want, logs)
	}
	nodes[0].Start(t, cfg, staticOf(addrs))
	nodes[0].Broadcast(t, "match", stamp(2))
	wantStamps(t, c, 1, 2)
	test.Never(t, 500*time.Millisecond, func() bool { return test.Count[*messages.CursorExpired](c) != 0 }, c.Describe)
}

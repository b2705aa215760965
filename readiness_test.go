package echopubsub_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/test"
)

// heldMembership is a static list that the test lets the membership send
// when it chooses, like a membership service answering late (Consul's
// first query).
type heldMembership struct {
	inner *cluster.Static
	mu    sync.Mutex
	env   cluster.Env
	sent  bool
}

func (h *heldMembership) Start(env cluster.Env) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.env = env
	return nil
}

// release sends the list now (the inner Static's Joined events and Listed).
func (h *heldMembership) release(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.inner.Start(h.env); err != nil {
		t.Fatalf("static start: %v", err)
	}
	h.sent = true
}

// join sends one more member, as a membership service does for a node that
// registers later.
func (h *heldMembership) join(addr string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.env.System.Root.Send(h.env.Owner, &cluster.Event{Kind: cluster.Joined, Member: cluster.Member{Address: addr, Name: addr}})
}

func (h *heldMembership) Members() []cluster.Member { return h.inner.Members() }

func (h *heldMembership) Stop(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.sent {
		return nil
	}
	return h.inner.Stop(ctx)
}

func health(t *testing.T, nd *test.Node) echopubsub.Health {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return nd.PS.Health(ctx)
}

// tried reports whether every one of want is in h.Peers and was tried: it
// answered, or a call to it failed.
func tried(h echopubsub.Health, want ...string) bool {
	seen := map[string]bool{}
	for _, p := range h.Peers {
		seen[p.Node] = p.Registered || p.Absent || p.Failures > 0 || p.LastAckAge >= 0
	}
	for _, w := range want {
		if !seen[w] {
			return false
		}
	}
	return true
}

// Readiness means start-up is done: not before the membership listed the
// members, not before each listed member was tried once, then true for good
// while the pubsub runs. A listed node that is down does not keep the others
// unready (Peers reports it, with what it may be owed), nor does a member
// that appears later and does not answer.
func TestReadyOnceStartUpIsDoneAndNotBefore(t *testing.T) {
	cfg := fastConfig()
	log := test.Logger(t, zerolog.InfoLevel)
	nodes, addrs := test.NewNodes(t, 2, log)
	down := fmt.Sprintf("127.0.0.1:%d", test.FreePort(t)) // listed, never started
	listed := append(append([]string{}, addrs...), down)
	held := &heldMembership{inner: cluster.NewStatic(listed...)}
	nodes[1].Start(t, cfg, staticOf(listed))
	nodes[0].Start(t, cfg, echopubsub.WithMembership(held))

	// Before the membership answers: not ready, and saying why.
	test.Never(t, 300*time.Millisecond, func() bool { return health(t, nodes[0]).Ready },
		test.Sprintf("ready before the membership listed any member"))
	if h := health(t, nodes[0]); h.Reason == "" || !h.Live {
		t.Fatalf("health before the member list: %+v, want a reason and live", h)
	}

	// From the list on: never ready with a listed member not tried yet.
	held.release(t)
	var h echopubsub.Health
	test.Eventually(t, 10*time.Second, func() bool {
		h = health(t, nodes[0])
		if h.Ready && !tried(h, nodes[1].Addr, down) {
			t.Fatalf("ready before every listed member was tried: %+v", h)
		}
		return h.Ready
	}, func() string { return fmt.Sprintf("never ready with one listed node down: %+v", h) })

	// A member listed later that accepts connections but never answers
	// (its first call waits out CallTimeout): readiness does not flap.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { _ = silent.Close() })
	held.join(silent.Addr().String())
	test.Never(t, 2*cfg.CallTimeout, func() bool { h = health(t, nodes[0]); return !h.Ready },
		func() string { return fmt.Sprintf("readiness flapped: %+v", h) })

	// The down node is reported, with what it may be owed.
	for i := uint64(1); i <= 5; i++ {
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	test.Eventually(t, 5*time.Second, func() bool { return nodes[0].Stats(t).WriteCursor == 5 }, test.Sprintf("written"))
	test.Eventually(t, 10*time.Second, func() bool {
		h = health(t, nodes[0])
		for _, p := range h.Peers {
			if p.Node == nodes[1].Addr && !p.Registered {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("running peer never registered: %+v", h) })
	for _, p := range h.Peers {
		if p.Node == down && (p.Registered || p.Failures == 0 || !p.LagUnknown || p.Lag != 5 || p.LastAckAge != -1) {
			t.Fatalf("down peer reported as %+v, want unregistered, failing, never answered, lag unknown (at most 5)", p)
		}
	}
}

// Stats of a listed node that never answered: its lag is what it may be
// owed (everything written, marked unknown), never 0 with Next at the write
// cursor, which reads "caught up" for a node that holds nothing. Once it
// runs and answers, its lag is what it acknowledged.
func TestUnregisteredPeerLagIsWhatItIsOwed(t *testing.T) {
	cfg := fastConfig()
	log := test.Logger(t, zerolog.InfoLevel)
	nodes, addrs := test.NewNodes(t, 2, log)
	nodes[0].Start(t, cfg, staticOf(addrs))
	for i := uint64(1); i <= 7; i++ {
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	test.Eventually(t, 5*time.Second, func() bool { return nodes[0].Stats(t).WriteCursor == 7 }, test.Sprintf("written"))
	// Node 1's remote listens, its pubsub does not run: calls to it are
	// dead-lettered, it never answers.
	test.Eventually(t, 5*time.Second, func() bool { return nodes[0].NodeStats(t, nodes[1].Addr).Failures > 0 },
		test.Sprintf("no failed call to node 1"))
	if ns := nodes[0].NodeStats(t, nodes[1].Addr); ns.Registered || !ns.LagUnknown || ns.Lag != 7 || ns.Next != 0 {
		t.Fatalf("unregistered, never answered node 1: %+v, want lag unknown, at most 7, next 0", ns)
	}
	nodes[1].Start(t, cfg, staticOf(addrs))
	c := nodes[1].Subscribe(t, "match")
	nodes[0].Broadcast(t, "match", stamp(8))
	wantStamps(t, c, 8)
	test.Eventually(t, 5*time.Second, func() bool {
		ns := nodes[0].NodeStats(t, nodes[1].Addr)
		return ns.Registered && !ns.LagUnknown && ns.Lag == 0 && ns.Next == 8
	}, func() string { return fmt.Sprintf("node 1 after its join: %+v", nodes[0].NodeStats(t, nodes[1].Addr)) })
}

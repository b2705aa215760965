package echopubsub_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/test"
)

// TestStalledPeerShowsInStatsHealthAndMetric (issue 37): a peer stream that
// makes no progress while its lag grows shows as stalled, with the reason,
// in Stats, Health and the metric echopubsub.peer.stalled; a peer that is
// caught up, however long it stays idle, never does, and a stalled one that
// takes its messages again stops being stalled. The stall is made by the
// fault hook cutting node 0's calls to node 1 (as a peer that cannot decode
// a batch made every call fail, before issue 37).
func TestStalledPeerShowsInStatsHealthAndMetric(t *testing.T) {
	cfg := fastConfig() // StallAfter = 2 CallTimeout + BatchInterval = 1.01 s
	m0 := newMeter(t)
	log, logged := test.CapturingLogger(t, zerolog.InfoLevel)
	nodes, addrs := test.NewNodes(t, 2, log)
	nodes[0].Start(t, cfg, staticOf(addrs), echopubsub.WithMeterProvider(m0.mp))
	nodes[1].Start(t, cfg, staticOf(addrs))
	peer := nodes[1].Addr
	c := nodes[1].Subscribe(t, "s")
	health := func() echopubsub.PeerHealth {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, p := range nodes[0].PS.Health(ctx).Peers {
			if p.Node == peer {
				return p
			}
		}
		return echopubsub.PeerHealth{}
	}

	var want []uint64
	publish := func(from, to uint64) {
		for i := from; i <= to; i++ {
			nodes[0].Broadcast(t, "s", stamp(i))
			want = append(want, i)
		}
	}
	publish(1, 5)
	wantStamps(t, c, want...)
	// Caught up and idle for longer than StallAfter: never stalled. (The
	// metric alone is read meanwhile: a Stats call is itself a look at the
	// peer, which an idle node gets from nobody.)
	test.Never(t, 2*cfg.CallTimeout+time.Second, func() bool { return m0.value(t, "echopubsub.peer.stalled") != 0 },
		func() string {
			return test.Sprintf("a caught-up idle peer was reported stalled by echopubsub.peer.stalled (lag gauge %d)", m0.value(t, "echopubsub.peer.lag"))()
		})
	if ns, h := nodes[0].NodeStats(t, peer), health(); ns.Stalled || h.Stalled {
		t.Errorf("a caught-up idle peer was reported stalled: stats %+v, health %+v", ns, h)
	}

	nodes[0].Faults.Cut(peer) // every call to the peer fails from now on
	publish(6, 10)
	test.Eventually(t, 10*time.Second, func() bool { return nodes[0].NodeStats(t, peer).Stalled },
		func() string {
			return "node 1 not stalled in Stats: " + test.Sprintf("%+v", nodes[0].NodeStats(t, peer))()
		})
	if ns := nodes[0].NodeStats(t, peer); ns.Lag != 5 || !strings.Contains(ns.StallReason, "calls in a row failed") ||
		!strings.Contains(ns.StallReason, test.ErrCut.Error()) {
		t.Errorf("stalled node's stats %+v: want lag 5 and a reason naming the failed calls and %q", ns, test.ErrCut)
	}
	if h := health(); !h.Stalled || !strings.Contains(h.StallReason, test.ErrCut.Error()) {
		t.Errorf("Health's peer %+v: want stalled, with the reason", h)
	}
	if v := m0.value(t, "echopubsub.peer.stalled"); v != 1 {
		t.Errorf("echopubsub.peer.stalled = %d, want 1", v)
	}
	if !logged.Contains("peer stream stalled") {
		t.Errorf("the stall was not logged")
	}

	nodes[0].Faults.HealAll()
	wantStamps(t, c, want...)
	test.Eventually(t, 10*time.Second, func() bool {
		return !nodes[0].NodeStats(t, peer).Stalled && !health().Stalled && m0.value(t, "echopubsub.peer.stalled") == 0
	}, test.Sprintf("node 1 still reported stalled after it took every message"))
	if logged.Count("peer stream stalled") != 1 {
		t.Errorf("the stall was logged %d times, want once", logged.Count("peer stream stalled"))
	}
}

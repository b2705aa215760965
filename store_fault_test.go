package echopubsub_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
)

// TestFailingStoreKeepsTrafficFlowing: node 1's store stops taking writes
// (ENOSPC) while node 0 publishes. Node 1's subscribers still get every
// message, durable and ephemeral, in order; Health and the
// echopubsub.store.failing gauge say why. Once the store takes writes
// again, a replay on node 1 shows one gap row of exactly the rows it could
// not store, where they were, and the rows after it.
func TestFailingStoreKeepsTrafficFlowing(t *testing.T) {
	cfg := replayConfig()
	cfg.SoftQueue, cfg.HardQueue = 400, 800
	nodes := test.StartCluster(t, 2, cfg)
	failing := test.NewFailingStore()
	m := newMeter(t)
	for i, nd := range nodes {
		nd.StopPubSub(t)
		opts := []echopubsub.Option{staticOf(addrsOf(nodes)), echopubsub.WithDurableTopics("room:*"), test.WithMemStore()}
		if i == 1 {
			opts = append(opts, echopubsub.WithStore(failing), echopubsub.WithMeterProvider(m.mp))
		}
		nd.Start(t, cfg, opts...)
	}
	durable, chat := nodes[1].Subscribe(t, "room:1"), nodes[1].Subscribe(t, "chat")
	publishStamps(t, nodes[0], "room:1", "a", 1, 3)
	wantStamps(t, durable, 1, 2, 3)

	failing.Fail(fmt.Errorf("write store file: %w", syscall.ENOSPC))
	for s := uint64(1); s <= 5; s++ { // interleaved: one producer stream carries both when they share a group
		publishStamps(t, nodes[0], "chat", "c", 4*s-3, 4*s)
		publishStamps(t, nodes[0], "room:1", "a", 3+s, 3+s)
	}
	wantStamps(t, chat, seqs(1, 20)...)
	wantStamps(t, durable, seqs(1, 8)...)
	test.Eventually(t, 10*time.Second, func() bool {
		h := nodes[1].PS.Health(context.Background())
		return h.Ready && h.Store != nil && h.Store.Failing && h.Store.Unstored == 5 && strings.Contains(h.Store.Error, "no space")
	}, func() string {
		return fmt.Sprintf("node 1's health: %+v", nodes[1].PS.Health(context.Background()).Store)
	})
	if v := m.value(t, "echopubsub.store.failing"); v != 1 {
		t.Fatalf("echopubsub.store.failing = %d while the store fails, want 1", v)
	}
	if v := m.value(t, "echopubsub.store.unstored_rows"); v != 5 {
		t.Fatalf("echopubsub.store.unstored_rows = %d, want 5", v)
	}

	failing.Heal()
	// The store is tried again within about a second, with or without
	// traffic: Health says when it took the gap row.
	test.Eventually(t, 10*time.Second, func() bool { return nodes[1].PS.Health(context.Background()).Store == nil },
		func() string {
			return fmt.Sprintf("node 1's store still failing: %+v", nodes[1].PS.Health(context.Background()).Store)
		})
	if v := m.value(t, "echopubsub.store.failing"); v != 0 {
		t.Fatalf("echopubsub.store.failing = %d after the store recovered, want 0", v)
	}
	publishStamps(t, nodes[0], "room:1", "a", 9, 10)
	wantStamps(t, durable, seqs(1, 10)...)
	got, st := replayAll(t, nodes[1], nodes[0].Addr)
	if want := "a#1 a#2 a#3 gap(5) a#9 a#10"; strings.Join(got, " ") != want || st.Gaps != 1 || st.Missed != 5 {
		t.Fatalf("node 1 replayed %v (%+v); want %s", got, st, want)
	}
}

// TestFailingStoreKeepsACursorExpiry: while node 1's store fails, node 1
// falls behind node 0's buffer and is told CursorExpired (its worker could
// not write that gap row either), then gets more rows it cannot store. Once
// the store recovers, the replay shows both gaps, which together count
// every message between #3 and the first one stored again: nothing silent.
// A session following room:1 WithFrom there is told the CursorExpired too:
// its store, failing, has no gap row to tell it with yet.
func TestFailingStoreKeepsACursorExpiry(t *testing.T) {
	cfg := replayConfig()
	cfg.SoftQueue, cfg.HardQueue = 400, 800
	nodes := test.StartCluster(t, 2, cfg)
	failing := test.NewFailingStore()
	for i, nd := range nodes {
		nd.StopPubSub(t)
		store := test.WithMemStore()
		if i == 1 {
			store = echopubsub.WithStore(failing)
		}
		nd.Start(t, cfg, staticOf(addrsOf(nodes)), echopubsub.WithDurableTopics("room:*"), store)
	}
	c := nodes[1].Subscribe(t, "room:1")
	follower := spawnOwner(t, nodes[1], nil)
	id := openSession(t, nodes[1], follower, nil)
	if err := nodes[1].PS.SessionSubscribe(id, "room:1", echopubsub.WithFrom(1)); err != nil {
		t.Fatalf("SessionSubscribe WithFrom(1): %v", err)
	}
	publishStamps(t, nodes[0], "room:1", "a", 1, 3)
	wantStamps(t, c, 1, 2, 3)
	waitEnvelopes(t, follower, 3)
	failing.Fail(fmt.Errorf("write store file: %w", syscall.EIO))
	nodes[0].Faults.Cut(nodes[1].Addr)
	publishStamps(t, nodes[0], "room:1", "a", 4, 153) // BufferSize is 100
	nodes[0].Faults.HealAll()
	test.Eventually(t, 10*time.Second, func() bool { return test.Count[*messages.CursorExpired](c) == 1 },
		func() string { return "node 1's subscriber: " + c.Describe() })
	test.Eventually(t, 10*time.Second, func() bool { return countOf[*messages.CursorExpired](follower) == 1 }, follower.describe)
	publishStamps(t, nodes[0], "room:1", "a", 154, 155)
	test.Eventually(t, 10*time.Second, func() bool { s := c.Stamps(); return len(s) > 0 && s[len(s)-1] == 155 },
		func() string { return "node 1's subscriber: " + c.Describe() })

	failing.Heal()
	test.Eventually(t, 10*time.Second, func() bool { return nodes[1].PS.Health(context.Background()).Store == nil },
		func() string {
			return fmt.Sprintf("node 1's store still failing: %+v", nodes[1].PS.Health(context.Background()).Store)
		})
	publishStamps(t, nodes[0], "room:1", "a", 156, 156)
	test.Eventually(t, 10*time.Second, func() bool { s := c.Stamps(); return len(s) > 0 && s[len(s)-1] == 156 },
		func() string { return "node 1's subscriber: " + c.Describe() })
	got, st := replayAll(t, nodes[1], nodes[0].Addr)
	// The expiry's gap row names its range (cursors 3 to the write cursor
	// it moved to); the rows the failing store could not take are counted,
	// with no range.
	want := "a#1 a#2 a#3 gap(%d)incarnation %d [3, %d) gap(%d) a#156"
	var m1, inc, to, m2 uint64
	if _, err := fmt.Sscanf(strings.Join(got, " "), want, &m1, &inc, &to, &m2); err != nil || m1+m2 != 152 || st.Gaps != 2 ||
		m1 == 0 || m2 == 0 || to != 3+m1 {
		t.Fatalf("node 1 replayed %v (%+v): want a#1..3, two gaps counting #4..155 (152), the first [3, 3+its count), a#156", got, st)
	}
}

// TestFailingStoreShowsOwnBroadcastFailures: a node that only publishes
// (nothing received to keep) still shows its failing store: the durable
// Broadcast returns the error, Health says why, and the first append that
// succeeds again clears it.
func TestFailingStoreShowsOwnBroadcastFailures(t *testing.T) {
	failing := test.NewFailingStore()
	nd := test.StartCluster(t, 1, replayConfig(), echopubsub.WithStore(failing), echopubsub.WithDurableTopics("room:*"))[0]
	failing.Fail(fmt.Errorf("write store file: %w", syscall.ENOSPC))
	if err := nd.PS.Broadcast(nil, "room:1", stamp(1)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("durable broadcast on a full disk: %v, want the append's error", err)
	}
	if h := nd.PS.Health(context.Background()); h.Store == nil || !strings.Contains(h.Store.Error, "no space") || h.Store.Unstored != 0 {
		t.Fatalf("health after a failed append: %+v", h.Store)
	}
	failing.Heal()
	nd.Broadcast(t, "room:1", stamp(2))
	if h := nd.PS.Health(context.Background()); h.Store != nil {
		t.Fatalf("health after an append succeeded again: %+v", h.Store)
	}
}

// TestFailingStoreWithFromSessionFollowsTheStore: node 1's store fails
// while a session there catches up WithFrom(1) (20 stored rows; it waits at
// SoftQueue 5 for acks, RoomWait 0) and node 0 publishes 3 more durable
// messages, which node 1 delivers live but cannot store, then 2 more once
// the session is live. The session follows the store: it never gets those
// 5 (no Cursor 0 envelope, nothing ahead of the rows it is still owed),
// and once the store takes writes again it is told exactly them, in cursor
// order: a StreamGap of 5 where the gap row is (no false alarm: it got
// none of them), then the next message. A plain subscriber on node 1 got
// all 25 live.
func TestFailingStoreWithFromSessionFollowsTheStore(t *testing.T) {
	cfg := replayConfig() // SoftQueue 5, HardQueue 10
	cfg.RoomWait = 0      // a catch-up row that finds no room stays in the store
	nodes := test.StartCluster(t, 2, cfg)
	failing := test.NewFailingStore()
	for i, nd := range nodes {
		nd.StopPubSub(t)
		store := test.WithMemStore()
		if i == 1 {
			store = echopubsub.WithStore(failing)
		}
		nd.Start(t, cfg, staticOf(addrsOf(nodes)), echopubsub.WithDurableTopics("room:*"), store)
	}
	plain := nodes[1].Subscribe(t, "room:1")
	publishStamps(t, nodes[0], "room:1", "a", 1, 20)
	wantStamps(t, plain, seqs(1, 20)...) // delivered after stored: node 1's store holds them

	failing.Fail(fmt.Errorf("write store file: %w", syscall.ENOSPC))
	var acking atomic.Bool
	o := spawnOwner(t, nodes[1], func(e *echopubsub.Envelope) {
		if acking.Load() {
			_, _ = nodes[1].PS.Ack(e.SessionID, e.DeliveryID)
		}
	})
	id := openSession(t, nodes[1], o, nil)
	if err := nodes[1].PS.SessionSubscribe(id, "room:1", echopubsub.WithFrom(1)); err != nil {
		t.Fatalf("SessionSubscribe WithFrom(1): %v", err)
	}
	waitEnvelopes(t, o, cfg.SoftQueue) // the catch-up waits for acks
	publishStamps(t, nodes[0], "room:1", "a", 21, 23)
	wantStamps(t, plain, seqs(1, 23)...) // node 1 delivered them to its subscribers, unstored
	test.Eventually(t, 10*time.Second, func() bool {
		h := nodes[1].PS.Health(context.Background())
		return h.Store != nil && h.Store.Unstored == 3
	}, func() string {
		return fmt.Sprintf("node 1's store health: %+v", nodes[1].PS.Health(context.Background()).Store)
	})

	seq := func() string {
		var out []string
		for _, m := range o.all() {
			switch m := m.(type) {
			case *echopubsub.Envelope:
				out = append(out, fmt.Sprintf("%d:%s", m.Cursor, stampOf(m)))
			case *echopubsub.StreamGap:
				out = append(out, fmt.Sprintf("gap%d/%d", m.Cursor, m.Missed))
			case *messages.SessionPressure:
			default:
				out = append(out, word(m))
			}
		}
		return strings.Join(out, " ")
	}
	acking.Store(true)
	for _, e := range o.envelopes() {
		_, _ = nodes[1].PS.Ack(e.SessionID, e.DeliveryID)
	}
	var stored []string
	for s := 1; s <= 20; s++ {
		stored = append(stored, fmt.Sprintf("%d:a#%d", s, s))
	}
	caughtUp := strings.Join(stored, " ") + " caughtup20"
	test.Eventually(t, 10*time.Second, func() bool { return len(o.envelopes()) >= 20 },
		func() string { return "the catch-up's 20 rows: " + seq() })
	if got := seq(); !strings.HasPrefix(caughtUp, got) && !strings.HasPrefix(got, caughtUp) {
		t.Fatalf("the WithFrom session got %q, want the stored rows in order: %q", got, caughtUp)
	}
	test.Eventually(t, 10*time.Second, func() bool { return seq() == caughtUp },
		func() string { return fmt.Sprintf("the WithFrom session got %q, want %q", seq(), caughtUp) })
	publishStamps(t, nodes[0], "room:1", "a", 24, 25) // the session is live now
	wantStamps(t, plain, seqs(1, 25)...)
	test.Eventually(t, 10*time.Second, func() bool {
		h := nodes[1].PS.Health(context.Background())
		return h.Store != nil && h.Store.Unstored == 5
	}, func() string {
		return fmt.Sprintf("node 1's store health: %+v", nodes[1].PS.Health(context.Background()).Store)
	})

	failing.Heal()
	test.Eventually(t, 10*time.Second, func() bool { return nodes[1].PS.Health(context.Background()).Store == nil },
		func() string {
			return fmt.Sprintf("node 1's store still failing: %+v", nodes[1].PS.Health(context.Background()).Store)
		})
	publishStamps(t, nodes[0], "room:1", "a", 26, 26)
	want := caughtUp + " gap21/5 22:a#26"
	test.Eventually(t, 10*time.Second, func() bool { return seq() == want },
		func() string { return fmt.Sprintf("the WithFrom session got %q, want %q", seq(), want) })
}

package echopubsub_test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub"
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

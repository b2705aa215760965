package echopubsub_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// TestWithFromHandoverNodeLocalStores: each node keeps its own store (its
// cursors are its own): a session's catch-up hands over to live with no gap
// and no duplicate while both nodes publish.
func TestWithFromHandoverNodeLocalStores(t *testing.T) {
	stores := []*test.MemStore{test.NewMemStore(), test.NewMemStore()}
	test.CatchUpHandover(t, func(i int) echopubsub.Store { return stores[i] })
}

// TestWithFromHandoverSharedStore: one store for the cluster, whose
// cursors travel with the messages (store/postgres runs the same check on
// PostgreSQL).
func TestWithFromHandoverSharedStore(t *testing.T) {
	shared := test.NewSharedMemStore()
	test.CatchUpHandover(t, func(int) echopubsub.Store { return shared })
}

// followOne starts one node with a node-local store holding n stamps of
// room:1, and a session (owner o, acking nothing by itself) subscribed to it
// WithFrom(1).
func followOne(t *testing.T, cfg echopubsub.Config, n uint64) (*test.Node, *test.MemStore, *owner, string) {
	t.Helper()
	store := test.NewMemStore()
	nd := test.StartCluster(t, 1, cfg, echopubsub.WithStore(store), echopubsub.WithDurableTopics("room:*"))[0]
	publishStamps(t, nd, "room:1", "a", 1, n)
	o := spawnOwner(t, nd, nil)
	id := openSession(t, nd, o, nil)
	if err := nd.PS.SessionSubscribe(id, "room:1", echopubsub.WithFrom(1)); err != nil {
		t.Fatalf("SessionSubscribe WithFrom(1): %v", err)
	}
	return nd, store, o, id
}

// ackEach acks each of envs.
func ackEach(t *testing.T, nd *test.Node, id string, envs []*echopubsub.Envelope) {
	t.Helper()
	for _, e := range envs {
		if _, err := nd.PS.Ack(id, e.DeliveryID); err != nil {
			t.Fatalf("ack %d: %v", e.DeliveryID, err)
		}
	}
}

// TestWithFromCatchUpWaitsAtSoftQueue: a catch-up of 200 rows to a session
// with SoftQueue 5 never takes it above 5 pending; each time it is full the
// catch-up waits (it is not skipped, not closed at HardQueue) and goes on
// when the owner acks, until every row arrived in order.
func TestWithFromCatchUpWaitsAtSoftQueue(t *testing.T) {
	cfg := replayConfig() // SoftQueue 5, HardQueue 10
	const n = 200
	nd, store, o, id := followOne(t, cfg, n)
	acked, rounds := 0, 0
	for acked < n {
		// The catch-up fills the session up to SoftQueue and waits there.
		want := min(acked+cfg.SoftQueue, n)
		test.Eventually(t, 10*time.Second, func() bool { return len(o.envelopes()) >= want },
			func() string { return fmt.Sprintf("want %d envelopes (acked %d): %s", want, acked, o.describe()) })
		if p := nd.PS.Pending(id); p > cfg.SoftQueue {
			t.Fatalf("pending %d above SoftQueue %d during the catch-up: %s", p, cfg.SoftQueue, o.describe())
		}
		envs := o.envelopes()
		if len(envs) > want {
			t.Fatalf("%d envelopes with %d acked: the catch-up went past SoftQueue %d: %s", len(envs), acked, cfg.SoftQueue, o.describe())
		}
		ackEach(t, nd, id, envs[acked:])
		acked = len(envs)
		rounds++
	}
	test.CheckFollowed(t, o.envelopes(), store, "room:1", 1, n)
	if len(o.notices()) > 0 {
		t.Fatalf("notices during a catch-up that lost nothing: %v", o.notices())
	}
	t.Logf("%d rows in %d rounds of SoftQueue %d", n, rounds, cfg.SoftQueue)
}

// TestWithFromCatchUpResumesAfterTheReservationTableWasFull: while two
// other sessions hold every reservation of the node, a catch-up gets
// nothing (its session is told RESERVATIONS_FULL), and once they ack it
// goes on from where it stopped: no row skipped.
func TestWithFromCatchUpResumesAfterTheReservationTableWasFull(t *testing.T) {
	cfg := replayConfig() // SoftQueue 5, HardQueue 10
	cfg.MaxDeliveryReservations = 10
	store := test.NewMemStore()
	nd := test.StartCluster(t, 1, cfg, echopubsub.WithStore(store), echopubsub.WithDurableTopics("room:*"))[0]
	var blockers []*owner
	var blockerIDs []string
	for i := 0; i < 2; i++ {
		b := spawnOwner(t, nd, nil)
		blockers, blockerIDs = append(blockers, b), append(blockerIDs, openSession(t, nd, b, []string{"fill"}))
	}
	for i := 0; i < cfg.SoftQueue; i++ { // each blocker holds SoftQueue: the table is full
		nd.Broadcast(t, "fill", &testpb.Stamp{Publisher: "fill", Seq: uint64(i + 1)})
	}
	for _, b := range blockers {
		waitEnvelopes(t, b, cfg.SoftQueue)
	}
	const n = 30
	publishStamps(t, nd, "room:1", "a", 1, n)
	o := spawnOwner(t, nd, nil)
	id := openSession(t, nd, o, nil)
	if err := nd.PS.SessionSubscribe(id, "room:1", echopubsub.WithFrom(1)); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 10*time.Second, func() bool { return countOf[*messages.SessionPressure](o) > 0 },
		func() string { return "RESERVATIONS_FULL notice: " + o.describe() })
	if len(o.envelopes()) > 0 {
		t.Fatalf("a delivery with the table full: %s", o.describe())
	}
	for i, b := range blockers {
		ackEach(t, nd, blockerIDs[i], b.envelopes())
	}
	acked := 0
	for acked < n {
		want := min(acked+cfg.SoftQueue, n)
		test.Eventually(t, 10*time.Second, func() bool { return len(o.envelopes()) >= want },
			func() string { return fmt.Sprintf("want %d envelopes (acked %d): %s", want, acked, o.describe()) })
		envs := o.envelopes()
		ackEach(t, nd, id, envs[acked:])
		acked = len(envs)
	}
	test.CheckFollowed(t, o.envelopes(), store, "room:1", 1, n)
}

package echopubsub_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// storedWords is store's rows of stream in cursor order, one word each
// ("a#3" for publisher a's Stamp 3, "gap(5)" for a gap row); it fails t
// unless the cursors run from 1 with no hole.
func storedWords(t *testing.T, store echopubsub.Store, stream string) []string {
	t.Helper()
	rows, _, err := store.Read(replayCtx(t), stream, 1, 1000)
	if err != nil {
		t.Fatalf("read %s: %v", stream, err)
	}
	var out []string
	for i, r := range rows {
		if r.Cursor != uint64(i+1) {
			t.Fatalf("%s: row %d has cursor %d", stream, i, r.Cursor)
		}
		if r.Kind == echopubsub.RecordGap {
			out = append(out, fmt.Sprintf("gap(%d)", r.Missed))
			continue
		}
		msg, err := messages.Decode(r.PayloadType, r.Payload)
		s, ok := msg.(*testpb.Stamp)
		if err != nil || !ok {
			t.Fatalf("%s: row %d holds %T (%v)", stream, r.Cursor, msg, err)
		}
		out = append(out, fmt.Sprintf("%s#%d", s.Publisher, s.Seq))
	}
	return out
}

// stampWords is publisher p's Stamps from..to as storedWords says them.
func stampWords(p string, from, to uint64) []string {
	var out []string
	for s := from; s <= to; s++ {
		out = append(out, fmt.Sprintf("%s#%d", p, s))
	}
	return out
}

// crashMidBatch makes nd's worker crash once (a panic; its supervisor
// restarts it) right after delivering an entry from producer node from
// that is not the last of its batch: the rest of the batch was stored
// (or, with a failing store, counted for a gap row) and not delivered,
// and the producer sends it again. The function it returns fails t when
// that never happened (no batch of more than one entry came).
func crashMidBatch(t *testing.T, nd *test.Node, from string) func() {
	var mu sync.Mutex
	end, crashed, crashedAt := uint64(0), false, uint64(0) // end: cursor after the batch being delivered
	nd.Faults.SetOnReceive(func(node string, req proto.Message) {
		if b, ok := req.(*messages.Batch); ok && node == from {
			mu.Lock()
			end = b.FirstCursor + uint64(b.Len())
			mu.Unlock()
		}
	})
	nd.Faults.SetOnDeliver(func(node string, cursor uint64) {
		mu.Lock()
		defer mu.Unlock()
		if !crashed && node == from && cursor+1 < end {
			crashed, crashedAt = true, cursor
			panic("test: worker crash mid-batch")
		}
	})
	return func() {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if !crashed {
			t.Fatalf("no batch of more than one entry reached %s: its worker never crashed mid-batch", nd.Addr)
		}
		t.Logf("%s's worker crashed after delivering cursor %d of a batch ending before %d", nd.Addr, crashedAt, end)
	}
}

// TestWorkerCrashMidBatchStoresEachMessageOnce: node 1's worker crashes in
// the middle of a batch (crashMidBatch). The whole batch was stored
// before delivery; the worker delivers the rest when it comes again with
// the rows it stored, appending none twice. Node 1's store holds each
// message once, in order, and a session resuming from its first cursor
// gets each once.
func TestWorkerCrashMidBatchStoresEachMessageOnce(t *testing.T) {
	nodes, _, stores := gapCluster(t)
	c := nodes[1].Subscribe(t, "room:1")
	crashed := crashMidBatch(t, nodes[1], nodes[0].Addr)
	const n = 50
	publishStamps(t, nodes[0], "room:1", "a", 1, n)
	wantStamps(t, c, seqs(1, n)...)
	crashed()

	store := stores.Store("node1")
	if got, want := storedWords(t, store, "room:1"), stampWords("a", 1, n); !slices.Equal(got, want) {
		t.Fatalf("node 1's store holds %v\nwant %v", got, want)
	}
	o := spawnOwner(t, nodes[1], nil)
	id := openSession(t, nodes[1], o, nil)
	if err := nodes[1].PS.SessionSubscribe(id, "room:1", echopubsub.WithFrom(1)); err != nil {
		t.Fatalf("SessionSubscribe WithFrom(1): %v", err)
	}
	waitEnvelopes(t, o, n)
	test.CheckFollowed(t, o.envelopes(), store, "room:1", 1, n)
	if got := o.seqs(); !equal(got, seqs(1, n)) {
		t.Fatalf("the session resumed from cursor 1 got %v", got)
	}
}

// TestWorkerCrashMidBatchWhileTheStoreFailsCountsEachMessageOnce: the
// same crash while node 1's store takes no writes. The rows it could not
// store are counted once for the gap row written when it recovers: the
// gap says exactly how many messages it does not hold.
func TestWorkerCrashMidBatchWhileTheStoreFailsCountsEachMessageOnce(t *testing.T) {
	cfg := replayConfig()
	cfg.SoftQueue, cfg.HardQueue = 400, 800
	nodes := test.StartCluster(t, 2, cfg)
	failing := test.NewFailingStore()
	for i, nd := range nodes {
		nd.StopPubSub(t)
		store := echopubsub.WithStore(test.NewMemStore())
		if i == 1 {
			store = echopubsub.WithStore(failing)
		}
		nd.Start(t, cfg, staticOf(addrsOf(nodes)), echopubsub.WithDurableTopics("room:*"), store)
	}
	c := nodes[1].Subscribe(t, "room:1")
	publishStamps(t, nodes[0], "room:1", "a", 1, 3)
	wantStamps(t, c, 1, 2, 3)
	failing.Fail(fmt.Errorf("write store file: %w", syscall.ENOSPC))
	crashed := crashMidBatch(t, nodes[1], nodes[0].Addr)
	const n = 50
	publishStamps(t, nodes[0], "room:1", "a", 4, 3+n)
	wantStamps(t, c, seqs(1, 3+n)...)
	crashed()
	failing.Heal()
	// The store is tried again within about a second: Health says when it
	// took the gap row.
	test.Eventually(t, 10*time.Second, func() bool { return nodes[1].PS.Health(context.Background()).Store == nil },
		func() string {
			return fmt.Sprintf("node 1's store still failing: %+v", nodes[1].PS.Health(context.Background()).Store)
		})
	publishStamps(t, nodes[0], "room:1", "a", 4+n, 4+n)
	wantStamps(t, c, seqs(1, 4+n)...)
	got, st := replayAll(t, nodes[1], nodes[0].Addr)
	if want := fmt.Sprintf("a#1 a#2 a#3 gap(%d) a#%d", n, 4+n); strings.Join(got, " ") != want || st.Missed != n {
		t.Fatalf("node 1 replayed %v (%+v); want %s", got, st, want)
	}
}

// TestJoinBelowWhatTheStoreHoldsStoresEachMessageOnce: node 1 starts again
// on its store, and node 0's producer joins it at a cursor below what that
// store already holds of it. A join may reach back before the node's
// Start (see "Joined" in the package doc: a probe answered slowly); here
// it reaches back to the first cursor, rewritten on its way. The node goes
// on from where its store got to: its store holds each message once, with
// no gap row, and a replay gets each once.
func TestJoinBelowWhatTheStoreHoldsStoresEachMessageOnce(t *testing.T) {
	nodes, start, stores := gapCluster(t)
	c := nodes[1].Subscribe(t, "room:1")
	publishStamps(t, nodes[0], "room:1", "a", 1, 3)
	wantStamps(t, c, 1, 2, 3)
	nodes[1].StopPubSub(t)
	nodes[0].Faults.SetOnSend(func(node string, req proto.Message) {
		if r, ok := req.(*messages.Register); ok && r.Join && node == nodes[1].Addr {
			r.NextCursor = 0
		}
	})
	start(1)
	publishStamps(t, nodes[0], "room:1", "a", 4, 5)
	store := stores.Store("node1")
	var got []string
	test.Eventually(t, 10*time.Second, func() bool {
		got = storedWords(t, store, "room:1")
		return len(got) > 0 && got[len(got)-1] == "a#5"
	}, func() string { return fmt.Sprintf("node 1's store holds %v, want it to end with a#5", got) })
	if want := stampWords("a", 1, 5); !slices.Equal(got, want) {
		t.Fatalf("node 1's store holds %v\nwant %v", got, want)
	}
	replayed, st := replayAll(t, nodes[1], nodes[0].Addr)
	if want := stampWords("a", 1, 5); !slices.Equal(replayed, want) || st.Gaps != 0 {
		t.Fatalf("node 1 replayed %v (%+v)\nwant %v", replayed, st, want)
	}
}

package echopubsub_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/anypb"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

func replayConfig() echopubsub.Config {
	cfg := fastConfig()
	cfg.SoftQueue, cfg.HardQueue = 5, 10
	return cfg
}

func replayCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// publishStamps broadcasts Stamp{p, from..to} on topic from nd.
func publishStamps(t *testing.T, nd *test.Node, topic, p string, from, to uint64) {
	t.Helper()
	for s := from; s <= to; s++ {
		if err := nd.PS.Broadcast(nil, topic, &testpb.Stamp{Publisher: p, Seq: s}); err != nil {
			t.Fatalf("broadcast %s#%d: %v", p, s, err)
		}
	}
}

func replay(t *testing.T, nd *test.Node, id, stream string, o echopubsub.ReplayOptions) echopubsub.ReplayStats {
	t.Helper()
	st, err := nd.PS.ReplaySession(replayCtx(t), id, stream, o)
	if err != nil {
		t.Fatalf("ReplaySession(%s, %+v): %v (stats %+v)", stream, o, err, st)
	}
	return st
}

func ackAll(t *testing.T, nd *test.Node, id string, o *owner) {
	t.Helper()
	var ids []uint64
	for _, e := range o.envelopes() {
		ids = append(ids, e.DeliveryID)
	}
	if _, err := nd.PS.AckMany(id, ids); err != nil {
		t.Fatal(err)
	}
	if p := nd.PS.Pending(id); p != 0 {
		t.Fatalf("pending %d after acking everything", p)
	}
}

// TestReplayResumesAfterPressureRefusal: a page larger than the session's
// room stops at the first refused row, and the resume cursor brings the
// next call back to exactly that row: every row once, in order.
func TestReplayResumesAfterPressureRefusal(t *testing.T) {
	nd := test.StartCluster(t, 1, replayConfig(), test.WithMemStore(),
		echopubsub.WithDurableTopics("room:*"))[0]
	publishStamps(t, nd, "room:1", "p", 1, 12)
	o := spawnOwner(t, nd, nil)
	id := openSession(t, nd, o, nil)

	st := replay(t, nd, id, "room:1", echopubsub.ReplayOptions{Limit: 50})
	want := echopubsub.ReplayStats{ResumeCursor: 6, NextCursor: 13, Delivered: 5, Dropped: 7, Stopped: true}
	if st != want {
		t.Fatalf("first page: %+v, want %+v", st, want)
	}
	waitEnvelopes(t, o, 5)
	var got []uint64
	from := st.ResumeCursor
	for round := 0; ; round++ {
		if round > 5 {
			t.Fatalf("no end after %d pages; got %v", round, got)
		}
		for _, e := range o.envelopes() {
			if !e.Replayed || e.Cursor == 0 || e.Topic != "room:1" {
				t.Fatalf("envelope %+v: want Replayed with a cursor", e)
			}
		}
		got = append(got, o.seqs()...)
		ackAll(t, nd, id, o)
		o.mu.Lock()
		o.got = nil
		o.mu.Unlock()
		st = replay(t, nd, id, "room:1", echopubsub.ReplayOptions{Limit: 50, From: from})
		if st.Delivered > 0 {
			waitEnvelopes(t, o, st.Delivered)
		}
		from = st.ResumeCursor
		if !st.Stopped {
			got = append(got, o.seqs()...)
			break
		}
	}
	if fmt.Sprint(got) != "[1 2 3 4 5 6 7 8 9 10 11 12]" {
		t.Fatalf("replayed %v, want 1..12 once each, in order", got)
	}
	if st.ResumeCursor != 13 || st.NextCursor != 13 || st.Dropped != 0 {
		t.Fatalf("last page: %+v, want resume = next = 13", st)
	}
	if n := countOf[*echopubsub.StreamGap](o); n != 0 {
		t.Fatalf("%d gap notices, want none (a false alarm)", n)
	}
}

// TestReplayStopsAtFullReservationTable: the node-wide cap refuses too,
// without closing the session.
func TestReplayStopsAtFullReservationTable(t *testing.T) {
	cfg := replayConfig()
	cfg.SoftQueue, cfg.HardQueue, cfg.MaxDeliveryReservations = 8, 10, 10
	nd := test.StartCluster(t, 1, cfg, test.WithMemStore(),
		echopubsub.WithDurableTopics("room:1"))[0]
	publishStamps(t, nd, "room:1", "p", 1, 6)
	a, b := spawnOwner(t, nd, nil), spawnOwner(t, nd, nil)
	ida, idb := openSession(t, nd, a, nil), openSession(t, nd, b, nil)
	if st := replay(t, nd, ida, "room:1", echopubsub.ReplayOptions{Limit: 6}); st.Delivered != 6 || st.Stopped {
		t.Fatalf("session a: %+v", st)
	}
	st := replay(t, nd, idb, "room:1", echopubsub.ReplayOptions{Limit: 6})
	if st.Delivered != 4 || !st.Stopped || st.ResumeCursor != 5 || st.Dropped != 2 {
		t.Fatalf("session b with 4 free reservations: %+v, want 4 delivered, stopped at 5", st)
	}
	waitEnvelopes(t, a, 6) // ackAll acks what the owner received
	ackAll(t, nd, ida, a)
	waitEnvelopes(t, b, 4)
	st = replay(t, nd, idb, "room:1", echopubsub.ReplayOptions{Limit: 6, From: st.ResumeCursor})
	if st.Delivered != 2 || st.Stopped || st.ResumeCursor != 7 {
		t.Fatalf("session b after a acked: %+v", st)
	}
	waitEnvelopes(t, b, 6)
	if fmt.Sprint(b.seqs()) != "[1 2 3 4 5 6]" {
		t.Fatalf("session b got %v", b.seqs())
	}
	if nd.PS.Pending(idb) != 6 {
		t.Fatalf("session b pending %d, want 6 (still open)", nd.PS.Pending(idb))
	}
}

// TestReplayAuthorization: a refused session gets nothing and learns
// nothing of the stream; the authorizer's error is wrapped.
func TestReplayAuthorization(t *testing.T) {
	errNo := errors.New("not a member of this room")
	var denied string
	nd := test.StartCluster(t, 1, replayConfig(), test.WithMemStore(),
		echopubsub.WithDurableTopics("room:*"),
		echopubsub.WithAuthorizer(func(sessionID, stream string) error {
			if sessionID == denied && stream == "room:secret" {
				return errNo
			}
			return nil
		}))[0]
	publishStamps(t, nd, "room:secret", "p", 1, 3)
	o := spawnOwner(t, nd, nil)
	id := openSession(t, nd, o, nil)
	denied = id // set before any replay: the authorizer runs in ReplaySession's goroutine
	st, err := nd.PS.ReplaySession(replayCtx(t), id, "room:secret", echopubsub.ReplayOptions{Limit: 10})
	if !errors.Is(err, echopubsub.ErrUnauthorized) || !errors.Is(err, errNo) {
		t.Fatalf("refused replay: err %v, want ErrUnauthorized wrapping the authorizer's error", err)
	}
	if st.Delivered != 0 || st.ResumeCursor != 1 || st.NextCursor != 1 {
		t.Fatalf("refused replay stats %+v: want nothing delivered, cursors at From", st)
	}
	other := spawnOwner(t, nd, nil)
	oid := openSession(t, nd, other, nil)
	if st := replay(t, nd, oid, "room:secret", echopubsub.ReplayOptions{Limit: 10}); st.Delivered != 3 {
		t.Fatalf("allowed session: %+v", st)
	}
	waitEnvelopes(t, other, 3)
	if len(o.envelopes()) != 0 {
		t.Fatalf("refused session received %s", o.describe())
	}
}

// TestReplayLimitsAndStreamEnds: bad limits, an empty stream, a cursor at
// and past the end, a topic that is not durable, an unknown session.
func TestReplayLimitsAndStreamEnds(t *testing.T) {
	nd := test.StartCluster(t, 1, replayConfig(), test.WithMemStore(),
		echopubsub.WithDurableTopics("room:*"))[0]
	o := spawnOwner(t, nd, nil)
	id := openSession(t, nd, o, nil)
	ctx := replayCtx(t)
	for _, l := range []int{0, -1} {
		if _, err := nd.PS.ReplaySession(ctx, id, "room:1", echopubsub.ReplayOptions{Limit: l}); !errors.Is(err, echopubsub.ErrBadLimit) ||
			!strings.Contains(err.Error(), fmt.Sprintf("Limit is %d", l)) {
			t.Fatalf("Limit %d: err %v, want ErrBadLimit naming the value", l, err)
		}
	}
	if st := replay(t, nd, id, "room:empty", echopubsub.ReplayOptions{Limit: 5}); st != (echopubsub.ReplayStats{ResumeCursor: 1, NextCursor: 1}) {
		t.Fatalf("empty stream: %+v", st)
	}
	if _, err := nd.PS.ReplaySession(ctx, id, "room:empty", echopubsub.ReplayOptions{Limit: 5, From: 2}); !errors.Is(err, echopubsub.ErrCursorBeyondEnd) {
		t.Fatalf("empty stream from 2: %v, want ErrCursorBeyondEnd", err)
	}
	publishStamps(t, nd, "room:1", "p", 1, 3)
	if st := replay(t, nd, id, "room:1", echopubsub.ReplayOptions{Limit: 2, From: 2}); st.Delivered != 2 || st.ResumeCursor != 4 || st.NextCursor != 4 {
		t.Fatalf("from 2 limit 2: %+v", st)
	}
	if st := replay(t, nd, id, "room:1", echopubsub.ReplayOptions{Limit: 2, From: 4}); st != (echopubsub.ReplayStats{ResumeCursor: 4, NextCursor: 4}) {
		t.Fatalf("from the end + 1: %+v", st)
	}
	if _, err := nd.PS.ReplaySession(ctx, id, "room:1", echopubsub.ReplayOptions{Limit: 2, From: 9}); !errors.Is(err, echopubsub.ErrCursorBeyondEnd) {
		t.Fatalf("from 9 of 3 rows: %v, want ErrCursorBeyondEnd", err)
	}
	if _, err := nd.PS.ReplaySession(ctx, id, "chat", echopubsub.ReplayOptions{Limit: 2}); !errors.Is(err, echopubsub.ErrNoStore) {
		t.Fatalf("topic not durable: %v, want ErrNoStore", err)
	}
	if _, err := nd.PS.ReplaySession(ctx, "nope", "room:1", echopubsub.ReplayOptions{Limit: 2}); !errors.Is(err, echopubsub.ErrUnknownSession) ||
		!strings.Contains(err.Error(), `unknown session "nope"`) {
		t.Fatalf("unknown session: %v, want ErrUnknownSession naming the id", err)
	}
	if err := nd.PS.CloseSession("nope"); !errors.Is(err, echopubsub.ErrUnknownSession) || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("CloseSession of an unknown session: %v, want ErrUnknownSession naming the id", err)
	}
	waitEnvelopes(t, o, 2)
	if fmt.Sprint(o.seqs()) != "[2 3]" {
		t.Fatalf("session got %v, want [2 3]", o.seqs())
	}
}

// TestReplaySurfacesGaps: a gap row reaches the session as a *StreamGap, in
// stream order, and is counted; a page refused before it leaves it for the
// next call.
func TestReplaySurfacesGaps(t *testing.T) {
	store := test.NewMemStore()
	t.Cleanup(func() { _ = store.Close() })
	nd := test.StartCluster(t, 1, replayConfig(), echopubsub.WithStore(store), echopubsub.WithDurableTopics("room:1"))[0]
	publishStamps(t, nd, "room:1", "p", 1, 2)
	if err := store.Append(replayCtx(t), []echopubsub.Record{{Stream: "room:1", Kind: echopubsub.RecordGap, Origin: "other:1",
		Missed: 4, Reason: "cursor expired"}}); err != nil {
		t.Fatal(err)
	}
	publishStamps(t, nd, "room:1", "p", 3, 3)
	o := spawnOwner(t, nd, nil)
	id := openSession(t, nd, o, nil)
	st := replay(t, nd, id, "room:1", echopubsub.ReplayOptions{Limit: 10})
	if st.Delivered != 3 || st.Gaps != 1 || st.Missed != 4 || st.ResumeCursor != 5 || st.Dropped != 0 {
		t.Fatalf("stats %+v: want 3 delivered, 1 gap of 4, resume 5", st)
	}
	waitEnvelopes(t, o, 3)
	if got := o.describe(); got != "d1(p#1) d2(p#2) *echopubsub.StreamGap d3(p#3) " {
		t.Fatalf("owner got %q: want the gap between rows 2 and 4", got)
	}
	for _, m := range o.all() {
		if g, ok := m.(*echopubsub.StreamGap); ok && (g.Cursor != 3 || g.Node != "other:1" || g.Missed != 4 || g.SessionID != id || g.Stream != "room:1") {
			t.Fatalf("gap notice %+v", g)
		}
	}
}

// TestDurableBroadcastFailsWhenTheAppendFails: nothing is broadcast.
func TestDurableBroadcastFailsWhenTheAppendFails(t *testing.T) {
	store := test.NewMemStore()
	nd := test.StartCluster(t, 1, replayConfig(), echopubsub.WithStore(store), echopubsub.WithDurableTopics("room:1"))[0]
	c := nd.Subscribe(t, "room:1")
	c2 := nd.Subscribe(t, "chat")
	if err := store.Close(); err != nil { // every append fails from here
		t.Fatal(err)
	}
	if err := nd.PS.Broadcast(nil, "room:1", stamp(1)); !errors.Is(err, echopubsub.ErrStoreClosed) {
		t.Fatalf("durable broadcast with a failing store: %v, want the append's error", err)
	}
	// The marker follows on the same producer (sender nil): had the failed
	// broadcast been queued, it would have arrived first.
	nd.Broadcast(t, "chat", stamp(2))
	wantStamps(t, c2, 2)
	if c.Len() != 0 {
		t.Fatalf("subscriber of the durable topic got %s", c.Describe())
	}
}

// TestReplayAfterFullClusterRestart: both nodes publish durable
// messages; each node's store holds what it published and what it received
// (appended by its worker before acknowledging each batch). Every node
// stops gracefully, every node starts again on its own store, and a session
// on each node replays all 40, each publisher's in order, with no gap row:
// a restart that lost nothing raises no alarm.
func TestReplayAfterFullClusterRestart(t *testing.T) {
	cfg := replayConfig()
	cfg.SoftQueue, cfg.HardQueue = 50, 100
	nodes := test.StartCluster(t, 2, cfg)
	stores := test.NewStores(t)
	start := func() {
		for i, nd := range nodes {
			nd.Start(t, cfg, staticOf(addrsOf(nodes)), echopubsub.WithDurableTopics("room:*"),
				stores.Option(fmt.Sprint("node", i)))
		}
	}
	// StartCluster gives every node the same options: restart each on its
	// own store instead (the static membership lists both nodes).
	for _, nd := range nodes {
		nd.StopPubSub(t)
	}
	start()
	publishStamps(t, nodes[0], "room:1", "a", 1, 20)
	publishStamps(t, nodes[1], "room:1", "b", 1, 20)
	for i, nd := range nodes { // each node received the other's 20 (and stored them before acking)
		c := nd.Subscribe(t, "room:2")
		nodes[1-i].Broadcast(t, "room:2", stamp(1)) // a marker behind the 20, on the same producer
		wantStamps(t, c, 1)
	}
	for _, nd := range nodes {
		nd.StopPubSub(t)
	}
	start()
	// A gap row would be written when the other node's producer joins:
	// wait for the joins, so that one would be in the replay below.
	test.WaitJoined(t, nodes)
	for i, nd := range nodes {
		o := spawnOwner(t, nd, nil)
		id := openSession(t, nd, o, nil)
		st := replay(t, nd, id, "room:1", echopubsub.ReplayOptions{Limit: 25})
		st2 := replay(t, nd, id, "room:1", echopubsub.ReplayOptions{Limit: 25, From: st.ResumeCursor})
		if st.Delivered+st2.Delivered != 40 || st2.Stopped || st.Gaps+st2.Gaps != 0 || st2.ResumeCursor != 41 || st2.NextCursor != 41 {
			t.Fatalf("node %d after the restart: %+v then %+v; want 40 rows, no gap", i, st, st2)
		}
		waitEnvelopes(t, o, 40)
		last := map[string]uint64{}
		for _, e := range o.envelopes() {
			s := e.Event.(*testpb.Stamp)
			if s.Seq != last[s.Publisher]+1 {
				t.Fatalf("node %d: %s#%d after #%d: %s", i, s.Publisher, s.Seq, last[s.Publisher], o.describe())
			}
			last[s.Publisher] = s.Seq
		}
		if last["a"] != 20 || last["b"] != 20 {
			t.Fatalf("node %d replayed %v", i, last)
		}
	}
}

func addrsOf(nodes []*test.Node) []string {
	var out []string
	for _, nd := range nodes {
		out = append(out, nd.Addr)
	}
	return out
}

// TestDurableBroadcastPaths: every broadcast path of a durable topic is
// appended (Broadcast, BroadcastFrom, BroadcastContext, a Broadcast sent to
// PID), and DirectBroadcast and LocalBroadcast are not.
func TestDurableBroadcastPaths(t *testing.T) {
	nd := test.StartCluster(t, 1, replayConfig(), test.WithMemStore(),
		echopubsub.WithDurableTopics("room:1"))[0]
	c := nd.Subscribe(t, "room:1")
	ps := nd.PS
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	must("Broadcast", ps.Broadcast(nil, "room:1", stamp(1)))
	must("BroadcastFrom", ps.BroadcastFrom(c.PID, "room:1", stamp(2))) // c is excluded live, not from the stream
	must("BroadcastContext", ps.BroadcastContext(replayCtx(t), nil, "room:1", stamp(3)))
	must("DirectBroadcast", ps.DirectBroadcast(nd.Addr, "room:1", stamp(100)))
	must("LocalBroadcast", ps.LocalBroadcast("room:1", stamp(101)))
	body, err := anypb.New(stamp(4))
	must("anypb", err)
	res, err := nd.System.Root.RequestFuture(ps.PID(), &messages.Broadcast{Topic: "room:1", Message: body}, 5*time.Second).Result()
	must("PID Broadcast", err)
	if e := res.(*messages.BroadcastResult).Error; e != "" {
		t.Fatalf("PID Broadcast: %s", e)
	}
	o := spawnOwner(t, nd, nil)
	id := openSession(t, nd, o, nil)
	st := replay(t, nd, id, "room:1", echopubsub.ReplayOptions{Limit: 10})
	waitEnvelopes(t, o, st.Delivered)
	if fmt.Sprint(o.seqs()) != "[1 2 3 4]" {
		t.Fatalf("stream holds %v, want [1 2 3 4] (not the direct or local ones)", o.seqs())
	}
}

package echopubsub_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/test"
)

func retentionConfig() echopubsub.Config {
	cfg := replayConfig()
	cfg.SoftQueue, cfg.HardQueue = 50, 100
	cfg.RetentionInterval = 20 * time.Millisecond
	return cfg
}

// firstKept is the first cursor store keeps of stream (its end + 1 when
// it keeps none).
func firstKept(t *testing.T, store echopubsub.Store, stream string) uint64 {
	t.Helper()
	recs, next, err := store.Read(context.Background(), stream, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) > 0 {
		return recs[0].Cursor
	}
	return next
}

// wantTruncatedThenRows checks what o got from one replay page: a
// *StreamTruncated{id, stream, from, kept} first, then the stamps want.
func wantTruncatedThenRows(t *testing.T, o *owner, id, stream string, from, kept uint64, want []uint64) {
	t.Helper()
	test.Eventually(t, 5*time.Second, func() bool { return len(o.all()) == 1+len(want) },
		test.Sprintf("want a StreamTruncated and %d envelopes", len(want)))
	got := o.all()
	tr, ok := got[0].(*echopubsub.StreamTruncated)
	if wantTr := (echopubsub.StreamTruncated{SessionID: id, Stream: stream, From: from, FirstKept: kept}); !ok || *tr != wantTr {
		t.Fatalf("first message %#v, want %+v: %s", got[0], wantTr, o.describe())
	}
	if fmt.Sprint(o.seqs()) != fmt.Sprint(want) {
		t.Fatalf("after the notice: stamps %v, want %v", o.seqs(), want)
	}
	for _, e := range o.envelopes() {
		if e.Cursor < kept {
			t.Fatalf("envelope with cursor %d below FirstKept %d", e.Cursor, kept)
		}
	}
}

// TestRetentionTrimsARunningPubSub: WithRetention on a running pubsub trims
// its stream (at Start and every RetentionInterval), and a replay from a
// trimmed cursor gets StreamTruncated first, then the rows from FirstKept;
// a replay from a kept cursor gets no notice (no false alarm).
func TestRetentionTrimsARunningPubSub(t *testing.T) {
	store := test.NewMemStore()
	nd := test.StartCluster(t, 1, retentionConfig(), echopubsub.WithStore(store),
		echopubsub.WithDurableTopics("room:*"), echopubsub.WithRetention(echopubsub.Retention{MaxRows: 5}))[0]
	publishStamps(t, nd, "room:1", "p", 1, 12)
	test.Eventually(t, 5*time.Second, func() bool { return firstKept(t, store, "room:1") == 8 },
		func() string {
			return fmt.Sprintf("first kept %d, want 8 (12 rows, MaxRows 5)", firstKept(t, store, "room:1"))
		})
	// Trimming goes on: 3 more rows move the first kept to 11.
	publishStamps(t, nd, "room:1", "p", 13, 15)
	test.Eventually(t, 5*time.Second, func() bool { return firstKept(t, store, "room:1") == 11 },
		func() string { return fmt.Sprintf("first kept %d, want 11", firstKept(t, store, "room:1")) })

	o := spawnOwner(t, nd, nil)
	id := openSession(t, nd, o, nil)
	st := replay(t, nd, id, "room:1", echopubsub.ReplayOptions{Limit: 50, From: 3})
	want := echopubsub.ReplayStats{ResumeCursor: 16, NextCursor: 16, Delivered: 5, Truncated: true, FirstKept: 11}
	if st != want {
		t.Fatalf("replay from 3: %+v, want %+v", st, want)
	}
	wantTruncatedThenRows(t, o, id, "room:1", 3, 11, []uint64{11, 12, 13, 14, 15})

	o2 := spawnOwner(t, nd, nil)
	id2 := openSession(t, nd, o2, nil)
	if st := replay(t, nd, id2, "room:1", echopubsub.ReplayOptions{Limit: 50, From: 12}); st.Truncated || st.Delivered != 4 {
		t.Fatalf("replay from a kept cursor: %+v, want 4 rows and no truncation", st)
	}
	waitEnvelopes(t, o2, 4)
	if n := countOf[*echopubsub.StreamTruncated](o2); n != 0 {
		t.Fatalf("a replay from a kept cursor was told StreamTruncated %d times (a false alarm)", n)
	}
}

// TestReplayFromTrimmedCursorIsTold: the replay side alone, on a store
// trimmed by hand: a cursor below the first kept (0 included: the
// stream's start) is told, a fully trimmed stream too (no rows, FirstKept
// its end + 1), and the resume cursor never goes back below FirstKept.
func TestReplayFromTrimmedCursorIsTold(t *testing.T) {
	store := test.NewMemStore()
	nd := test.StartCluster(t, 1, retentionConfig(), echopubsub.WithStore(store), echopubsub.WithDurableTopics("room:*"))[0]
	publishStamps(t, nd, "room:1", "p", 1, 10)
	publishStamps(t, nd, "room:2", "p", 1, 4)
	if _, err := store.Trim(context.Background(), echopubsub.Retention{MaxRows: 3}); err != nil {
		t.Fatal(err)
	}
	for _, from := range []uint64{0, 1, 7} {
		o := spawnOwner(t, nd, nil)
		id := openSession(t, nd, o, nil)
		st := replay(t, nd, id, "room:1", echopubsub.ReplayOptions{Limit: 2, From: from})
		want := echopubsub.ReplayStats{ResumeCursor: 10, NextCursor: 10, Delivered: 2, Truncated: true, FirstKept: 8}
		if st != want {
			t.Fatalf("replay from %d: %+v, want %+v", from, st, want)
		}
		wantTruncatedThenRows(t, o, id, "room:1", max(from, 1), 8, []uint64{8, 9})
	}
	// Every row of room:2 gone: the notice, no row, resume at its end + 1.
	if _, err := store.Trim(context.Background(), echopubsub.Retention{MaxBytes: 1}); err != nil {
		t.Fatal(err)
	}
	o := spawnOwner(t, nd, nil)
	id := openSession(t, nd, o, nil)
	st := replay(t, nd, id, "room:2", echopubsub.ReplayOptions{Limit: 5, From: 2})
	if want := (echopubsub.ReplayStats{ResumeCursor: 5, NextCursor: 5, Truncated: true, FirstKept: 5}); st != want {
		t.Fatalf("replay of a fully trimmed stream: %+v, want %+v", st, want)
	}
	wantTruncatedThenRows(t, o, id, "room:2", 2, 5, nil)
	if st := replay(t, nd, id, "room:2", echopubsub.ReplayOptions{Limit: 5, From: st.ResumeCursor}); st.Truncated {
		t.Fatalf("replay from the resume cursor: %+v, a second notice", st)
	}
	if n := countOf[*echopubsub.StreamTruncated](o); n != 1 {
		t.Fatalf("%d StreamTruncated, want exactly 1: %s", n, o.describe())
	}
}

// plainStore is a Store that cannot trim.
type plainStore struct{ echopubsub.Store }

// TestRetentionStartErrors: Start refuses a Retention it cannot keep, and
// says which limit and which store.
func TestRetentionStartErrors(t *testing.T) {
	system, r := test.StartRemote(t, test.Logger(t, zerolog.WarnLevel))
	t.Cleanup(func() { r.Shutdown(false); system.Shutdown() })
	start := func(opts ...echopubsub.Option) error {
		return call(func() error {
			ps, err := echopubsub.Start(system, fastConfig(), opts...)
			if err == nil {
				_ = ps.Stop(context.Background())
			}
			return err
		})
	}
	wantErr(t, "negative MaxAge", start(echopubsub.WithStore(test.NewMemStore()),
		echopubsub.WithRetention(echopubsub.Retention{MaxAge: -time.Second})), "MaxAge", "-1s")
	wantErr(t, "no store", start(echopubsub.WithRetention(echopubsub.Retention{MaxRows: 3})), "WithRetention", "MaxRows 3", "WithStore")
	wantErr(t, "store that cannot trim", start(echopubsub.WithStore(plainStore{test.NewMemStore()}),
		echopubsub.WithRetention(echopubsub.Retention{MaxBytes: 9})), "MaxBytes 9", "plainStore", "Trimmer")
	if err := start(echopubsub.WithStore(plainStore{test.NewMemStore()}), echopubsub.WithRetention(echopubsub.Retention{})); err != nil {
		t.Fatalf("the zero Retention with a store that cannot trim: %v", err)
	}
}

// blockingTrimmer is a MemStore whose Trim waits for its context to end.
type blockingTrimmer struct {
	*test.MemStore
	entered  chan struct{}
	returned atomic.Bool
}

func (b *blockingTrimmer) Trim(ctx context.Context, _ echopubsub.Retention) ([]echopubsub.Trimmed, error) {
	select {
	case b.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	b.returned.Store(true)
	return nil, ctx.Err()
}

// TestRetentionStopLeavesNoGoroutines: the trimming goroutine belongs to
// the pubsub: Stop cancels a trim under way, waits for it (no store call
// after Stop: the caller may close the store), and ends the goroutine.
func TestRetentionStopLeavesNoGoroutines(t *testing.T) {
	log := test.Logger(t, 0)
	system, r := test.StartRemote(t, log)
	defer func() { r.Shutdown(false); system.Shutdown() }()
	before := goleak.IgnoreCurrent()
	store := &blockingTrimmer{MemStore: test.NewMemStore(), entered: make(chan struct{}, 1)}
	ps, err := echopubsub.Start(system, retentionConfig(), echopubsub.WithLogger(log), echopubsub.WithStore(store),
		echopubsub.WithDurableTopics("room"), echopubsub.WithRetention(echopubsub.Retention{MaxRows: 1}))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-store.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("no trim within 5s of Start")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ps.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if !store.returned.Load() {
		t.Fatal("Stop returned while a trim was still running")
	}
	test.VerifyNoLeaks(t, before)
}

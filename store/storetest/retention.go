package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store"
)

// sized is a message row of stream with an n-byte payload.
func sized(stream string, n int) echopubsub.Record {
	r := msg(stream, 0)
	r.Payload = bytes.Repeat([]byte{'p'}, n)
	return r
}

func appendAll(t *testing.T, s echopubsub.Store, recs []echopubsub.Record) {
	t.Helper()
	if err := s.Append(ctx(t), recs); err != nil {
		t.Fatal(err)
	}
}

func trim(t *testing.T, s echopubsub.Store, r echopubsub.Retention) map[string]echopubsub.Trimmed {
	t.Helper()
	got, err := s.(echopubsub.Trimmer).Trim(ctx(t), r)
	if err != nil {
		t.Fatalf("Trim(%+v): %v", r, err)
	}
	out := map[string]echopubsub.Trimmed{}
	for _, tr := range got {
		if _, dup := out[tr.Stream]; dup || tr.Rows == 0 {
			t.Fatalf("Trim(%+v) reported %+v: a stream twice, or one with no row removed", r, got)
		}
		out[tr.Stream] = tr
	}
	return out
}

// wantKept checks that stream keeps exactly the cursors first..end, that
// Read from any removed cursor (0 included) returns the first kept row
// (or, with none kept, no row and next end + 1), and that a cursor past
// end + 1 is still ErrCursorBeyondEnd.
func wantKept(t *testing.T, s echopubsub.Store, stream string, first, end uint64) {
	t.Helper()
	all, next := read(t, s, stream, first, int(end-first)+10)
	if len(all) != int(end-first+1) || next != end+1 || (len(all) > 0 && all[0].Cursor != first) {
		t.Fatalf("%s from %d: cursors %v next %d; want %d..%d kept", stream, first, cursors(all), next, first, end)
	}
	for _, from := range []uint64{0, 1, first - 1} {
		if from >= first {
			continue
		}
		recs, next := read(t, s, stream, from, 1)
		switch {
		case first <= end && (len(recs) != 1 || recs[0].Cursor != first || next != first+1):
			t.Fatalf("%s from removed cursor %d: %v next %d; want the first kept row %d", stream, from, cursors(recs), next, first)
		case first > end && (len(recs) != 0 || next != end+1):
			t.Fatalf("%s (every row removed) from %d: %v next %d; want no row, next %d", stream, from, cursors(recs), next, end+1)
		}
	}
	if _, _, err := s.Read(ctx(t), stream, end+2, 1); !errors.Is(err, echopubsub.ErrCursorBeyondEnd) {
		t.Fatalf("%s from %d (end %d): err %v, want ErrCursorBeyondEnd", stream, end+2, end, err)
	}
}

// runRetention is the Trimmer part of the suite.
func runRetention(t *testing.T, h Harness, open func(t *testing.T) echopubsub.Store) {
	trimmer := func(t *testing.T) echopubsub.Store {
		s := open(t)
		if _, ok := s.(echopubsub.Trimmer); !ok {
			t.Skipf("%T does not implement echopubsub.Trimmer: no retention", s)
		}
		return s
	}
	t.Run("AppendSetsTime", func(t *testing.T) {
		s := trimmer(t)
		before := time.Now().Add(-time.Millisecond)
		given := time.Date(2020, 1, 2, 3, 4, 5, 6000, time.UTC)
		recs := []echopubsub.Record{msg("t", 1), msg("t", 2)}
		recs[1].Time = given
		appendAll(t, s, recs)
		after := time.Now().Add(time.Millisecond)
		got, _ := read(t, s, "t", 0, 5)
		if len(got) != 2 || got[0].Time.Before(before) || got[0].Time.After(after) || !recs[0].Time.Equal(got[0].Time) {
			t.Fatalf("stamped Time: read %v, Append set %v; want between %v and %v", got[0].Time, recs[0].Time, before, after)
		}
		if !got[1].Time.Equal(given) {
			t.Fatalf("given Time %v read back as %v", given, got[1].Time)
		}
	})
	t.Run("RetentionMaxRows", func(t *testing.T) {
		s := trimmer(t)
		var a []echopubsub.Record
		for i := 1; i <= 10; i++ {
			a = append(a, sized("a", i))
		}
		appendAll(t, s, a)
		appendAll(t, s, []echopubsub.Record{msg("b", 1), msg("b", 2), msg("b", 3)})
		got := trim(t, s, echopubsub.Retention{MaxRows: 4})
		if want := (echopubsub.Trimmed{Stream: "a", Rows: 6, Bytes: 1 + 2 + 3 + 4 + 5 + 6, FirstKept: 7}); len(got) != 1 || got["a"] != want {
			t.Fatalf("Trim MaxRows 4: %+v, want only %+v", got, want)
		}
		wantKept(t, s, "a", 7, 10)
		wantKept(t, s, "b", 1, 3)
		if again := trim(t, s, echopubsub.Retention{MaxRows: 4}); len(again) != 0 {
			t.Fatalf("a second Trim removed %+v", again)
		}
		if none := trim(t, s, echopubsub.Retention{}); len(none) != 0 {
			t.Fatalf("the zero Retention removed %+v", none)
		}
		more := []echopubsub.Record{msg("a", 11)}
		appendAll(t, s, more)
		if more[0].Cursor != 11 {
			t.Fatalf("append after trim: cursor %d, want 11", more[0].Cursor)
		}
	})
	t.Run("RetentionMaxBytes", func(t *testing.T) {
		s := trimmer(t)
		var recs []echopubsub.Record
		for i := 0; i < 10; i++ {
			recs = append(recs, sized("m", 100))
		}
		recs = append(recs, echopubsub.Record{Stream: "m", Kind: echopubsub.RecordGap, Origin: "node-b:2", Reason: "r"})
		appendAll(t, s, recs)
		// From the newest: the gap row (no payload), then 100 bytes each:
		// 350 keeps rows 8..11.
		got := trim(t, s, echopubsub.Retention{MaxBytes: 350})
		if want := (echopubsub.Trimmed{Stream: "m", Rows: 7, Bytes: 700, FirstKept: 8}); got["m"] != want {
			t.Fatalf("Trim MaxBytes 350: %+v, want %+v", got, want)
		}
		wantKept(t, s, "m", 8, 11)
		if got := trim(t, s, echopubsub.Retention{MaxBytes: 300}); len(got) != 0 {
			t.Fatalf("Trim MaxBytes 300 with 300 bytes kept: %+v, want nothing", got)
		}
	})
	t.Run("RetentionMaxAge", func(t *testing.T) {
		s := trimmer(t)
		now := time.Now().UTC()
		var recs []echopubsub.Record
		for i, age := range []time.Duration{3 * time.Hour, 2 * time.Hour, 2 * time.Hour, 30 * time.Minute, 20 * time.Minute, 0} {
			r := sized("g", i+1)
			if age > 0 {
				r.Time = now.Add(-age)
			}
			recs = append(recs, r)
		}
		appendAll(t, s, recs)
		got := trim(t, s, echopubsub.Retention{MaxAge: time.Hour})
		if want := (echopubsub.Trimmed{Stream: "g", Rows: 3, Bytes: 1 + 2 + 3, FirstKept: 4}); got["g"] != want {
			t.Fatalf("Trim MaxAge 1h: %+v, want %+v", got, want)
		}
		wantKept(t, s, "g", 4, 6)
		// The limits together: the highest cut of the three wins.
		got = trim(t, s, echopubsub.Retention{MaxAge: 25 * time.Minute, MaxRows: 3, MaxBytes: 1 << 20})
		if want := (echopubsub.Trimmed{Stream: "g", Rows: 1, Bytes: 4, FirstKept: 5}); got["g"] != want {
			t.Fatalf("Trim MaxAge 25m: %+v, want %+v", got, want)
		}
		wantKept(t, s, "g", 5, 6)
	})
	t.Run("RetentionFullyTrimmedAndReopen", func(t *testing.T) {
		s := h.Open(t)
		if _, ok := s.(echopubsub.Trimmer); !ok {
			_ = s.Close()
			t.Skipf("%T does not implement echopubsub.Trimmer", s)
		}
		var recs []echopubsub.Record
		for i := 0; i < 5; i++ {
			recs = append(recs, sized("f", 10))
		}
		appendAll(t, s, recs)
		appendAll(t, s, []echopubsub.Record{sized("k", 1)})
		got := trim(t, s, echopubsub.Retention{MaxBytes: 5})
		if want := (echopubsub.Trimmed{Stream: "f", Rows: 5, Bytes: 50, FirstKept: 6}); len(got) != 1 || got["f"] != want {
			t.Fatalf("Trim MaxBytes 5: %+v, want only %+v", got, want)
		}
		wantKept(t, s, "f", 6, 5)
		s = h.Reopen(t, s)
		t.Cleanup(func() { _ = s.Close() })
		// The stream's end outlives its rows: no cursor is handed out twice.
		wantKept(t, s, "f", 6, 5)
		wantKept(t, s, "k", 1, 1)
		more := []echopubsub.Record{sized("f", 1)}
		appendAll(t, s, more)
		if more[0].Cursor != 6 {
			t.Fatalf("append to a fully trimmed stream after reopen: cursor %d, want 6", more[0].Cursor)
		}
		wantKept(t, s, "f", 6, 6)
	})
	t.Run("RetentionKeepsGapRowsAndPositions", func(t *testing.T) {
		s := trimmer(t)
		l, ok := s.(store.LocalStore)
		if !ok {
			t.Skipf("%T is not a node-local store with gap rows", s)
		}
		pos := store.ProducerPosition{Node: "node-b:2", Group: 0, Incarnation: 7, Next: 42}
		if err := l.AppendAt(ctx(t), []echopubsub.Record{sized("p", 10), sized("p", 10)}, pos); err != nil {
			t.Fatal(err)
		}
		trim(t, s, echopubsub.Retention{MaxRows: 1})
		trim(t, s, echopubsub.Retention{MaxBytes: 1}) // every row of p gone
		wantKept(t, s, "p", 3, 2)
		got, found, err := l.Position(ctx(t), pos.Node, pos.Group)
		if err != nil || !found || got != pos {
			t.Fatalf("position after trim: %+v found %v err %v; want %+v", got, found, err, pos)
		}
		pos.Next = 50
		if err := l.MarkGap(ctx(t), echopubsub.Record{Origin: pos.Node, Missed: 8, Reason: "lost"}, pos); err != nil {
			t.Fatal(err)
		}
		recs, next := read(t, s, "p", 0, 5)
		if len(recs) != 1 || recs[0].Cursor != 3 || recs[0].Kind != echopubsub.RecordGap || recs[0].Missed != 8 || next != 4 {
			t.Fatalf("gap row in a fully trimmed stream: %+v next %d; want one gap row at cursor 3", recs, next)
		}
		if got, _, _ := l.Position(ctx(t), pos.Node, pos.Group); got != pos {
			t.Fatalf("position after MarkGap: %+v, want %+v", got, pos)
		}
	})
	t.Run("RetentionAgreesWithCut", func(t *testing.T) { agreesWithCut(t, trimmer(t)) })
	t.Run("RetentionConcurrentWithAppends", func(t *testing.T) {
		s := trimmer(t)
		const seed, writers, each, keep = 20_000, 4, 100, 50
		batch := make([]echopubsub.Record, 0, 1000)
		for i := 0; i < seed; i++ {
			batch = append(batch, sized("c", 16))
			if len(batch) == cap(batch) {
				appendAll(t, s, batch)
				batch = batch[:0]
			}
		}
		// One large trim (seed rows), then more while the writers append;
		// a reader pages through: every page is contiguous, its first row
		// at from or above (rows below were removed), never below.
		stop := make(chan struct{})
		errs := make(chan error, writers+2)
		var latMu sync.Mutex
		var lat []time.Duration
		var removed atomic.Uint64
		var wg, bg sync.WaitGroup
		bg.Add(2)
		go func() {
			defer bg.Done()
			for {
				got, err := s.(echopubsub.Trimmer).Trim(context.Background(), echopubsub.Retention{MaxRows: keep})
				if err != nil {
					errs <- err
					return
				}
				for _, tr := range got {
					removed.Add(tr.Rows)
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
		go func() { defer bg.Done(); pageThrough(s, "c", true, stop, errs) }()
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < each; i++ {
					start := time.Now()
					if err := s.Append(context.Background(), []echopubsub.Record{sized("c", 16)}); err != nil {
						errs <- err
						return
					}
					latMu.Lock()
					lat = append(lat, time.Since(start))
					latMu.Unlock()
				}
			}()
		}
		wg.Wait()
		close(stop)
		bg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		final := trim(t, s, echopubsub.Retention{MaxRows: keep})
		total := uint64(seed + writers*each)
		removed.Add(final["c"].Rows)
		if removed.Load() != total-keep {
			t.Fatalf("trims removed %d rows in all, want %d", removed.Load(), total-keep)
		}
		wantKept(t, s, "c", total-keep+1, total)
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		t.Logf("%T: %d appends while trimming %d rows: latency p50 %v, p99 %v, max %v", s, len(lat), seed,
			lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1])
	})
}

// UntimedRows checks the Trimmer rule for rows a store wrote before rows
// carried their append time, on s whose streams "legacy" and "mixed" each
// hold three such rows, copies of old (the backend's test writes them as
// the store did then): they read back in order with the zero Time and
// old's fields, and MaxAge removes them only together with a later timed
// row that is too old, never on their own.
func UntimedRows(t *testing.T, s echopubsub.Store, old echopubsub.Record) {
	t.Helper()
	recs, next := read(t, s, "legacy", 0, 10)
	if len(recs) != 3 || next != 4 || recs[2].Cursor != 3 || !recs[0].Time.IsZero() || !bytes.Equal(recs[2].Payload, old.Payload) ||
		recs[1].Origin != old.Origin || recs[1].PayloadType != old.PayloadType {
		t.Fatalf("rows without a time: %+v next %d", recs, next)
	}
	tooOld, fresh := old, old
	tooOld.Stream, tooOld.Time, fresh.Stream = "mixed", time.Now().Add(-2*time.Hour), "mixed"
	appendAll(t, s, []echopubsub.Record{tooOld, fresh})
	got := trim(t, s, echopubsub.Retention{MaxAge: time.Hour})
	want := echopubsub.Trimmed{Stream: "mixed", Rows: 4, Bytes: 4 * uint64(len(old.Payload)), FirstKept: 5}
	if len(got) != 1 || got["mixed"] != want {
		t.Fatalf("Trim MaxAge 1h: %+v, want only %+v (untimed rows alone never go for their age)", got, want)
	}
	wantKept(t, s, "legacy", 1, 3)
	wantKept(t, s, "mixed", 5, 5)
}

// agreesWithCut: what Trim removes is what the one rule says
// (store.Retention.CutHeld, applied here to the rows Read returns), for
// random streams (payload sizes, gap rows, append times a minute apart),
// random retentions and, on a store.ConsumerStore, random named
// consumers. store/postgres decides in SQL: this is where
// its SQL is held to the rule.
func agreesWithCut(t *testing.T, s echopubsub.Store) {
	rng := rand.New(rand.NewPCG(38, 4))
	hold := rand.New(rand.NewPCG(40, 4)) // consumers: apart, so rng draws what it drew before
	for round := 0; round < 20; round++ {
		stream := fmt.Sprintf("cut%d", round)
		n := 1 + rng.IntN(40)
		base := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
		recs := make([]echopubsub.Record, n)
		for i := range recs {
			recs[i] = sized(stream, rng.IntN(50))
			if rng.IntN(5) == 0 {
				recs[i] = echopubsub.Record{Stream: stream, Kind: echopubsub.RecordGap, Origin: "node-b:2", Missed: 3, Reason: "lost"}
			}
			recs[i].Time = base.Add(time.Duration(i) * time.Minute)
		}
		appendAll(t, s, recs)
		var r echopubsub.Retention
		for r == (echopubsub.Retention{}) {
			if rng.IntN(2) == 0 {
				r.MaxRows = uint64(rng.IntN(n + 5))
			}
			if rng.IntN(2) == 0 {
				r.MaxBytes = uint64(rng.IntN(25 * n))
			}
			if rng.IntN(2) == 0 {
				// Half a minute off every row's age: the store's clock
				// at Trim and this one's never straddle a row.
				r.MaxAge = time.Duration(rng.IntN(70))*time.Minute + 30*time.Second
			}
		}
		rows, _ := read(t, s, stream, 0, n+10)
		first, end := rows[0].Cursor, rows[len(rows)-1].Cursor
		walk := func(down bool) func(func(store.TrimRow) bool) {
			return func(yield func(store.TrimRow) bool) {
				for i := range rows {
					row := rows[i]
					if down {
						row = rows[len(rows)-1-i]
					}
					if !yield(store.TrimRow{Cursor: row.Cursor, Time: row.Time, Bytes: uint64(len(row.Payload))}) {
						return
					}
				}
			}
		}
		held := holdSome(t, s, stream, first, end, hold)
		want := r.CutHeld(time.Now(), first, end, held, walk(false), walk(true))
		got := trim(t, s, r)[stream]
		switch {
		case want < first && got.Rows != 0:
			t.Fatalf("round %d: Trim(%v) of %s (cursors %d..%d, consumers hold %d) removed %+v; store.Retention.CutHeld removes none", round, r, stream, first, end, held, got)
		case want >= first && (got.FirstKept != want+1 || got.Rows != want-first+1):
			t.Fatalf("round %d: Trim(%v) of %s (cursors %d..%d, consumers hold %d) removed %+v; store.Retention.CutHeld removes up to cursor %d", round, r, stream, first, end, held, got, want)
		}
		if want >= first {
			wantKept(t, s, stream, want+1, end)
		}
	}
}

// holdSome commits, on a store.ConsumerStore, zero to two consumers of
// stream at random cursors of first-1..end, and returns what they hold
// (store.Held; NoHold: none).
func holdSome(t *testing.T, s echopubsub.Store, stream string, first, end uint64, rng *rand.Rand) uint64 {
	t.Helper()
	cs, ok := s.(store.ConsumerStore)
	if !ok {
		return store.NoHold
	}
	for i := rng.IntN(3); i > 0; i-- {
		c := first - 1 + uint64(rng.IntN(int(end-first+2)))
		if err := cs.CommitConsumer(ctx(t), stream, fmt.Sprintf("c%d", i), c); err != nil {
			t.Fatal(err)
		}
	}
	got, _, err := cs.Consumers(ctx(t), stream)
	if err != nil {
		t.Fatal(err)
	}
	return store.Held(got)
}

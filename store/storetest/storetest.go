// Package storetest is the conformance suite of store.Store: every
// implementation runs Run against real storage (store/bolt, the embedded
// bbolt store; store/postgres, PostgreSQL), and the durable benchmarks
// (BenchDurableBroadcast, BenchReplayPage) on it. The retention cases
// (retention.go) run on a store that implements store.Trimmer, the
// producer positions and gap rows (local.go) on one that implements
// store.LocalStore (Harness.GapRows: must), the named consumers
// (consumers.go) on one that implements store.ConsumerStore. A
// store whose storage a test can damage runs ServesNoDamagedRow (bits
// flipped on the disk are never served) and, when its writes can be made
// to lose power, PowerLoss (crash points; store/seglog does both).
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub"
)

// Harness opens the store under test.
type Harness struct {
	// Open returns an empty store (closed by the suite).
	Open func(t *testing.T) echopubsub.Store
	// Reopen closes s and opens the same storage again, as a restarted
	// process would.
	Reopen func(t *testing.T, s echopubsub.Store) echopubsub.Store
	// Twin, for a shared store, opens a second handle on s's storage, as
	// another node would (closed by the suite); nil for a node-local one.
	Twin func(t *testing.T, s echopubsub.Store) echopubsub.Store
	// GapRows: the store is node-local with gap rows (store.LocalStore);
	// the suite fails when it is not. Without, the LocalStore cases run
	// only on a store that implements it.
	GapRows bool
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func msg(stream string, i int) echopubsub.Record {
	return echopubsub.Record{Stream: stream, Kind: echopubsub.RecordMessage, Origin: "node-a:1",
		PayloadType: "test.Stamp", Payload: []byte(fmt.Sprintf("payload %d \x00\xff", i))}
}

func read(t *testing.T, s echopubsub.Store, stream string, from uint64, limit int) ([]echopubsub.Record, uint64) {
	t.Helper()
	recs, next, err := s.Read(ctx(t), stream, from, limit)
	if err != nil {
		t.Fatalf("Read(%q, %d, %d): %v", stream, from, limit, err)
	}
	return recs, next
}

func cursors(recs []echopubsub.Record) []uint64 {
	var out []uint64
	for _, r := range recs {
		out = append(out, r.Cursor)
	}
	return out
}

// pageThrough reads stream in pages from cursor 1 until stop is closed,
// and sends errs what breaks the contract, then returns: a page must be
// contiguous and start at its from (trimming: at or above it, as the rows
// below may have been removed meanwhile), and next never goes back.
func pageThrough(s echopubsub.Store, stream string, trimming bool, stop <-chan struct{}, errs chan<- error) {
	from := uint64(1)
	for {
		select {
		case <-stop:
			return
		default:
		}
		recs, next, err := s.Read(context.Background(), stream, from, 7)
		if err != nil {
			errs <- err
			return
		}
		for i, r := range recs {
			want := from + uint64(i)
			if i == 0 && trimming {
				want = max(from, r.Cursor)
			} else if i > 0 {
				want = recs[i-1].Cursor + 1
			}
			if r.Cursor != want {
				errs <- fmt.Errorf("page from %d: cursors %v: a hole", from, cursors(recs))
				return
			}
		}
		if next < from {
			errs <- fmt.Errorf("page from %d: next %d", from, next)
			return
		}
		from = next
	}
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	open := func(t *testing.T) echopubsub.Store {
		s := h.Open(t)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	t.Run("EmptyStream", func(t *testing.T) {
		s := open(t)
		for _, from := range []uint64{0, 1} {
			recs, next := read(t, s, "empty", from, 10)
			if len(recs) != 0 || next != 1 {
				t.Fatalf("empty stream from %d: %d rows, next %d; want none, next 1", from, len(recs), next)
			}
		}
		if _, _, err := s.Read(ctx(t), "empty", 2, 10); !errors.Is(err, echopubsub.ErrCursorBeyondEnd) {
			t.Fatalf("empty stream from 2: err %v, want ErrCursorBeyondEnd", err)
		}
	})
	t.Run("AppendAndPages", func(t *testing.T) {
		s := open(t)
		recs := []echopubsub.Record{msg("a", 1), msg("b", 1), msg("a", 2), msg("a", 3), msg("b", 2)}
		recs[4] = echopubsub.Record{Stream: "b", Kind: echopubsub.RecordGap, Origin: "node-b:2", Missed: 7, Reason: "cursor expired"}
		if err := s.Append(ctx(t), recs); err != nil {
			t.Fatal(err)
		}
		want := []uint64{1, 1, 2, 3, 2}
		if got := cursors(recs); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("cursors set by Append: %v, want %v", got, want)
		}
		page, next := read(t, s, "a", 0, 2)
		if fmt.Sprint(cursors(page)) != "[1 2]" || next != 3 {
			t.Fatalf("a from 0 limit 2: %v next %d", cursors(page), next)
		}
		for i, r := range page {
			w := msg("a", i+1)
			if r.Stream != "a" || r.Kind != w.Kind || r.Origin != w.Origin || r.PayloadType != w.PayloadType || !bytes.Equal(r.Payload, w.Payload) {
				t.Fatalf("row %d: %+v, want %+v", i, r, w)
			}
		}
		page, next = read(t, s, "a", next, 2)
		if fmt.Sprint(cursors(page)) != "[3]" || next != 4 {
			t.Fatalf("a from 3: %v next %d", cursors(page), next)
		}
		page, next = read(t, s, "a", 4, 2)
		if len(page) != 0 || next != 4 {
			t.Fatalf("a from its end + 1: %v next %d, want nothing, next 4", cursors(page), next)
		}
		if _, _, err := s.Read(ctx(t), "a", 5, 2); !errors.Is(err, echopubsub.ErrCursorBeyondEnd) {
			t.Fatalf("a from 5: err %v, want ErrCursorBeyondEnd", err)
		}
		page, _ = read(t, s, "b", 2, 5)
		if len(page) != 1 || page[0].Kind != echopubsub.RecordGap || page[0].Missed != 7 || page[0].Reason != "cursor expired" || page[0].Origin != "node-b:2" {
			t.Fatalf("gap row: %+v", page)
		}
	})
	t.Run("BadLimit", func(t *testing.T) {
		s := open(t)
		for _, l := range []int{0, -1} {
			if _, _, err := s.Read(ctx(t), "a", 0, l); err == nil {
				t.Fatalf("Read limit %d: no error", l)
			}
		}
	})
	t.Run("AllOrNothing", func(t *testing.T) {
		s := open(t)
		bad := []echopubsub.Record{msg("x", 1), {Stream: "", Kind: echopubsub.RecordMessage, PayloadType: "t"}}
		if err := s.Append(ctx(t), bad); err == nil {
			t.Fatal("Append with an empty stream name: no error")
		}
		bad = []echopubsub.Record{msg("x", 1), {Stream: "x", Kind: 9, PayloadType: "t"}}
		if err := s.Append(ctx(t), bad); err == nil {
			t.Fatal("Append with kind 9: no error")
		}
		if recs, next := read(t, s, "x", 0, 10); len(recs) != 0 || next != 1 {
			t.Fatalf("after failed appends: %v next %d, want nothing", cursors(recs), next)
		}
	})
	t.Run("StreamNames", func(t *testing.T) {
		s := open(t)
		names := []string{"room:général/1", "a b", string(bytes.Repeat([]byte("n"), 200)), "'; drop table x; --"}
		for _, n := range names {
			if err := s.Append(ctx(t), []echopubsub.Record{msg(n, 1)}); err != nil {
				t.Fatalf("append to %q: %v", n, err)
			}
		}
		for _, n := range names {
			if recs, _ := read(t, s, n, 0, 10); len(recs) != 1 || recs[0].Cursor != 1 || recs[0].Stream != n {
				t.Fatalf("stream %q: %+v", n, recs)
			}
		}
	})
	t.Run("ConcurrentAppendsNeverShowAHole", func(t *testing.T) {
		s := open(t)
		handles := []echopubsub.Store{s}
		if h.Twin != nil { // writers spread over several nodes' handles
			for i := 0; i < 3; i++ {
				tw := h.Twin(t, s)
				t.Cleanup(func() { _ = tw.Close() })
				handles = append(handles, tw)
			}
		}
		const writers, each = 8, 40
		var wg sync.WaitGroup
		errs := make(chan error, writers+1)
		got := make([][]uint64, writers)
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := 0; i < each; i++ {
					r := []echopubsub.Record{msg("c", w*1000+i)}
					if err := handles[w%len(handles)].Append(context.Background(), r); err != nil {
						errs <- err
						return
					}
					got[w] = append(got[w], r[0].Cursor)
				}
			}(w)
		}
		// A reader pages through while the writers append: a page must
		// start at its from and be contiguous, or a row became visible
		// before one below it (a replay would have skipped that one).
		stop := make(chan struct{})
		var rg sync.WaitGroup
		rg.Add(1)
		go func() { defer rg.Done(); pageThrough(s, "c", false, stop, errs) }()
		wg.Wait()
		close(stop)
		rg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		seen := map[uint64]bool{}
		for w, cs := range got {
			for i, c := range cs {
				if seen[c] || (i > 0 && c <= cs[i-1]) {
					t.Fatalf("writer %d cursors %v: duplicate or out of order", w, cs)
				}
				seen[c] = true
			}
		}
		all, next := read(t, s, "c", 0, writers*each+5)
		if len(all) != writers*each || next != uint64(writers*each+1) {
			t.Fatalf("%d rows, next %d; want %d rows", len(all), next, writers*each)
		}
		for i, r := range all {
			if r.Cursor != uint64(i+1) || !seen[r.Cursor] {
				t.Fatalf("row %d has cursor %d", i, r.Cursor)
			}
		}
	})
	t.Run("Reopen", func(t *testing.T) {
		s := h.Open(t)
		if err := s.Append(ctx(t), []echopubsub.Record{msg("r", 1), msg("r", 2)}); err != nil {
			t.Fatal(err)
		}
		s = h.Reopen(t, s)
		t.Cleanup(func() { _ = s.Close() })
		recs, next := read(t, s, "r", 0, 10)
		if fmt.Sprint(cursors(recs)) != "[1 2]" || next != 3 || !bytes.Equal(recs[1].Payload, msg("r", 2).Payload) {
			t.Fatalf("after reopen: %v next %d", cursors(recs), next)
		}
		more := []echopubsub.Record{msg("r", 3)}
		if err := s.Append(ctx(t), more); err != nil || more[0].Cursor != 3 {
			t.Fatalf("append after reopen: cursor %d, err %v; want 3", more[0].Cursor, err)
		}
	})
	t.Run("Closed", func(t *testing.T) {
		s := h.Open(t)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx(t), []echopubsub.Record{msg("z", 1)}); err == nil {
			t.Fatal("Append after Close: no error")
		}
		if _, _, err := s.Read(ctx(t), "z", 0, 1); err == nil {
			t.Fatal("Read after Close: no error")
		}
	})
	runLocal(t, h, open)
	runRetention(t, h, open)
	runConsumers(t, h, open)
	t.Run("CanceledContext", func(t *testing.T) {
		s := open(t)
		c, cancel := context.WithCancel(context.Background())
		cancel()
		if _, _, err := s.Read(c, "a", 0, 1); err == nil {
			t.Fatal("Read with a canceled context: no error")
		}
	})
}

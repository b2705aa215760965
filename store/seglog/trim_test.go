package seglog_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store"
	"github.com/echopubsub/echopubsub/store/seglog"
)

// segs lists dir's segment files.
func segs(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// fill appends n rows to each of streams, one call per row (a frame
// each), in rounds: each segment of a small log holds rows of all.
func fill(t *testing.T, s *seglog.Store, n int, streams ...string) {
	t.Helper()
	for i := 1; i <= n; i++ {
		for _, st := range streams {
			if err := s.Append(ctx(t), []echopubsub.Record{rec(st, i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func cursorsOf(recs []echopubsub.Record) []uint64 {
	out := make([]uint64, len(recs))
	for i, r := range recs {
		out[i] = r.Cursor
	}
	return out
}

// wantRows checks that stream reads back exactly cursors first..end.
func wantRows(t *testing.T, s echopubsub.Store, stream string, first, end uint64) {
	t.Helper()
	got := all(t, s, stream)
	if uint64(len(got)) != end-first+1 || (len(got) > 0 && (got[0].Cursor != first || got[len(got)-1].Cursor != end)) {
		t.Fatalf("%s: cursors %v, want %d..%d", stream, cursorsOf(got), first, end)
	}
}

// TestSeglogTrimRemovesSegments: a trim frees the disk a segment at a
// time, from the oldest, only once no kept row is in a segment; the log
// reopens to the same rows, positions and cursors, and goes on.
func TestSeglogTrimRemovesSegments(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	s := mustOpen(t, dir, seglog.WithSegmentSize(seglog.MinSegmentSize))
	pos := store.ProducerPosition{Node: "n2", Group: 1, Incarnation: 3, Next: 9}
	if err := s.AppendAt(ctx(t), []echopubsub.Record{rec("a", 0)}, pos); err != nil {
		t.Fatal(err)
	}
	fill(t, s, 50, "a", "b")
	// One row kept (MaxRows 20 of 1) among trimmed ones in an early
	// segment: that segment, and those after it, stay.
	fill(t, s, 1, "keep")
	fill(t, s, 149, "a", "b") // a: 1..200, b: 1..199
	before := len(segs(t, dir))
	if before < 4 {
		t.Fatalf("%d segments: the test needs several", before)
	}
	got, err := s.Trim(ctx(t), echopubsub.Retention{MaxRows: 20})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Stream != "a" || got[0].Rows != 180 || got[0].FirstKept != 181 ||
		got[1].Stream != "b" || got[1].Rows != 179 || got[1].FirstKept != 180 {
		t.Fatalf("Trim MaxRows 20: %+v", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "00000001.seg")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the first segment (every row trimmed) is still there: %v", err)
	}
	check := func(when string, s *seglog.Store) {
		t.Helper()
		wantRows(t, s, "a", 181, 200)
		wantRows(t, s, "b", 180, 199)
		wantRows(t, s, "keep", 1, 1)
		if p, ok, err := s.Position(ctx(t), "n2", 1); err != nil || !ok || p != pos {
			t.Fatalf("%s: position %+v %v %v, want %+v (its frame was in a removed segment)", when, p, ok, err, pos)
		}
	}
	check("after trim", s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, dir, seglog.WithSegmentSize(seglog.MinSegmentSize))
	t.Cleanup(func() { _ = s.Close() })
	check("reopened", s)
	more := []echopubsub.Record{rec("a", 201), rec("c", 1)}
	if err := s.Append(ctx(t), more); err != nil || more[0].Cursor != 201 || more[1].Cursor != 1 {
		t.Fatalf("append after reopen: cursors %d, %d, %v; want 201, 1", more[0].Cursor, more[1].Cursor, err)
	}
	// Everything trimmed: the stream's end outlives its rows.
	if _, err := s.Trim(ctx(t), echopubsub.Retention{MaxBytes: 1}); err != nil {
		t.Fatal(err)
	}
	if after := len(segs(t, dir)); after > 1 {
		t.Fatalf("segments %d before the trims, %d after trimming every row: only the active one should be left", before, after)
	}
	fill(t, s, 1, "z") // a new segment takes over from the trimmed ones
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, dir, seglog.WithSegmentSize(seglog.MinSegmentSize))
	t.Cleanup(func() { _ = s.Close() })
	wantRows(t, s, "a", 202, 201)
	more = []echopubsub.Record{rec("a", 202)}
	if err := s.Append(ctx(t), more); err != nil || more[0].Cursor != 202 {
		t.Fatalf("append to a fully trimmed stream after reopen: cursor %d, %v; want 202", more[0].Cursor, err)
	}
}

// TestSeglogTrimCrashBeforeRemoval: a crash after a trim's snapshot is on
// disk but before its segments were removed (here: the removed segments
// put back as they were) opens to the trimmed view, and Open removes
// them.
func TestSeglogTrimCrashBeforeRemoval(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	s := mustOpen(t, dir, seglog.WithSegmentSize(seglog.MinSegmentSize))
	fill(t, s, 150, "a")
	saved := copyDir(t, dir)
	if _, err := s.Trim(ctx(t), echopubsub.Retention{MaxRows: 10}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var back []string
	for _, p := range segs(t, saved) {
		to := filepath.Join(dir, filepath.Base(p))
		if _, err := os.Stat(to); errors.Is(err, os.ErrNotExist) {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(to, b, 0o600); err != nil {
				t.Fatal(err)
			}
			back = append(back, to)
		}
	}
	if len(back) == 0 {
		t.Fatal("the trim removed no segment: the test needs one")
	}
	s = mustOpen(t, dir, seglog.WithSegmentSize(seglog.MinSegmentSize))
	t.Cleanup(func() { _ = s.Close() })
	wantRows(t, s, "a", 141, 150)
	for _, p := range back {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("Open left %s, which holds only trimmed rows: %v", p, err)
		}
	}
}

// TestSeglogMissingRowsAreAnError: a log whose oldest segment is gone
// with no trim snapshot saying its rows were trimmed does not open as if
// the stream began later: Open names the stream.
func TestSeglogMissingRowsAreAnError(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	s := mustOpen(t, dir, seglog.WithSegmentSize(seglog.MinSegmentSize))
	fill(t, s, 150, "a")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(segment(t, dir, 1)); err != nil {
		t.Fatal(err)
	}
	_, err := seglog.Open(dir, seglog.WithSegmentSize(seglog.MinSegmentSize))
	if err == nil || !strings.Contains(err.Error(), `stream "a"`) || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("Open with segment 1 deleted by hand: %v; want an error naming stream \"a\" and missing rows", err)
	}
}

// TestSeglogReadDuringTrim: readers paging through a stream while trims
// remove its segments get contiguous rows at or above their cursor, and
// never an error (a read whose segment a trim closed reads again).
func TestSeglogReadDuringTrim(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	s := mustOpen(t, dir, seglog.WithSegmentSize(seglog.MinSegmentSize))
	t.Cleanup(func() { _ = s.Close() })
	fill(t, s, 2000, "a")
	c, cancel := context.WithCancel(ctx(t))
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.Err() == nil {
				from := uint64(1)
				for {
					recs, next, err := s.Read(c, "a", from, 7)
					if err != nil {
						if c.Err() == nil {
							errs <- err
						}
						return
					}
					for i, rec := range recs {
						if rec.Cursor < from || (i > 0 && rec.Cursor != recs[i-1].Cursor+1) {
							errs <- errors.New("rows out of order or below the cursor asked")
							return
						}
					}
					if len(recs) == 0 {
						break
					}
					from = next
				}
			}
		}()
	}
	for keep := uint64(1900); keep >= 100; keep -= 100 {
		if _, err := s.Trim(ctx(t), echopubsub.Retention{MaxRows: keep}); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	wantRows(t, s, "a", 1901, 2000)
}

// TestSeglogOpenKeepsTheLastSnapshot: the segment that holds the last
// trim's snapshot may hold no kept row once later appends moved to the
// next segment; Open must not remove it (only a trim, which writes a
// newer snapshot first, may), else the next Open has no snapshot: a
// fully trimmed stream's end is forgotten (its cursors handed out again)
// and a trimmed stream that goes on is "missing rows".
func TestSeglogOpenKeepsTheLastSnapshot(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	opt := seglog.WithSegmentSize(seglog.MinSegmentSize)
	s := mustOpen(t, dir, opt)
	fill(t, s, 100, "a", "b")
	pos := store.ProducerPosition{Node: "n2", Group: 1, Incarnation: 3, Next: 9}
	if err := s.AppendAt(ctx(t), nil, pos); err != nil {
		t.Fatal(err)
	}
	// Every row trimmed: the snapshot's segment holds no kept row.
	if _, err := s.Trim(ctx(t), echopubsub.Retention{MaxBytes: 1}); err != nil {
		t.Fatal(err)
	}
	// Positions only (a producer's batches of no durable row) fill the
	// snapshot's segment and the next: no row, so no trim runs a cut.
	n := len(segs(t, dir))
	for len(segs(t, dir)) < n+2 {
		pos.Next++
		if err := s.AppendAt(ctx(t), nil, pos); err != nil {
			t.Fatal(err)
		}
	}
	// Then b goes on; a does not.
	more := []echopubsub.Record{rec("b", 101)}
	if err := s.Append(ctx(t), more); err != nil || more[0].Cursor != 101 {
		t.Fatalf("append: cursor %d, %v; want 101", more[0].Cursor, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		s = mustOpen(t, dir, opt)
		wantRows(t, s, "a", 101, 100)
		wantRows(t, s, "b", 101, 101)
		if p, ok, err := s.Position(ctx(t), "n2", 1); err != nil || !ok || p != pos {
			t.Fatalf("open %d: position %+v %v %v, want %+v", i, p, ok, err, pos)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	s = mustOpen(t, dir, opt)
	t.Cleanup(func() { _ = s.Close() })
	more = []echopubsub.Record{rec("a", 101)}
	if err := s.Append(ctx(t), more); err != nil || more[0].Cursor != 101 {
		t.Fatalf("append to a fully trimmed stream: cursor %d, %v; want 101", more[0].Cursor, err)
	}
}

// TestSeglogOpenKeepsPositionOnlySegments: with no trim ever, a segment
// of position frames only (a producer's batches with no durable row)
// holds no row but is the only record of a position: Open must not
// remove it.
func TestSeglogOpenKeepsPositionOnlySegments(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	opt := seglog.WithSegmentSize(seglog.MinSegmentSize)
	s := mustOpen(t, dir, opt)
	once, _ := positionSegments(t, s, dir, 2)
	fill(t, s, 1, "a")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		s = mustOpen(t, dir, opt)
		if p, ok, err := s.Position(ctx(t), "n3", 2); err != nil || !ok || p != once {
			t.Fatalf("open %d: position %+v %v %v, want %+v", i, p, ok, err, once)
		}
		wantRows(t, s, "a", 1, 1)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSeglogSnapshotListsEarlierTrims: a trim that cuts only b still
// lists a, trimmed before: it removes the segment of a's snapshot, and a
// reopened log must still know where a ends.
func TestSeglogSnapshotListsEarlierTrims(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	opt := seglog.WithSegmentSize(seglog.MinSegmentSize)
	s := mustOpen(t, dir, opt)
	fill(t, s, 100, "a")
	if _, err := s.Trim(ctx(t), echopubsub.Retention{MaxBytes: 1}); err != nil {
		t.Fatal(err)
	}
	after := segs(t, dir)
	snap := after[len(after)-1] // the first trim's snapshot is in it
	fill(t, s, 300, "b")
	got, err := s.Trim(ctx(t), echopubsub.Retention{MaxRows: 10})
	if err != nil || len(got) != 1 || got[0].Stream != "b" {
		t.Fatalf("Trim MaxRows 10: %+v %v; want b alone", got, err)
	}
	if _, err := os.Stat(snap); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the second trim left %s: the test needs it removed (%v)", snap, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, dir, opt)
	t.Cleanup(func() { _ = s.Close() })
	wantRows(t, s, "b", 291, 300)
	more := []echopubsub.Record{rec("a", 101)}
	if err := s.Append(ctx(t), more); err != nil || more[0].Cursor != 101 {
		t.Fatalf("append to a (trimmed whole by the first trim) after reopen: cursor %d, %v; want 101", more[0].Cursor, err)
	}
}

// TestSeglogTrimRemovesPositionOnlySegments: segments of position frames
// only (a producer's batches with no durable row) go at the next trim,
// though it cuts no row, and the positions stay.
func TestSeglogTrimRemovesPositionOnlySegments(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	opt := seglog.WithSegmentSize(seglog.MinSegmentSize)
	s := mustOpen(t, dir, opt)
	once, pos := positionSegments(t, s, dir, 4)
	got, err := s.Trim(ctx(t), echopubsub.Retention{MaxRows: 10})
	if err != nil || len(got) != 0 {
		t.Fatalf("Trim: %+v %v; want nothing trimmed", got, err)
	}
	if n := len(segs(t, dir)); n != 1 {
		t.Fatalf("%d segments after the trim, want the active one alone", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, dir, opt)
	t.Cleanup(func() { _ = s.Close() })
	for _, want := range []store.ProducerPosition{once, pos} {
		if p, ok, err := s.Position(ctx(t), want.Node, want.Group); err != nil || !ok || p != want {
			t.Fatalf("position %+v %v %v, want %+v", p, ok, err, want)
		}
	}
}

// TestSeglogTrimWithEndedContextRemovesNothing: a Trim whose caller's
// context ended before it began removes nothing (the caller was told
// ctx's error, so nothing it would not hear of happens).
func TestSeglogTrimWithEndedContextRemovesNothing(t *testing.T) {
	s := mustOpen(t, filepath.Join(t.TempDir(), "log"))
	t.Cleanup(func() { _ = s.Close() })
	fill(t, s, 10, "a")
	c, cancel := context.WithCancel(context.Background())
	cancel()
	if got, err := s.Trim(c, echopubsub.Retention{MaxRows: 1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Trim with an ended context: %+v, %v; want context.Canceled", got, err)
	}
	// The committer takes the trim before this append (one queue, in order).
	fill(t, s, 1, "b")
	wantRows(t, s, "a", 1, 10)
}

// positionSegments records a position once, then another producer's
// position again and again, until dir holds n segments: the log of a node
// whose batches carry no durable row. It returns both positions as last
// recorded.
func positionSegments(t *testing.T, s *seglog.Store, dir string, n int) (once, pos store.ProducerPosition) {
	t.Helper()
	once = store.ProducerPosition{Node: "n3", Group: 2, Incarnation: 5, Next: 7}
	if err := s.AppendAt(ctx(t), nil, once); err != nil {
		t.Fatal(err)
	}
	pos = store.ProducerPosition{Node: "n2", Group: 1, Incarnation: 3}
	for len(segs(t, dir)) < n {
		pos.Next++
		if err := s.AppendAt(ctx(t), nil, pos); err != nil {
			t.Fatal(err)
		}
	}
	return once, pos
}

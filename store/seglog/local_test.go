package seglog_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store"
	"github.com/echopubsub/echopubsub/store/seglog"
)

var _ store.LocalStore = (*seglog.Store)(nil)

// TestSeglogLocalStore: AppendAt records the producer position with the
// rows, MarkGap puts a gap row in every stream (those of the same commit
// included), a position alone is recorded, and all of it is there after
// a reopen.
func TestSeglogLocalStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	s := mustOpen(t, dir)
	pos := store.ProducerPosition{Node: "n2", Group: 3, Incarnation: 7, Next: 2}
	if err := s.AppendAt(ctx(t), []echopubsub.Record{rec("a", 1), rec("b", 1)}, pos); err != nil {
		t.Fatal(err)
	}
	gap := echopubsub.Record{Origin: "n2", Missed: 4, Reason: "cursor expired"}
	if err := s.MarkGap(ctx(t), gap, store.ProducerPosition{Node: "n2", Group: 3, Incarnation: 7, Next: 6}); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendAt(ctx(t), nil, store.ProducerPosition{Node: "\x00self", Group: 0, Incarnation: 9, Next: 11, Retired: true}); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		for _, st := range []string{"a", "b"} {
			rows := all(t, s, st)
			if len(rows) != 2 || rows[1].Kind != echopubsub.RecordGap || rows[1].Cursor != 2 || rows[1].Missed != 4 ||
				rows[1].Reason != "cursor expired" || rows[1].Origin != "n2" || rows[1].Stream != st {
				t.Fatalf("%s: stream %s: %+v", when, st, rows)
			}
		}
		p, ok, err := s.Position(ctx(t), "n2", 3)
		if err != nil || !ok || p.Incarnation != 7 || p.Next != 6 || p.Retired {
			t.Fatalf("%s: position n2/3: %+v %v %v", when, p, ok, err)
		}
		p, ok, err = s.Position(ctx(t), "\x00self", 0)
		if err != nil || !ok || p.Incarnation != 9 || p.Next != 11 || !p.Retired {
			t.Fatalf("%s: position self/0: %+v %v %v", when, p, ok, err)
		}
		if _, ok, err := s.Position(ctx(t), "n2", 4); ok || err != nil {
			t.Fatalf("%s: position n2/4: %v %v", when, ok, err)
		}
	}
	check("open")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Position(ctx(t), "n2", 3); err != echopubsub.ErrStoreClosed {
		t.Fatalf("Position after Close: %v", err)
	}
	s = mustOpen(t, dir)
	defer s.Close()
	check("reopened")
}

// TestSeglogOpenErrors: bad options name the field and the value; a
// directory is open once.
func TestSeglogOpenErrors(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	if _, err := seglog.Open(dir, seglog.WithSegmentSize(10)); err == nil || !strings.Contains(err.Error(), "segment size") || !strings.Contains(err.Error(), "10") {
		t.Fatalf("segment size 10: %v", err)
	}
	if _, err := seglog.Open(""); err == nil {
		t.Fatal("empty directory: no error")
	}
	s := mustOpen(t, dir)
	defer s.Close()
	if s2, err := seglog.Open(dir); err == nil {
		_ = s2.Close()
		t.Fatal("a second Open of one directory: no error")
	} else if !strings.Contains(err.Error(), "locked") {
		t.Fatalf("second Open: %v", err)
	}
}

// TestSeglogKeepsTime: Append sets a zero Time (storekit.Stamp) and keeps
// a given one; both read back the same after a reopen.
func TestSeglogKeepsTime(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	s := mustOpen(t, dir)
	given := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	recs := []echopubsub.Record{rec("t", 1), rec("t", 2)}
	recs[1].Time = given
	if err := s.Append(ctx(t), recs); err != nil {
		t.Fatal(err)
	}
	if recs[0].Time.IsZero() {
		t.Fatal("Append left Time zero")
	}
	_ = s.Close()
	s = mustOpen(t, dir)
	defer s.Close()
	got := all(t, s, "t")
	if len(got) != 2 || !got[0].Time.Equal(recs[0].Time) || !got[1].Time.Equal(given) {
		t.Fatalf("times after reopen: %+v; want %v, %v", got, recs[0].Time, given)
	}
}

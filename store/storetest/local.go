package storetest

import (
	"fmt"
	"testing"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store"
)

// runLocal is the store.LocalStore part of the suite (producer positions
// and gap rows): AppendAt records the producer position with the rows,
// MarkGap puts a gap row in every stream the store holds (its Stream
// ignored) and records its position, a position alone is recorded, an
// unknown producer has none, and all of it is there after a reopen. With
// Harness.GapRows the store must implement store.LocalStore.
func runLocal(t *testing.T, h Harness, open func(t *testing.T) echopubsub.Store) {
	t.Run("LocalStoreGapRows", func(t *testing.T) {
		s := h.Open(t)
		if _, ok := s.(store.LocalStore); !ok {
			_ = s.Close()
			if h.GapRows {
				t.Fatalf("%T does not implement store.LocalStore: it has no gap rows (Harness.GapRows)", s)
			}
			t.Skipf("%T is not a node-local store with gap rows", s)
		}
		if s.Shared() {
			_ = s.Close()
			t.Fatalf("%T implements store.LocalStore but is Shared", s)
		}
		l := s.(store.LocalStore)
		pos := store.ProducerPosition{Node: "node-b:2", Group: 3, Incarnation: 7, Next: 2}
		if err := l.AppendAt(ctx(t), []echopubsub.Record{msg("a", 1), msg("b", 1)}, pos); err != nil {
			t.Fatal(err)
		}
		gap := echopubsub.Record{Stream: "ignored", Kind: echopubsub.RecordGap, Origin: "node-b:2", Missed: 4, Reason: "cursor expired"}
		if err := l.MarkGap(ctx(t), gap, store.ProducerPosition{Node: "node-b:2", Group: 3, Incarnation: 7, Next: 6}); err != nil {
			t.Fatal(err)
		}
		self := store.ProducerPosition{Node: "\x00self", Group: 0, Incarnation: 9, Next: 11, Retired: true}
		if err := l.AppendAt(ctx(t), nil, self); err != nil {
			t.Fatal(err)
		}
		check := func(s echopubsub.Store, when string) {
			l := s.(store.LocalStore)
			for _, st := range []string{"a", "b"} {
				rows, next := read(t, s, st, 0, 10)
				if len(rows) != 2 || next != 3 || rows[0].Kind != echopubsub.RecordMessage || rows[1].Kind != echopubsub.RecordGap ||
					rows[1].Cursor != 2 || rows[1].Missed != 4 || rows[1].Reason != "cursor expired" ||
					rows[1].Origin != "node-b:2" || rows[1].Stream != st {
					t.Fatalf("%s: stream %s: %s next %d; want a message row, then the gap row at cursor 2", when, st, describe(rows), next)
				}
			}
			if rows, next := read(t, s, "ignored", 0, 10); len(rows) != 0 || next != 1 {
				t.Fatalf("%s: MarkGap wrote to the gap's own Stream: %s", when, describe(rows))
			}
			want := store.ProducerPosition{Node: "node-b:2", Group: 3, Incarnation: 7, Next: 6}
			if p, ok, err := l.Position(ctx(t), "node-b:2", 3); err != nil || !ok || p != want {
				t.Fatalf("%s: position node-b:2/3: %+v ok %v err %v; want %+v", when, p, ok, err, want)
			}
			if p, ok, err := l.Position(ctx(t), "\x00self", 0); err != nil || !ok || p != self {
				t.Fatalf("%s: position self/0: %+v ok %v err %v; want %+v", when, p, ok, err, self)
			}
			if _, ok, err := l.Position(ctx(t), "node-b:2", 4); ok || err != nil {
				t.Fatalf("%s: position of a producer never recorded: ok %v err %v; want none", when, ok, err)
			}
		}
		check(s, "open")
		s = h.Reopen(t, s)
		t.Cleanup(func() { _ = s.Close() })
		check(s, "reopened")
	})
}

func describe(rows []echopubsub.Record) string {
	out := ""
	for _, r := range rows {
		out += fmt.Sprintf("[%d %s %s missed %d %q] ", r.Cursor, r.Kind, r.Origin, r.Missed, r.Reason)
	}
	return out
}

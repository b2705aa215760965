package catchup_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/echopubsub/echopubsub/internal/catchup"
)

// op is one step of a table test: what the session actor tells the merge,
// and what the merge must answer.
type op struct {
	do    string // "row", "trunc", "page", "live", "hole", "take", "rewind", "read"
	c     uint64 // the cursor (page: the store's next)
	full  bool   // page: a full page (not the stream's end)
	tired bool   // page: the caller's patience ran out

	verdict  catchup.Verdict // live
	released []uint64        // live, when Deliver
	end      catchup.End     // page
	mark     uint64          // page: the CaughtUp's cursor
	owed     bool            // page: a CaughtUp is owed; take: it was taken
	newer    bool            // hole
	next     uint64          // after the op, when not 0
	reading  bool            // after the op
	ahead    int             // after the op
}

func TestMergeTable(t *testing.T) {
	cases := []struct {
		name string
		from uint64
		ops  []op
	}{
		{"handover after the last stored row, before the first live one", 1, []op{
			{do: "live", c: 2, verdict: catchup.Drop, next: 1, reading: true}, // the reading reaches it
			{do: "row", c: 1, next: 2, reading: true},
			{do: "row", c: 2, next: 3, reading: true},
			{do: "row", c: 3, next: 4, reading: true},
			{do: "page", c: 4, end: catchup.Live, mark: 3, owed: true, next: 4},
			{do: "take", owed: true},
			{do: "live", c: 4, verdict: catchup.Deliver, next: 5},
		}},
		{"an empty stream hands over at once, CaughtUp at from - 1", 6, []op{
			{do: "page", c: 6, end: catchup.Live, mark: 5, owed: true, next: 6},
		}},
		{"from 0 is from 1", 0, []op{
			{do: "page", c: 1, end: catchup.Live, mark: 0, owed: true, next: 1},
		}},
		{"a full page reads on, no CaughtUp yet", 1, []op{
			{do: "row", c: 1, reading: true}, {do: "row", c: 2, reading: true},
			{do: "page", c: 3, full: true, end: catchup.More, next: 3, reading: true},
			{do: "row", c: 3, reading: true},
			{do: "page", c: 4, end: catchup.Live, mark: 3, owed: true, next: 4},
		}},
		{"a live envelope claimed a row the read did not see: wait, then go live unseen", 1, []op{
			{do: "live", c: 3, verdict: catchup.Drop, reading: true},
			{do: "row", c: 1}, {do: "row", c: 2},
			{do: "page", c: 3, end: catchup.Wait, next: 3, reading: true},
			{do: "page", c: 3, tired: true, end: catchup.LiveUnseen, mark: 2, owed: true, next: 3},
		}},
		{"the claimed row shows up: handover behind it", 1, []op{
			{do: "live", c: 2, verdict: catchup.Drop, reading: true},
			{do: "row", c: 1},
			{do: "page", c: 2, end: catchup.Wait, next: 2, reading: true},
			{do: "row", c: 2},
			{do: "page", c: 3, end: catchup.Live, mark: 2, owed: true, next: 3},
		}},
		{"duplicates: below next, and one already aside", 1, []op{
			{do: "page", c: 5, end: catchup.Live, mark: 4, owed: true, next: 5},
			{do: "live", c: 5, verdict: catchup.Deliver, next: 6},
			{do: "live", c: 5, verdict: catchup.Drop, next: 6},
			{do: "live", c: 1, verdict: catchup.Drop, next: 6},
			{do: "live", c: 8, verdict: catchup.Aside, next: 6, ahead: 1},
			{do: "live", c: 8, verdict: catchup.Drop, next: 6, ahead: 1},
			{do: "live", c: 7, verdict: catchup.Aside, next: 6, ahead: 2},
			{do: "live", c: 6, verdict: catchup.Deliver, released: []uint64{7, 8}, next: 9},
			{do: "live", c: 7, verdict: catchup.Drop, next: 9},
		}},
		{"out of range: too many aside drops them and reads from next", 1, []op{
			{do: "page", c: 1, end: catchup.Live, mark: 0, owed: true, next: 1},
			{do: "live", c: 3, verdict: catchup.Aside, ahead: 1, next: 1},
			{do: "live", c: 4, verdict: catchup.Aside, ahead: 2, next: 1},
			{do: "live", c: 5, verdict: catchup.Aside, ahead: 3, next: 1},
			{do: "live", c: 6, verdict: catchup.Read, ahead: 0, next: 1, reading: true},
			{do: "live", c: 1, verdict: catchup.Drop, next: 1, reading: true},
		}},
		{"a gap row: its cursor never comes live, the hole reads it as a StreamGap", 1, []op{
			{do: "row", c: 1},
			{do: "page", c: 2, end: catchup.Live, mark: 1, owed: true, next: 2},
			{do: "take", owed: true},
			{do: "live", c: 3, verdict: catchup.Aside, ahead: 1, next: 2}, // 2 is a gap row
			{do: "hole", c: 2, newer: false, next: 2, reading: true},
			{do: "row", c: 2}, {do: "row", c: 3},
			{do: "page", c: 4, end: catchup.Live, next: 4}, // live again, no second CaughtUp
			{do: "live", c: 4, verdict: catchup.Deliver, next: 5},
		}},
		{"live rows lost (CursorExpired): the hole after them is read from the store", 1, []op{
			{do: "page", c: 1, end: catchup.Live, mark: 0, owed: true, next: 1},
			{do: "live", c: 1, verdict: catchup.Deliver, next: 2},
			{do: "live", c: 5, verdict: catchup.Aside, ahead: 1, next: 2}, // 2..4 expired on the way
			{do: "hole", c: 2, next: 2, reading: true},
			{do: "live", c: 6, verdict: catchup.Drop, next: 2, reading: true},
			{do: "row", c: 2}, {do: "row", c: 3}, {do: "row", c: 4}, {do: "row", c: 5}, {do: "row", c: 6},
			{do: "page", c: 7, end: catchup.Live, mark: 6, owed: true, next: 7},
		}},
		{"a hole that filled while a newer one opened gets its own wait", 1, []op{
			{do: "page", c: 1, end: catchup.Live, mark: 0, owed: true, next: 1},
			{do: "live", c: 2, verdict: catchup.Aside, ahead: 1, next: 1},
			{do: "live", c: 4, verdict: catchup.Aside, ahead: 2, next: 1},
			{do: "live", c: 1, verdict: catchup.Deliver, released: []uint64{2}, ahead: 1, next: 3},
			{do: "hole", c: 1, newer: true, ahead: 1, next: 3},
			{do: "hole", c: 3, newer: false, next: 3, reading: true},
		}},
		{"StreamTruncated: the reading goes on from the first row kept", 2, []op{
			{do: "trunc", c: 7, next: 7, reading: true},
			{do: "row", c: 7},
			{do: "page", c: 8, end: catchup.Live, mark: 7, owed: true, next: 8},
		}},
		{"one CaughtUp per Merge: taken once, a later handover owes none", 1, []op{
			{do: "page", c: 1, end: catchup.Live, mark: 0, owed: true, next: 1},
			{do: "take", owed: true},
			{do: "take", owed: false},
			{do: "read", next: 1, reading: true},
			{do: "page", c: 1, end: catchup.Live, mark: 0, owed: false, next: 1},
		}},
		{"a rewind drops what is aside: the reading reaches it", 1, []op{
			{do: "page", c: 3, end: catchup.Live, mark: 2, owed: true, next: 3},
			{do: "live", c: 5, verdict: catchup.Aside, ahead: 1, next: 3},
			{do: "rewind", c: 2, next: 2, reading: true, ahead: 0},
		}},
		{"a CaughtUp parked with the rows before it is owed again at the next handover", 1, []op{
			{do: "row", c: 1},
			{do: "page", c: 2, end: catchup.Live, mark: 1, owed: true, next: 2},
			{do: "rewind", c: 1, next: 1, reading: true}, // row 1 had no room: not taken
			{do: "row", c: 1},
			{do: "page", c: 2, end: catchup.Live, mark: 1, owed: true, next: 2},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := catchup.New[uint64](tc.from, 3)
			for i, o := range tc.ops {
				where := fmt.Sprintf("op %d (%s %d)", i, o.do, o.c)
				switch o.do {
				case "row":
					m.Row(o.c)
					o.next, o.reading = o.c+1, true
				case "trunc":
					m.Truncated(o.c)
				case "rewind":
					m.Rewind(o.c)
				case "read":
					m.Read()
				case "take":
					if got := m.TakeCaughtUp(); got != o.owed {
						t.Fatalf("%s: TakeCaughtUp = %v, want %v", where, got, o.owed)
					}
					continue
				case "page":
					end, mark, owed := m.Page(o.c, !o.full, !o.tired)
					if end != o.end || owed != o.owed || (owed && mark != o.mark) {
						t.Fatalf("%s: Page = %v, mark %d, owed %v; want %v, mark %d, owed %v", where, end, mark, owed, o.end, o.mark, o.owed)
					}
				case "live":
					v := m.Live(o.c)
					var rel []uint64
					switch v {
					case catchup.Aside:
						m.Aside(o.c, o.c)
					case catchup.Deliver:
						rel = m.Released()
					}
					if v != o.verdict || !slices.Equal(rel, o.released) {
						t.Fatalf("%s: Live = %v, released %v; want %v, released %v", where, v, rel, o.verdict, o.released)
					}
				case "hole":
					if got := m.HoleStayed(o.c); got != o.newer {
						t.Fatalf("%s: HoleStayed = %v, want %v", where, got, o.newer)
					}
				default:
					t.Fatalf("%s: unknown op", where)
				}
				if o.next != 0 && m.Next() != o.next {
					t.Fatalf("%s: Next = %d, want %d", where, m.Next(), o.next)
				}
				if m.Reading() != o.reading || m.Ahead() != o.ahead {
					t.Fatalf("%s: reading %v, ahead %d; want %v, %d", where, m.Reading(), m.Ahead(), o.reading, o.ahead)
				}
			}
		})
	}
}

func TestMergeStale(t *testing.T) {
	m := catchup.New[uint64](1, 3)
	m.Row(1)
	m.Row(2)
	m.Row(3)
	m.Page(4, true, true) // live from 4
	for _, c := range []struct {
		c      uint64
		stored bool
		want   bool
	}{{3, true, false}, {4, false, false}, {4, true, true}} {
		if got := m.Stale(c.c, c.stored); got != c.want {
			t.Errorf("live from 4: Stale(%d, stored %v) = %v, want %v", c.c, c.stored, got, c.want)
		}
	}
	m.Rewind(2) // row 2 had no room: rows 2 and 3 handed after it are read again
	for _, c := range []struct {
		c      uint64
		stored bool
		want   bool
	}{{1, true, false}, {2, true, true}, {3, true, true}, {4, false, true}} {
		if got := m.Stale(c.c, c.stored); got != c.want {
			t.Errorf("rewound to 2: Stale(%d, stored %v) = %v, want %v", c.c, c.stored, got, c.want)
		}
	}
}

// render writes a merged sequence as the session would see it.
func render(out []item) string {
	var b strings.Builder
	for _, it := range out {
		fmt.Fprintf(&b, "%c%d ", it.kind, it.c)
	}
	return b.String()
}

package catchup_test

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/echopubsub/echopubsub/internal/catchup"
)

// item is one thing a session was handed: a stored message row ('s'), a
// gap row as its StreamGap ('g'), a live envelope ('l'), or the CaughtUp
// ('u').
type item struct {
	kind byte
	c    uint64
}

// world drives a Merge the way the session actor does (catchup.go), over
// a store and a live stream the test controls: rows are appended to the
// store, become readable (a shared store may show a row later than its
// live envelope arrives), and their live envelopes arrive in any order,
// twice, or not at all (lost on the way, told as CursorExpired). The
// session takes everything at once, except that a stored row may find no
// room (then the merge reads it again).
type world struct {
	m        *catchup.Merge[uint64]
	page     int
	gap      map[uint64]bool // gap rows: no live envelope ever carries them
	written  uint64          // rows appended to the store
	readable uint64          // rows a read sees
	pending  []uint64        // live envelopes on their way
	hole     bool            // the hole timer is armed
	holeAt   uint64
	out      []item
	// mark: where the CaughtUp was handed (index in out) and how many
	// rows the store showed then; -1: not yet.
	mark, markReadable int
}

func (w *world) emit(kind byte, c uint64) { w.out = append(w.out, item{kind, c}) }

// step reads one page, as sessionActor.step; refuse says which row (by
// its index in the page, -1 none) finds no room.
func (w *world) step(refuse int) {
	if !w.m.Reading() {
		return
	}
	from := w.m.Next()
	last := min(w.readable, from+uint64(w.page)-1)
	n := 0
	for c := from; c <= last; c++ {
		w.m.Row(c)
		if n == refuse {
			w.m.Rewind(c) // NoRoom: read again from c
			return
		}
		n++
		if w.gap[c] {
			w.emit('g', c)
		} else {
			w.emit('s', c)
		}
	}
	end, mark, owed := w.m.Page(max(from, last+1), n < w.page, true)
	if end == catchup.Live && owed && w.m.TakeCaughtUp() {
		w.mark, w.markReadable = len(w.out), int(w.readable)
		w.emit('u', mark)
	}
}

// live hands the merge the live envelope of row c, as
// sessionActor.deliver.
func (w *world) live(c uint64) {
	switch w.m.Live(c) {
	case catchup.Deliver:
		w.emit('l', c)
		for _, r := range w.m.Released() {
			w.emit('l', r)
		}
		if w.m.Ahead() == 0 {
			w.hole = false
		}
	case catchup.Aside:
		w.m.Aside(c, c)
		if !w.hole {
			w.hole, w.holeAt = true, w.m.Next()
		}
	case catchup.Read:
		w.hole = false
	}
}

// fireHole: the hole timer went off (sessionActor.holeStayed).
func (w *world) fireHole() {
	if !w.hole || w.m.Reading() {
		return
	}
	w.hole = false
	if w.m.HoleStayed(w.holeAt) {
		w.hole, w.holeAt = true, w.m.Next()
	}
}

func (w *world) append(gap, readable bool) {
	w.written++
	if gap {
		w.gap[w.written] = true
	} else {
		w.pending = append(w.pending, w.written)
	}
	if readable {
		w.readable = w.written
	}
}

// TestMergeEveryRowOnceInOrder: for any interleaving of stored and live
// rows, the session gets every row from its cursor on exactly once, in
// cursor order, gap rows as StreamGap, and one CaughtUp, right after the
// last row the catch-up read (when it read every row the store showed)
// and before the first live envelope.
func TestMergeEveryRowOnceInOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		maxAhead := rapid.IntRange(1, 4).Draw(t, "maxAhead")
		w := &world{page: rapid.IntRange(1, 4).Draw(t, "page"), gap: map[uint64]bool{}, mark: -1}
		for range rapid.IntRange(0, 10).Draw(t, "stored") {
			w.append(rapid.IntRange(0, 5).Draw(t, "gapRow") == 0, true)
		}
		// live envelopes of rows stored before the subscription may still
		// be on their way: keep a few
		w.pending = w.pending[len(w.pending)-min(len(w.pending), rapid.IntRange(0, 3).Draw(t, "inflight")):]
		from := rapid.Uint64Range(1, w.written+1).Draw(t, "from")
		w.m = catchup.New[uint64](from, maxAhead)

		for range rapid.IntRange(0, 80).Draw(t, "ops") {
			switch rapid.IntRange(0, 5).Draw(t, "op") {
			case 0:
				w.append(rapid.IntRange(0, 5).Draw(t, "gapRow") == 0, rapid.Bool().Draw(t, "readable"))
			case 1:
				w.readable = w.written
			case 2, 3:
				if len(w.pending) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(w.pending)-1).Draw(t, "which")
				c := w.pending[i]
				if !rapid.Bool().Draw(t, "again") { // else it comes again later
					w.pending = append(w.pending[:i], w.pending[i+1:]...)
				}
				if rapid.IntRange(0, 7).Draw(t, "lost") != 0 {
					w.live(c)
				}
			case 4:
				w.step(rapid.IntRange(-1, w.page+3).Draw(t, "refuse"))
			case 5:
				w.fireHole()
			}
		}

		// The end: every row readable, the live ones still on their way
		// arrive, then one more row comes live (a lost last row is told by
		// the next one's hole); the timers and reads run until it is out
		// and the merge is live.
		w.readable = w.written
		for _, c := range w.pending {
			w.live(c)
		}
		w.append(false, true)
		last := w.written
		for i := 0; ; i++ {
			if w.m.Next() > last && !w.m.Reading() {
				break
			}
			if i == 10_000 {
				t.Fatalf("the merge never handed row %d over: %s", last, render(w.out))
			}
			switch {
			case w.m.Reading():
				w.step(-1)
			case w.hole:
				w.fireHole()
			default:
				w.live(last)
			}
		}
		check(t, w, from, last)
	})
}

// check states the guarantee for what w handed over.
func check(t *rapid.T, w *world, from, last uint64) {
	want := from
	for i, it := range w.out {
		if it.kind == 'u' {
			continue
		}
		if it.c != want {
			t.Fatalf("item %d is row %d, want row %d (every row once, in cursor order): %s", i, it.c, want, render(w.out))
		}
		if it.kind == 'l' && w.gap[it.c] || it.kind != 'g' && w.gap[it.c] || it.kind == 'g' && !w.gap[it.c] {
			t.Fatalf("item %d: row %d handed as %c, its kind is gap=%v: %s", i, it.c, it.kind, w.gap[it.c], render(w.out))
		}
		want++
	}
	if want != last+1 {
		t.Fatalf("rows %d..%d handed, want %d..%d: %s", from, want-1, from, last, render(w.out))
	}
	marks := 0
	for _, it := range w.out {
		if it.kind == 'u' {
			marks++
		}
	}
	if marks != 1 || w.mark < 0 {
		t.Fatalf("%d CaughtUp, want 1: %s", marks, render(w.out))
	}
	before, mark := w.out[:w.mark], w.out[w.mark]
	lastBefore := from - 1
	for _, it := range before {
		if it.kind == 'l' {
			t.Fatalf("live row %d before the CaughtUp: %s", it.c, render(w.out))
		}
		lastBefore = it.c
	}
	if mark.c != lastBefore {
		t.Fatalf("CaughtUp{Cursor %d} right after row %d, want its cursor to be that row's: %s", mark.c, lastBefore, render(w.out))
	}
	if mark.c != uint64(w.markReadable) && !(w.markReadable < int(from) && mark.c == from-1) {
		t.Fatalf("CaughtUp{Cursor %d} handed when the store showed rows up to %d: a catch-up not at the stream's end: %s",
			mark.c, w.markReadable, render(w.out))
	}
}

package catchup_test

import (
	"testing"

	"github.com/echopubsub/echopubsub/internal/prop"

	"github.com/echopubsub/echopubsub/internal/catchup"
)

// item is one thing a session was handed: a stored message row ('s'), a
// gap row as its StreamGap ('g'), a live envelope ('l'), or the CaughtUp
// ('u').
type item struct {
	kind byte
	c    uint64
}

// held is an item on its way to the session, as the actor holds it
// (catchup.go's caught).
type held struct {
	item
	row      bool // read from the store (a CaughtUp counts as one)
	readable int  // CaughtUp: the rows the store showed at the handover
}

// engine is the session's answer to a row or live envelope.
type engine int

const (
	delivered engine = iota
	heldBack         // session.Held: the actor's mailbox waits for room
	noRoom           // session.NoRoom (rows only): read it again after room
	refused          // session.Refused: the reservation table is full
)

// world drives a Merge the way the session actor does (catchup.go,
// session_actor.go), over a store and a live stream the test controls:
// rows are appended to the store and become readable (a shared store may
// show a row later than its live envelope arrives); their live envelopes
// arrive in any order, twice, or not at all (lost on the way, told as
// CursorExpired). The session takes a row or envelope, holds it back
// (the actor's mailbox waits for room), has no room or refuses it, as
// answer says.
type world struct {
	m        *catchup.Merge[uint64]
	answer   func(row bool) engine
	page     int
	gap      map[uint64]bool // gap rows: no live envelope ever carries them
	written  uint64          // rows appended to the store
	readable uint64          // rows a read sees
	pending  []uint64        // live envelopes on their way
	hole     bool            // follow.hole is set
	holeDue  bool            // and its timer has not gone off yet
	holeAt   uint64
	held     []held
	// suspended: the mailbox waits for room; roomWait: a row had none;
	// roomMsg: the engine made room, its sessionRoom is on its way (behind
	// what the mailbox held); paused: a read waits for its retry timer.
	suspended, roomWait, roomMsg, paused bool
	out                                  []item
	// mark: where the CaughtUp was handed (index in out) and how many
	// rows the store showed at the handover; -1: not yet.
	mark, markReadable int
}

func (w *world) emit(kind byte, c uint64) { w.out = append(w.out, item{kind, c}) }

func (w *world) waits() bool { return w.paused || w.roomWait }

// step reads one page, as sessionActor.step (queued by pump only when
// nothing is held and the follow does not wait).
func (w *world) step() {
	if !w.m.Reading() || len(w.held) > 0 || w.waits() {
		return
	}
	from := w.m.Next()
	last := min(w.readable, from+uint64(w.page)-1)
	n := 0
	for c := from; c <= last; c++ {
		n++
		w.m.Row(c)
		kind := byte('s')
		if w.gap[c] {
			kind = 'g'
		}
		w.hand(held{item: item{kind, c}, row: true})
		if w.waits() {
			return
		}
	}
	end, mark, owed := w.m.Page(max(from, last+1), n < w.page, true)
	switch end {
	case catchup.Wait:
		w.paused = true
	case catchup.Live:
		if owed {
			w.hand(held{item: item{'u', mark}, row: true, readable: int(w.readable)})
		}
	}
}

// hand and flush are sessionActor.hand and flush.
func (w *world) hand(h held) {
	if len(w.held) == 0 {
		if !w.pass(h) {
			w.held = append(w.held, h)
		}
		return
	}
	w.held = append(w.held, h)
	w.flush()
}

func (w *world) flush() {
	for i, h := range w.held {
		if !w.pass(h) {
			w.held = w.held[i:]
			return
		}
	}
	w.held = nil
}

// pass is sessionActor.passCaught.
func (w *world) pass(h held) bool {
	if w.m.Stale(h.c, h.row) {
		return true
	}
	switch h.kind {
	case 'u':
		if w.m.TakeCaughtUp() {
			w.mark, w.markReadable = len(w.out), h.readable
			w.emit('u', h.c)
		}
		return true
	case 'g':
		w.emit('g', h.c) // a notice: nothing to pace
		return true
	}
	switch w.answer(h.row) {
	case heldBack:
		w.suspended = true
		return false
	case noRoom:
		w.m.Rewind(h.c)
		w.hole, w.holeDue = false, false
		w.roomWait = true
	case refused:
		w.m.Rewind(h.c)
		w.hole, w.holeDue = false, false
		w.paused = h.row // a live envelope: read at once
	default:
		w.emit(h.kind, h.c)
	}
	return true
}

// live hands the merge the live envelope of row c, as sessionActor.admit
// and followed (catchup.go).
func (w *world) live(c uint64) {
	switch w.m.Live(c) {
	case catchup.Deliver:
		w.hand(held{item: item{'l', c}})
		for _, r := range w.m.Released() {
			w.hand(held{item: item{'l', r}})
		}
		if w.m.Ahead() == 0 {
			w.hole, w.holeDue = false, false
		}
	case catchup.Aside:
		w.m.Aside(c, c)
		if !w.hole {
			w.hole, w.holeDue, w.holeAt = true, true, w.m.Next()
		}
	case catchup.Read:
		w.hole, w.holeDue = false, false
	}
}

// fireHole: the hole timer went off (sessionActor.holeStayed).
func (w *world) fireHole() {
	if !w.holeDue {
		return
	}
	w.holeDue = false
	if w.m.Reading() {
		return // as the actor: follow.hole stays set
	}
	w.hole = false
	if w.m.HoleStayed(w.holeAt) {
		w.hole, w.holeDue, w.holeAt = true, true, w.m.Next()
	}
}

// room: the engine made room (session.Pacer.Room): the mailbox resumes
// and a sessionRoom is sent behind what it holds.
func (w *world) room() {
	if w.suspended || w.roomWait {
		w.suspended, w.roomMsg = false, true
	}
}

// sessionRoom reaches the actor: roomMade, then flush.
func (w *world) sessionRoom() {
	if w.roomMsg {
		w.roomMsg, w.roomWait = false, false
		w.flush()
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
	prop.CheckN(t, 20000, func(t *prop.T) { // cheap: 20,000 cases take well under a second
		maxAhead := prop.IntRange(1, 4).Draw(t, "maxAhead")
		w := &world{page: prop.IntRange(1, 4).Draw(t, "page"), gap: map[uint64]bool{}, mark: -1}
		w.answer = func(row bool) engine {
			a := engine(prop.IntRange(0, 9).Draw(t, "answer"))
			if a > refused || !row && a == noRoom {
				return delivered
			}
			return a
		}
		for range prop.IntRange(0, 10).Draw(t, "stored") {
			w.append(prop.IntRange(0, 5).Draw(t, "gapRow") == 0, true)
		}
		// live envelopes of rows stored before the subscription may still
		// be on their way: keep a few
		w.pending = w.pending[len(w.pending)-min(len(w.pending), prop.IntRange(0, 3).Draw(t, "inflight")):]
		from := prop.Uint64Range(1, w.written+1).Draw(t, "from")
		w.m = catchup.New[uint64](from, maxAhead)

		for range prop.IntRange(0, 80).Draw(t, "ops") {
			op := prop.IntRange(0, 8).Draw(t, "op")
			if w.suspended && op >= 2 && op != 6 {
				continue // the mailbox waits for room: nothing reaches the actor
			}
			switch op {
			case 0:
				w.append(prop.IntRange(0, 5).Draw(t, "gapRow") == 0, prop.Bool().Draw(t, "readable"))
			case 1:
				w.readable = w.written
			case 2, 3:
				if len(w.pending) == 0 {
					continue
				}
				i := prop.IntRange(0, len(w.pending)-1).Draw(t, "which")
				c := w.pending[i]
				if !prop.Bool().Draw(t, "again") { // else it comes again later
					w.pending = append(w.pending[:i], w.pending[i+1:]...)
				}
				if prop.IntRange(0, 7).Draw(t, "lost") != 0 {
					w.live(c)
				}
			case 4:
				w.step()
			case 5:
				w.fireHole()
			case 6:
				w.room()
			case 7:
				w.paused = false // the retry timer
			case 8:
				w.sessionRoom()
			}
		}

		w.finish(t, from)
	})
}

// fatalf is what testing.T and prop.T share.
type fatalf interface {
	Fatalf(format string, args ...any)
}

// finish ends a run: every row readable, the session takes everything,
// the live envelopes still on their way arrive, then one more row comes
// live (a lost last row is told by the next one's hole); the timers and
// reads run until it is out and the merge is live. Then it checks the
// guarantee.
func (w *world) finish(t fatalf, from uint64) {
	w.answer = func(bool) engine { return delivered }
	w.readable = w.written
	w.room()
	w.sessionRoom()
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
		case w.suspended || w.roomWait:
			w.room()
		case w.roomMsg:
			w.sessionRoom()
		case w.paused:
			w.paused = false
		case w.m.Reading():
			w.step()
		case w.holeDue:
			w.fireHole()
		default:
			w.live(last)
		}
	}
	check(t, w, from, last)
}

// check states the guarantee for what w handed over.
func check(t fatalf, w *world, from, last uint64) {
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
	if len(w.held) > 0 {
		t.Fatalf("%d items still held at the end: %v", len(w.held), w.held)
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

// TestMergeHoleAfterARewind: rows of the catch-up are held back for room
// while the merge goes live; a live envelope goes aside (a hole opens)
// before the session refuses the first held row, so the merge reads again
// from it. The hole's timer goes off during that reading. Once live again,
// a new hole (a gap row, which never comes live) must get its own wait.
func TestMergeHoleAfterARewind(t *testing.T) {
	for _, a := range []engine{noRoom, refused} {
		t.Run(map[engine]string{noRoom: "NoRoom", refused: "Refused"}[a], func(t *testing.T) { holeAfterARewind(t, a) })
	}
}

func holeAfterARewind(t *testing.T, a engine) {
	answers := []engine{heldBack, heldBack, heldBack, a}
	w := &world{page: 4, gap: map[uint64]bool{}, mark: -1, m: catchup.New[uint64](1, 256)}
	w.answer = func(bool) engine {
		if len(answers) == 0 {
			return delivered
		}
		defer func() { answers = answers[1:] }()
		return answers[0]
	}
	w.append(false, true)
	w.append(false, true)
	w.pending = nil
	w.step() // rows 1, 2 held back; live from 3, its CaughtUp held behind them
	w.room()
	w.append(false, true)
	w.append(false, true)
	w.live(4) // the mailbox resumed: 4 is aside, 3 on its way
	w.sessionRoom()
	if !w.m.Reading() || w.m.Next() != 1 {
		t.Fatalf("the first held row was refused: want a reading from 1, got reading %v from %d", w.m.Reading(), w.m.Next())
	}
	w.fireHole() // during the reading
	w.paused = false
	w.room()
	w.sessionRoom()
	w.step()
	w.step()              // rows 1..4, live from 5
	w.append(true, true)  // 5: a gap row
	w.append(false, true) // 6
	w.pending = w.pending[:0]
	w.live(6)
	if !w.holeDue {
		t.Errorf("live from %d, row 6 aside: no hole wait armed for the gap row at 5 (ahead %d): %s", w.m.Next(), w.m.Ahead(), render(w.out))
	}
	w.finish(t, 1)
}

package session

import (
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub/internal/proc"
	"github.com/echopubsub/echopubsub/messages"
)

type stallNote struct {
	stalled bool
	pending int
}

func stallEngine(out Sender, stallAfter time.Duration) *Engine {
	lim := limits()
	lim.StallAfter = stallAfter
	e := New(lim, "n", out, zerolog.Nop(), nil)
	e.SetStallNotice(func(_ *Session, stalled bool, pending int, _ time.Duration) interface{} {
		return stallNote{stalled, pending}
	})
	return e
}

func countStall(msgs []interface{}, stalled bool) int {
	n := 0
	for _, m := range msgs {
		if sn, ok := m.(stallNote); ok && sn.stalled == stalled {
			n++
		}
	}
	return n
}

// A Handoff session's clock does not run while a delivery it was given is
// not yet handed on (that time is the owner's queue, not the consumer's);
// once all was handed on, StallAfter with no ack stalls it.
func TestHandoffStallsOnlyAfterHandedOn(t *testing.T) {
	const stallAfter = 40 * time.Millisecond
	out := newRecorder()
	e := stallEngine(out, stallAfter)
	s := open(t, e, "a")
	e.Handoff(s)
	if o := deliver(e, s, true); o != Delivered {
		t.Fatalf("deliver: %v", o)
	}
	// Polling for a stall that must not come: 5 StallAfter with nothing
	// handed on.
	if proc.Until(5*stallAfter, 5*time.Millisecond, func() bool { return countStall(out.of("owner-a"), true) > 0 }) {
		t.Fatalf("stalled with its delivery not handed on: %s", kinds(out.of("owner-a")))
	}
	handed := time.Now()
	if err := e.Handed("a", 1); err != nil {
		t.Fatal(err)
	}
	if !proc.Until(5*time.Second, 2*time.Millisecond, func() bool { return countStall(out.of("owner-a"), true) == 1 }) {
		t.Fatalf("not stalled after handed on: %s", kinds(out.of("owner-a")))
	}
	if d := time.Since(handed); d < stallAfter {
		t.Fatalf("stalled %v after handed on, want >= StallAfter %v", d, stallAfter)
	}
	if e.Stalled() != 1 {
		t.Fatalf("Stalled() = %d, want 1", e.Stalled())
	}
}

// A stalled session that closes leaves the count; its owner is told
// SessionClosed, not resumed.
func TestClosedStalledSessionLeavesTheCount(t *testing.T) {
	out := newRecorder()
	e := stallEngine(out, 20*time.Millisecond)
	s := open(t, e, "a")
	deliver(e, s, true)
	if !proc.Until(5*time.Second, 2*time.Millisecond, func() bool { return e.Stalled() == 1 }) {
		t.Fatalf("not stalled: %s", kinds(out.of("owner-a")))
	}
	e.Close("a", messages.SessionCloseReason_SESSION_CLOSE_REASON_CLOSED, "")
	if e.Stalled() != 0 {
		t.Fatalf("Stalled() = %d after close, want 0", e.Stalled())
	}
	if got := kinds(out.of("owner-a")); got != "d1 session.stallNote SESSION_CLOSE_REASON_CLOSED " {
		t.Fatalf("owner got %q", got)
	}
}

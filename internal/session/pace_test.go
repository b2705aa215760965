package session

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub/messages"
)

// pacer records Hold and Room calls, in order.
type pacer struct {
	mu    sync.Mutex
	calls []string
	room  chan struct{}
}

func (p *pacer) Hold(*Session) { p.add("hold") }
func (p *pacer) Room(*Session) {
	p.add("room")
	select {
	case p.room <- struct{}{}:
	default:
	}
}

func (p *pacer) add(c string) {
	p.mu.Lock()
	p.calls = append(p.calls, c)
	p.mu.Unlock()
}

func (p *pacer) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmtCalls(p.calls)
}

func fmtCalls(c []string) string {
	s := ""
	for _, x := range c {
		s += x + " "
	}
	return s
}

func pace(e *Engine, s *Session, durable bool) Outcome {
	return e.Pace(s, durable, func(id uint64) interface{} { return delivered{id} })
}

// Pace holds a durable delivery at SoftQueue (Hold on each), never an
// ephemeral one; acks down to SoftQueue/2 end the wait
// (Room); Wait without an ack ends it too, and the session is then paced
// no more (SOFT_QUEUE_EXCEEDED, then HardQueue closes it) until an ack.
func TestPaceHoldsAtSoftQueueUntilRoomOrStall(t *testing.T) {
	lim := Limits{SoftQueue: 4, HardQueue: 6, MaxReservations: 100, MaxBatchItems: 10, Wait: 50 * time.Millisecond}
	out := newRecorder()
	e := New(lim, "n", out, zerolog.Nop(), nil)
	p := &pacer{room: make(chan struct{}, 1)}
	e.SetPacer(p)
	s := open(t, e, "a")
	for i := 0; i < 4; i++ {
		if o := pace(e, s, true); o != Delivered {
			t.Fatalf("delivery %d: %v", i+1, o)
		}
	}
	if o := pace(e, s, true); o != Held {
		t.Fatalf("at SoftQueue: %v, want Held", o)
	}
	if o := pace(e, s, true); o != Held || p.String() != "hold hold " {
		t.Fatalf("held again: %v, calls %s", o, p)
	}
	if o := pace(e, s, false); o != Delivered {
		t.Fatalf("ephemeral: %v", o)
	}
	for _, id := range []uint64{1, 2} { // 3, then 2 = SoftQueue/2: room
		if _, err := e.Ack("a", id); err != nil {
			t.Fatal(err)
		}
	}
	<-p.room
	if p.String() != "hold hold room " {
		t.Fatalf("calls %s", p)
	}
	for i := 0; i < 2; i++ {
		if o := pace(e, s, true); o != Delivered {
			t.Fatalf("after room, delivery %d: %v", i+1, o)
		}
	}
	if o := pace(e, s, true); o != Held {
		t.Fatalf("at SoftQueue again: %v", o)
	}
	select { // no ack for Wait: stalled
	case <-p.room:
	case <-time.After(10 * time.Second):
		t.Fatalf("no room after Wait: %s", p)
	}
	for i, want := range []Outcome{Delivered, Delivered, ClosedHardQueue} { // 5, 6, then HardQueue
		if o := pace(e, s, true); o != want {
			t.Fatalf("stalled, delivery %d: %v, want %v", i+1, o, want)
		}
	}
	if p.String() != "hold hold room hold room " {
		t.Fatalf("calls %s", p)
	}
	var states []string
	for _, m := range out.of("owner-a") {
		switch m := m.(type) {
		case *messages.SessionPressure:
			states = append(states, m.State.String())
		case *messages.SessionClosed:
			states = append(states, m.Reason.String())
		}
	}
	if got := fmtCalls(states); got != "SESSION_PRESSURE_STATE_SOFT_QUEUE_EXCEEDED SESSION_CLOSE_REASON_HARD_QUEUE " {
		t.Fatalf("owner told %s", got)
	}
}

// An ack ends a stall: the session is paced again. Close ends a wait.
func TestPaceAfterAnAckAndClose(t *testing.T) {
	lim := Limits{SoftQueue: 2, HardQueue: 10, MaxReservations: 100, MaxBatchItems: 10, Wait: 20 * time.Millisecond}
	e := New(lim, "n", newRecorder(), zerolog.Nop(), nil)
	p := &pacer{room: make(chan struct{}, 1)}
	e.SetPacer(p)
	s := open(t, e, "a")
	pace(e, s, true)
	pace(e, s, true)
	if o := pace(e, s, true); o != Held {
		t.Fatalf("%v, want Held", o)
	}
	<-p.room // stalled
	if o := pace(e, s, true); o != Delivered {
		t.Fatalf("stalled: %v", o)
	}
	if _, err := e.Ack("a", 1); err != nil { // pending 2: paced again
		t.Fatal(err)
	}
	if o := pace(e, s, true); o != Held {
		t.Fatalf("after an ack: %v, want Held", o)
	}
	e.Close("a", messages.SessionCloseReason_SESSION_CLOSE_REASON_CLOSED, "test")
	<-p.room
	if o := pace(e, s, true); o != NotOpen || p.String() != "hold room hold room " {
		t.Fatalf("closed: %v, calls %s", o, p)
	}
}

// Catch without a wait (Limits.Wait 0): a catch-up row that would take the
// session above SoftQueue is NoRoom, not sent and not held (no Hold: the
// actor goes on with its other topics); the ack that brings pending down to
// SoftQueue/2 calls Room once, so the catch-up resumes at the owner's pace
// rather than a timer's. An ack above SoftQueue/2 does not; Close does.
func TestCatchWithoutWaitResumesOnTheAckThatMakesRoom(t *testing.T) {
	lim := Limits{SoftQueue: 4, HardQueue: 10, MaxReservations: 100, MaxBatchItems: 10}
	e := New(lim, "n", newRecorder(), zerolog.Nop(), nil)
	p := &pacer{room: make(chan struct{}, 1)}
	e.SetPacer(p)
	s := open(t, e, "a")
	catch := func() Outcome { return e.Catch(s, func(id uint64) interface{} { return delivered{id} }) }
	for i := 0; i < 4; i++ {
		if o := catch(); o != Delivered {
			t.Fatalf("row %d: %v", i+1, o)
		}
	}
	for i := 0; i < 2; i++ {
		if o := catch(); o != NoRoom {
			t.Fatalf("at SoftQueue: %v, want NoRoom", o)
		}
	}
	if _, err := e.Ack("a", 1); err != nil { // pending 3: above SoftQueue/2
		t.Fatal(err)
	}
	if got := p.String(); got != "" {
		t.Fatalf("NoRoom, then an ack that leaves pending above SoftQueue/2: calls %q, want none", got)
	}
	if _, err := e.Ack("a", 2); err != nil { // pending 2 = SoftQueue/2: room
		t.Fatal(err)
	}
	if got := p.String(); got != "room " {
		t.Fatalf("calls %q after the ack that made room, want one room", got)
	}
	if _, err := e.Ack("a", 3); err != nil { // no catch-up waits now
		t.Fatal(err)
	}
	if got := p.String(); got != "room " {
		t.Fatalf("calls %q after an ack with nothing waiting, want one room", got)
	}
	for i := 0; i < 3; i++ {
		if o := catch(); o != Delivered {
			t.Fatalf("after room, row %d: %v", i+1, o)
		}
	}
	if o := catch(); o != NoRoom {
		t.Fatalf("at SoftQueue again: %v, want NoRoom", o)
	}
	e.Close("a", messages.SessionCloseReason_SESSION_CLOSE_REASON_CLOSED, "test")
	if got := p.String(); got != "room room " {
		t.Fatalf("calls %q after Close, want room room", got)
	}
}

// noRoom fails if p is told Room within d (a stall the clock must not
// make); d bounds how long the clock had to make it.
func noRoom(t *testing.T, p *pacer, d time.Duration, what string) {
	t.Helper()
	select {
	case <-p.room:
		t.Fatalf("%s: room (a stall) within %v: %s", what, d, p)
	case <-time.After(d):
	}
}

// A Handoff session's clock runs only once every delivery it issued was
// handed on (Handed): time in the owner's own queue never counts. Once
// all are, Wait with no ack stalls it as any session.
func TestPaceHandoffClockStartsWhenAllHanded(t *testing.T) {
	const wait = 30 * time.Millisecond
	lim := Limits{SoftQueue: 4, HardQueue: 100, MaxReservations: 1000, MaxBatchItems: 10, Wait: wait}
	e := New(lim, "n", newRecorder(), zerolog.Nop(), nil)
	p := &pacer{room: make(chan struct{}, 1)}
	e.SetPacer(p)
	s := open(t, e, "a")
	e.Handoff(s)
	for i := 0; i < 4; i++ {
		pace(e, s, true)
	}
	if o := pace(e, s, true); o != Held {
		t.Fatalf("at SoftQueue: %v, want Held", o)
	}
	noRoom(t, p, 5*wait, "nothing handed on")
	if err := e.Handed("a", 3); err != nil {
		t.Fatal(err)
	}
	noRoom(t, p, 5*wait, "3 of 4 handed on")
	if err := e.Handed("a", 5); !errors.Is(err, ErrUnknownDelivery) {
		t.Fatalf("Handed of an id never issued: %v, want ErrUnknownDelivery", err)
	}
	handed := time.Now()
	if err := e.Handed("a", 4); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.room:
		if d := time.Since(handed); d < wait {
			t.Fatalf("stalled %v after the last delivery was handed on, want >= Wait %v", d, wait)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("all handed on, no ack: no stall after 10 s: %s", p)
	}
	if err := e.Handed("a", 2); err != nil { // an older report changes nothing
		t.Fatal(err)
	}
}

// The clock measures Wait with no ack: an owner that acks while held, but
// not yet down to SoftQueue/2, is not stalled; once it stops acking it is.
func TestPaceAckRestartsClock(t *testing.T) {
	const wait = 200 * time.Millisecond
	lim := Limits{SoftQueue: 20, HardQueue: 100, MaxReservations: 1000, MaxBatchItems: 10, Wait: wait}
	e := New(lim, "n", newRecorder(), zerolog.Nop(), nil)
	p := &pacer{room: make(chan struct{}, 1)}
	e.SetPacer(p)
	s := open(t, e, "a")
	for i := 0; i < 20; i++ {
		pace(e, s, true)
	}
	if o := pace(e, s, true); o != Held {
		t.Fatalf("at SoftQueue: %v, want Held", o)
	}
	for id := uint64(1); id <= 8; id++ { // 8 acks over 2*Wait: pending 12, above SoftQueue/2
		noRoom(t, p, wait/4, fmt.Sprintf("acking, before ack %d", id))
		if _, err := e.Ack("a", id); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-p.room:
	case <-time.After(10 * time.Second):
		t.Fatalf("acks stopped: no stall after 10 s: %s", p)
	}
	if p.String() != "hold room " {
		t.Fatalf("calls %s", p)
	}
}

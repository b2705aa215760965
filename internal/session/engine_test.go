package session

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub/messages"
)

// recorder is a Sender that keeps what each PID was sent, in order.
type recorder struct {
	mu      sync.Mutex
	sent    map[string][]interface{}
	stopped []string
}

func newRecorder() *recorder { return &recorder{sent: map[string][]interface{}{}} }

func (r *recorder) Send(pid *actor.PID, msg interface{}) {
	r.mu.Lock()
	r.sent[pid.Id] = append(r.sent[pid.Id], msg)
	r.mu.Unlock()
}

func (r *recorder) Exit(pid *actor.PID) {
	r.mu.Lock()
	r.stopped = append(r.stopped, pid.Id)
	r.mu.Unlock()
}

func (r *recorder) of(id string) []interface{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]interface{}(nil), r.sent[id]...)
}

type delivered struct{ id uint64 }

func deliver(e *Engine, s *Session, durable bool) Outcome {
	return e.Deliver(s, durable, func(id uint64) interface{} { return delivered{id} })
}

func limits() Limits {
	return Limits{SoftQueue: 3, HardQueue: 5, MaxReservations: 100, MaxBatchItems: 4}
}

func open(t testing.TB, e *Engine, id string) *Session {
	t.Helper()
	s, err := e.Open(id, actor.NewPID("local", "owner-"+id), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// kinds summarises what the owner got: d<id> for a delivery, the notice
// state otherwise.
func kinds(msgs []interface{}) string {
	out := ""
	for _, m := range msgs {
		switch m := m.(type) {
		case delivered:
			out += fmt.Sprintf("d%d ", m.id)
		case *messages.SessionPressure:
			out += m.State.String() + " "
		case *messages.SessionClosed:
			out += m.Reason.String() + " "
		default:
			out += fmt.Sprintf("%T ", m)
		}
	}
	return out
}

func TestDeliveryIDsIncreaseAndAckReleasesOne(t *testing.T) {
	r := newRecorder()
	e := New(limits(), "n", r, zerolog.Nop(), nil)
	s := open(t, e, "a")
	for i := 0; i < 3; i++ {
		if o := deliver(e, s, true); o != Delivered {
			t.Fatalf("outcome %v", o)
		}
	}
	if got := kinds(r.of("owner-a")); got != "d1 d2 d3 " {
		t.Fatalf("owner got %q", got)
	}
	if p, err := e.Ack("a", 2); err != nil || p != 2 {
		t.Fatalf("Ack(2) = %d, %v; want 2, nil", p, err)
	}
	if _, err := e.Ack("a", 2); !errors.Is(err, ErrUnknownDelivery) {
		t.Fatalf("second Ack(2): %v, want ErrUnknownDelivery", err)
	}
	if p := e.Pending("a"); p != 2 {
		t.Fatalf("pending %d after a repeated ack, want 2", p)
	}
	for _, bad := range []uint64{0, 4, 99} {
		if _, err := e.Ack("a", bad); !errors.Is(err, ErrUnknownDelivery) {
			t.Fatalf("Ack(%d) never issued: %v", bad, err)
		}
	}
	if _, err := e.Ack("nope", 1); !errors.Is(err, ErrUnknownSession) || err.Error() != `echopubsub: unknown session "nope"` {
		t.Fatalf("unknown session: %v, want ErrUnknownSession naming the id", err)
	}
	if e.Pending("nope") != 0 || e.Reserved() != 2 {
		t.Fatalf("pending(nope) %d, reserved %d", e.Pending("nope"), e.Reserved())
	}
}

func TestEphemeralTakesNoReservation(t *testing.T) {
	r := newRecorder()
	e := New(limits(), "n", r, zerolog.Nop(), nil)
	s := open(t, e, "a")
	for i := 0; i < 10; i++ { // far past HardQueue: nothing to ack, nothing counted
		deliver(e, s, false)
	}
	if e.Pending("a") != 0 || e.Reserved() != 0 {
		t.Fatalf("pending %d reserved %d", e.Pending("a"), e.Reserved())
	}
	if _, err := e.Ack("a", 0); !errors.Is(err, ErrUnknownDelivery) {
		t.Fatalf("Ack of an ephemeral id: %v", err)
	}
	deliver(e, s, true)
	if got := kinds(r.of("owner-a")); got != "d0 d0 d0 d0 d0 d0 d0 d0 d0 d0 d1 " {
		t.Fatalf("owner got %q", got)
	}
}

func TestAckManyAndAckFirst(t *testing.T) {
	e := New(limits(), "n", newRecorder(), zerolog.Nop(), nil)
	s := open(t, e, "a")
	for i := 0; i < 5; i++ {
		deliver(e, s, true)
	}
	acked, unknown, pending, err := e.AckMany("a", []uint64{2, 2, 9, 4}, nil)
	if err != nil || acked != 2 || pending != 3 || fmt.Sprint(unknown) != "[2 9]" {
		t.Fatalf("AckMany = %d %v %d %v", acked, unknown, pending, err)
	}
	if _, _, _, err := e.AckMany("a", []uint64{1, 2, 3, 4, 5}, nil); !errors.Is(err, ErrTooManyItems) {
		t.Fatalf("5 ids over MaxBatchItems 4: %v", err)
	}
	if e.Pending("a") != 3 {
		t.Fatalf("a refused AckMany released something: pending %d", e.Pending("a"))
	}
	// Oldest first: 1, then 3 (2 is gone), then 5.
	for _, want := range []int{2, 1, 0} {
		if p, err := e.AckFirst("a"); err != nil || p != want {
			t.Fatalf("AckFirst = %d, %v; want %d", p, err, want)
		}
	}
	if p, err := e.AckFirst("a"); err != nil || p != 0 {
		t.Fatalf("AckFirst with none = %d, %v", p, err)
	}
	if _, err := e.Ack("a", 5); !errors.Is(err, ErrUnknownDelivery) {
		t.Fatalf("5 was acked by AckFirst: %v", err)
	}
	if _, err := e.AckFirst("x"); !errors.Is(err, ErrUnknownSession) {
		t.Fatalf("AckFirst unknown: %v", err)
	}
	if _, _, _, err := e.AckMany("x", nil, nil); !errors.Is(err, ErrUnknownSession) {
		t.Fatalf("AckMany unknown: %v", err)
	}
}

func TestSoftQueueNoticeOncePerTransition(t *testing.T) {
	r := newRecorder()
	e := New(limits(), "n", r, zerolog.Nop(), nil) // soft 3
	s := open(t, e, "a")
	for i := 0; i < 5; i++ {
		deliver(e, s, true)
	}
	mustAck(t, e, "a", 1) // 4: still above
	mustAck(t, e, "a", 2) // 3: relieved
	mustAck(t, e, "a", 3) // 2: nothing
	deliver(e, s, true)   // 3
	deliver(e, s, true)   // 4: exceeded again
	want := "d1 d2 d3 SESSION_PRESSURE_STATE_SOFT_QUEUE_EXCEEDED d4 d5 SESSION_PRESSURE_STATE_SOFT_QUEUE_RELIEVED d6 SESSION_PRESSURE_STATE_SOFT_QUEUE_EXCEEDED d7 "
	if got := kinds(r.of("owner-a")); got != want {
		t.Fatalf("owner got\n%s\nwant\n%s", got, want)
	}
}

func mustAck(t *testing.T, e *Engine, id string, d uint64) {
	t.Helper()
	if _, err := e.Ack(id, d); err != nil {
		t.Fatalf("Ack(%s, %d): %v", id, d, err)
	}
}

func TestHardQueueDisconnects(t *testing.T) {
	for _, action := range []Action{Disconnect, ExitOwner} {
		t.Run(map[Action]string{Disconnect: "Disconnect", ExitOwner: "ExitOwner"}[action], func(t *testing.T) {
			r := newRecorder()
			lim := limits()
			lim.Action = action
			var closed []string
			e := New(lim, "n", r, zerolog.Nop(), func(s *Session) { closed = append(closed, s.ID()) })
			s := open(t, e, "a")
			for i := 0; i < 5; i++ { // HardQueue 5: all accepted
				if o := deliver(e, s, true); o != Delivered {
					t.Fatalf("delivery %d: %v", i+1, o)
				}
			}
			if e.Pending("a") != 5 {
				t.Fatalf("pending %d", e.Pending("a"))
			}
			if o := deliver(e, s, true); o != ClosedHardQueue {
				t.Fatalf("sixth delivery: %v", o)
			}
			msgs := r.of("owner-a")
			last := msgs[len(msgs)-1].(*messages.SessionClosed)
			if last.Released != 5 || last.Reason != messages.SessionCloseReason_SESSION_CLOSE_REASON_HARD_QUEUE || last.OwnerStopped != (action == ExitOwner) {
				t.Fatalf("close notice %v", last)
			}
			if got := kinds(msgs); got != "d1 d2 d3 SESSION_PRESSURE_STATE_SOFT_QUEUE_EXCEEDED d4 d5 SESSION_CLOSE_REASON_HARD_QUEUE " {
				t.Fatalf("owner got %q (the sixth must not be sent)", got)
			}
			if e.Reserved() != 0 || e.Pending("a") != 0 || fmt.Sprint(closed) != "[a]" {
				t.Fatalf("reserved %d pending %d closed %v", e.Reserved(), e.Pending("a"), closed)
			}
			if _, err := e.Ack("a", 1); !errors.Is(err, ErrUnknownSession) {
				t.Fatalf("Ack after close: %v", err)
			}
			if o := deliver(e, s, true); o != NotOpen {
				t.Fatalf("delivery after close: %v", o)
			}
			if stopped := fmt.Sprint(r.stopped); (action == ExitOwner) != (stopped == "[owner-a]") {
				t.Fatalf("%v: stopped %s", action, stopped)
			}
		})
	}
}

func TestGlobalCapRefusesBeforeSendingAndTellsOncePerTransition(t *testing.T) {
	r := newRecorder()
	lim := limits()
	lim.MaxReservations = 3
	e := New(lim, "n", r, zerolog.Nop(), nil)
	a, b := open(t, e, "a"), open(t, e, "b")
	deliver(e, a, true)
	deliver(e, a, true)
	deliver(e, b, true) // table full: 3
	for i := 0; i < 3; i++ {
		if o := deliver(e, b, true); o != Refused {
			t.Fatalf("outcome %v, want Refused", o)
		}
	}
	if o := deliver(e, b, false); o != Delivered { // ephemeral needs no room
		t.Fatalf("ephemeral: %v", o)
	}
	mustAck(t, e, "a", 1)
	deliver(e, b, true)
	got := r.of("owner-b")
	if k := kinds(got); k != "d1 SESSION_PRESSURE_STATE_RESERVATIONS_FULL d0 SESSION_PRESSURE_STATE_RESERVATIONS_RESUMED d2 " {
		t.Fatalf("owner b got %q", k)
	}
	if n := got[3].(*messages.SessionPressure); n.Refused != 3 || n.MaxReservations != 3 {
		t.Fatalf("resumed notice %v", n)
	}
	if e.Reserved() != 3 {
		t.Fatalf("reserved %d", e.Reserved())
	}
}

func TestCloseReleasesAndTells(t *testing.T) {
	r := newRecorder()
	e := New(limits(), "n", r, zerolog.Nop(), nil)
	s := open(t, e, "a")
	deliver(e, s, true)
	if !e.Close("a", messages.SessionCloseReason_SESSION_CLOSE_REASON_CLOSED, "") {
		t.Fatal("Close of an open session reported false")
	}
	if e.Close("a", messages.SessionCloseReason_SESSION_CLOSE_REASON_CLOSED, "") {
		t.Fatal("second Close reported true")
	}
	if e.Reserved() != 0 || kinds(r.of("owner-a")) != "d1 SESSION_CLOSE_REASON_CLOSED " {
		t.Fatalf("reserved %d, owner got %q", e.Reserved(), kinds(r.of("owner-a")))
	}
	// Owner stopped: released, nobody to tell.
	s2 := open(t, e, "b")
	deliver(e, s2, true)
	e.Close("b", messages.SessionCloseReason_SESSION_CLOSE_REASON_OWNER_STOPPED, "")
	if k := kinds(r.of("owner-b")); k != "d1 " {
		t.Fatalf("owner b got %q", k)
	}
	open(t, e, "c")
	e.CloseAll(messages.SessionCloseReason_SESSION_CLOSE_REASON_PUBSUB_STOPPED, "")
	if k := kinds(r.of("owner-c")); k != "SESSION_CLOSE_REASON_PUBSUB_STOPPED " {
		t.Fatalf("owner c got %q", k)
	}
	if _, err := e.Open("d", actor.NewPID("local", "d"), nil); !errors.Is(err, ErrEngineClosed) {
		t.Fatalf("Open after CloseAll: %v", err)
	}
	if _, err := e.Ack("c", 1); !errors.Is(err, ErrEngineClosed) {
		t.Fatalf("Ack after CloseAll: %v", err)
	}
}

// Concurrent deliveries and acks on one session (run with -race): the
// pending count never passes HardQueue, every ack releases exactly one
// reservation, and the node-wide count returns to zero.
func TestConcurrentDeliverAndAck(t *testing.T) {
	lim := Limits{SoftQueue: 50, HardQueue: 100, MaxReservations: 1000, MaxBatchItems: 100}
	e := New(lim, "n", nopSender{}, zerolog.Nop(), nil)
	s := open(t, e, "a")
	ids := make(chan uint64, 100)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer close(ids)
		for i := 0; i < 20000; i++ {
			if e.Pending("a") >= lim.HardQueue { // a well-behaved consumer keeps up
				i--
				continue
			}
			e.Deliver(s, true, func(id uint64) interface{} { ids <- id; return nil })
		}
	}()
	var acked int
	go func() {
		defer wg.Done()
		for id := range ids {
			if p, err := e.Ack("a", id); err != nil || p > lim.HardQueue {
				t.Errorf("Ack(%d) = %d, %v", id, p, err)
				return
			}
			acked++
		}
	}()
	wg.Wait()
	if acked != 20000 || e.Pending("a") != 0 || e.Reserved() != 0 {
		t.Fatalf("acked %d, pending %d, reserved %d", acked, e.Pending("a"), e.Reserved())
	}
}

type nopSender struct{}

func (nopSender) Send(*actor.PID, interface{}) {}
func (nopSender) Exit(*actor.PID)              {}

// BenchmarkReserveAndAck is the cost of one durable reservation (delivery
// id, table insert, global count) plus its ack, without the mailbox send.
func BenchmarkReserveAndAck(b *testing.B) {
	e := New(Limits{SoftQueue: 500, HardQueue: 2000, MaxReservations: 2_000_000, MaxBatchItems: 1000}, "n", nopSender{}, zerolog.Nop(), nil)
	s, _ := e.Open("a", actor.NewPID("local", "o"), nil)
	var last uint64
	build := func(id uint64) interface{} { last = id; return nil }
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e.Deliver(s, true, build)
		if _, err := e.Ack("a", last); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAck is the ack path alone, over a session holding 1000
// reservations (refilled outside the timer).
func BenchmarkAck(b *testing.B) {
	e := New(Limits{SoftQueue: 5000, HardQueue: 10000, MaxReservations: 2_000_000, MaxBatchItems: 1000}, "n", nopSender{}, zerolog.Nop(), nil)
	s, _ := e.Open("a", actor.NewPID("local", "o"), nil)
	build := func(uint64) interface{} { return nil }
	b.ReportAllocs()
	b.ResetTimer()
	next := uint64(1)
	for i := 0; i < b.N; i++ {
		if i%1000 == 0 {
			b.StopTimer()
			for j := 0; j < 1000; j++ {
				e.Deliver(s, true, build)
			}
			b.StartTimer()
		}
		if _, err := e.Ack("a", next); err != nil {
			b.Fatal(err)
		}
		next++
	}
}

// The ack path does not allocate (nor does a reservation, once the
// session's table has grown), with stalls watched (the watch's timer is
// made once per session, then reset) as without.
func TestAckDoesNotAllocate(t *testing.T) {
	for _, watched := range []bool{false, true} {
		t.Run(fmt.Sprintf("watched=%v", watched), func(t *testing.T) { ackDoesNotAllocate(t, watched) })
	}
}

func ackDoesNotAllocate(t *testing.T, watched bool) {
	e := New(Limits{SoftQueue: 500, HardQueue: 2000, MaxReservations: 1 << 20, MaxBatchItems: 1000, StallAfter: time.Hour}, "n", nopSender{}, zerolog.Nop(), nil)
	if watched {
		e.SetStallNotice(func(*Session, bool, int, time.Duration) interface{} { return nil })
	}
	s, _ := e.Open("a", actor.NewPID("local", "o"), nil)
	var last uint64
	build := func(id uint64) interface{} { last = id; return nil }
	for i := 0; i < 100; i++ { // grow the table once
		e.Deliver(s, true, build)
	}
	for i := uint64(1); i <= 100; i++ {
		mustAck(t, e, "a", i)
	}
	if n := testing.AllocsPerRun(1000, func() { e.Deliver(s, true, build); _, _ = e.Ack("a", last) }); n != 0 {
		t.Fatalf("a reservation and its ack allocate %v times", n)
	}
	if n := testing.AllocsPerRun(1000, func() { _, _ = e.Ack("a", 1) }); n != 0 {
		t.Fatalf("an ack of an unknown delivery allocates %v times", n)
	}
}

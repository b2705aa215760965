package stream

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/messages"
)

// sendCtx is fakeCtx that also records what the actor sends, and to whom.
type sendCtx struct {
	fakeCtx
	self   *actor.PID
	system *actor.ActorSystem
	sends  []sent
}

type sent struct {
	to  *actor.PID
	msg interface{}
}

func (c *sendCtx) Self() *actor.PID                    { return c.self }
func (c *sendCtx) Send(to *actor.PID, msg interface{}) { c.sends = append(c.sends, sent{to, msg}) }
func (c *sendCtx) Respond(res interface{})             { c.Send(c.sender, res) }
func (c *sendCtx) ActorSystem() *actor.ActorSystem     { return c.system }

// encodedBatch is n entries on topic "t" from producer node "p",
// incarnation 1, starting at first.
func encodedBatch(first uint64, n int) *messages.Batch {
	return encodedBatchOf(first, n, false)
}

// encodedBatchOf is encodedBatch, awaited: a receipt waits on it.
func encodedBatchOf(first uint64, n int, awaited bool) *messages.Batch {
	var e messages.BatchEncoder
	for i := 0; i < n; i++ {
		e.Add("t", "echopubsub.v1.CursorExpired", []byte{0x08, byte(i)}, "", "", 0)
	}
	return messages.Encoded(e.Encode(messages.BatchHeader{ProtocolVersion: messages.ProtocolVersion, PubsubName: "fz",
		ProducerNode: "p", ProducerIncarnation: 1, Group: 1, FirstCursor: first, Awaited: awaited}))
}

// A worker answers the batches a producer sent it itself (this build's
// producers: the sender is the producer's PID) once for all those queued
// together: the answer, sent when the flushAcks queued behind them is
// handled, names the last batch and the cursor past it. Batches asked
// through a future (earlier builds) are answered one by one, at once. A
// refusal goes at once, after the held answer, so a producer reads its
// answers in the order it sent.
func TestWorkerAnswersQueuedBatchesOnce(t *testing.T) {
	fw := newFuzzWorker()
	w := fw.w.(*worker)
	if ra, _ := ask(t, w, join("p", 1)); ra.Status != messages.AckStatus_ACK_STATUS_OK {
		t.Fatalf("join refused: %v %q", ra.Status, ra.Error)
	}
	self := actor.NewPID("worker-node", "echopubsub/fz/g1/worker")
	prod := actor.NewPID("p", "echopubsub/fz/g1/producer")
	var queued []interface{} // the worker's mailbox, as the test plays it
	var out []sent
	handle := func(msg interface{}, sender *actor.PID) {
		ctx := &sendCtx{fakeCtx: fakeCtx{msg: msg, sender: sender}, self: self}
		w.Receive(ctx)
		for _, s := range ctx.sends {
			if s.to == self {
				queued = append(queued, s.msg)
			} else {
				out = append(out, s)
			}
		}
	}
	handle(encodedBatch(0, 2), prod)
	handle(encodedBatch(2, 3), prod)
	handle(encodedBatch(5, 1), prod)
	if len(out) != 0 {
		t.Fatalf("answers sent before the queued batches were handled: %v", out)
	}
	if len(queued) != 1 {
		t.Fatalf("%d flushes queued, want 1", len(queued))
	}
	handle(queued[0], nil)
	if len(out) != 1 {
		t.Fatalf("%d answers to 3 queued batches, want 1", len(out))
	}
	ack := out[0].msg.(*messages.BatchAck)
	if out[0].to != prod || ack.Status != messages.AckStatus_ACK_STATUS_OK || ack.NextCursor != 6 ||
		ack.BatchFirstCursor == nil || *ack.BatchFirstCursor != 5 || ack.ProducerIncarnation != 1 {
		t.Fatalf("answer %v to %v, want OK at 6 naming batch 5 of incarnation 1, to the producer", ack, out[0].to)
	}

	// A gap: held OK answer first, then the refusal, in that order.
	out, queued = nil, nil
	handle(encodedBatch(6, 1), prod)
	handle(encodedBatch(9, 1), prod) // 7 and 8 lost on the way
	if len(out) != 2 {
		t.Fatalf("after a gap: %d answers, want the held one and the refusal", len(out))
	}
	if a := out[0].msg.(*messages.BatchAck); a.Status != messages.AckStatus_ACK_STATUS_OK || a.NextCursor != 7 {
		t.Fatalf("first answer %v, want the held OK at 7", a)
	}
	if a := out[1].msg.(*messages.BatchAck); a.Status != messages.AckStatus_ACK_STATUS_OUT_OF_ORDER || a.NextCursor != 7 ||
		a.BatchFirstCursor == nil || *a.BatchFirstCursor != 9 {
		t.Fatalf("second answer %v, want OUT_OF_ORDER at 7 naming batch 9", a)
	}
	for _, q := range queued {
		handle(q, nil)
	}

	// Through a future: one answer per batch, at once.
	out = nil
	future := actor.NewPID("p", "future$1")
	handle(encodedBatch(7, 1), future)
	handle(encodedBatch(8, 1), future)
	if len(out) != 2 || out[0].msg.(*messages.BatchAck).NextCursor != 8 || out[1].msg.(*messages.BatchAck).NextCursor != 9 {
		t.Fatalf("answers through a future: %v, want one per batch (8, 9)", out)
	}
}

// answeredBy matches answers to flights: an answer names its batch and
// covers every flight up to it (FIFO: those before it lost their answers
// or were answered with it); an OK answer also covers every flight that
// ends at or below its cursor, wherever it is; an answer naming no flight
// in flight covers none, unless OK and past some flight's end.
func TestAnsweredByMatchesFlights(t *testing.T) {
	fl, mk := flightOf, peerWith
	ok, refused := messages.AckStatus_ACK_STATUS_OK, messages.AckStatus_ACK_STATUS_OUT_OF_ORDER
	for _, tc := range []struct {
		name       string
		flights    []flight
		ack        *messages.BatchAck
		found      bool
		lastFirst  uint64
		n, batches int
		left       []flight
	}{
		{"cumulative OK", []flight{fl(0, 2, 1), fl(2, 5, 1), fl(5, 6, 1)},
			&messages.BatchAck{Status: ok, NextCursor: 5, BatchFirstCursor: proto.Uint64(2)}, true, 2, 5, 2, []flight{fl(5, 6, 1)}},
		{"OK past the batch named (a resent batch the worker had)", []flight{fl(0, 2, 1), fl(2, 5, 1), fl(5, 6, 1)},
			&messages.BatchAck{Status: ok, NextCursor: 9, BatchFirstCursor: proto.Uint64(2)}, true, 2, 6, 3, nil},
		{"OK for the older of two copies of a range", []flight{fl(0, 2, 1), fl(2, 5, 1), fl(0, 2, 2)},
			&messages.BatchAck{Status: ok, NextCursor: 2, BatchFirstCursor: proto.Uint64(0)}, true, 0, 4, 2, []flight{fl(2, 5, 1)}},
		{"refusal", []flight{fl(0, 2, 1), fl(2, 5, 1), fl(5, 6, 1)},
			&messages.BatchAck{Status: refused, NextCursor: 0, BatchFirstCursor: proto.Uint64(2)}, true, 2, 5, 2, []flight{fl(5, 6, 1)}},
		{"refusal of a batch not in flight", []flight{fl(0, 2, 1), fl(2, 5, 1)},
			&messages.BatchAck{Status: refused, NextCursor: 9, BatchFirstCursor: proto.Uint64(7)}, false, 0, 0, 0, []flight{fl(0, 2, 1), fl(2, 5, 1)}},
		{"OK for a batch not in flight, below every flight's end", []flight{fl(3, 5, 1)},
			&messages.BatchAck{Status: ok, NextCursor: 3, BatchFirstCursor: proto.Uint64(1)}, false, 0, 0, 0, []flight{fl(3, 5, 1)}},
	} {
		pe := mk(tc.flights...)
		last, n, batches, found := pe.answeredBy(tc.ack)
		if found != tc.found || (found && last.first != tc.lastFirst) || n != tc.n || batches != tc.batches {
			t.Errorf("%s: found=%v last=%v n=%d batches=%d, want %v, first %d, %d, %d", tc.name, found, last, n, batches, tc.found, tc.lastFirst, tc.n, tc.batches)
		}
		msgs, size := 0, 0
		for _, f := range tc.left {
			msgs, size = msgs+f.n, size+f.size
		}
		if len(pe.flights) != len(tc.left) || pe.flightMsgs != msgs || pe.flightBytes != size {
			t.Errorf("%s: left %v (%d, %d entries, %d bytes), want %v", tc.name, pe.flights, len(pe.flights), pe.flightMsgs, pe.flightBytes, tc.left)
			continue
		}
		for i := range tc.left {
			if pe.flights[i] != tc.left[i] {
				t.Errorf("%s: left %v, want %v", tc.name, pe.flights, tc.left)
				break
			}
		}
	}
}

// Held answers: one answer says stored of every batch it covers, so an
// answer whose stored differs from the held one's sends the held one
// first; the hook hears of each batch's answer when it goes, not when it is
// held; a worker told to stop sends what it holds (the flushAcks behind
// them would not run); and a registration says the worker answers
// cumulatively.
func TestWorkerHeldAnswers(t *testing.T) {
	fw := newFuzzWorker()
	w := fw.w.(*worker)
	hook := &fromHook{model: fw.m}
	w.hook = hook
	if ra, _ := ask(t, w, join("p", 1)); ra.Status != messages.AckStatus_ACK_STATUS_OK || !ra.CumulativeAnswers {
		t.Fatalf("join answered %v %q, cumulative_answers %v: want OK, true", ra.Status, ra.Error, ra.CumulativeAnswers)
	}
	hook.from = nil
	self := actor.NewPID("worker-node", "echopubsub/fz/g1/worker")
	prod := actor.NewPID("p", "echopubsub/fz/g1/producer")
	var out []sent
	answer := func(first uint64, stored bool) {
		ctx := &sendCtx{fakeCtx: fakeCtx{sender: prod}, self: self}
		w.answer(ctx, "p", &messages.Batch{ProducerNode: "p", ProducerIncarnation: 1, FirstCursor: first},
			&messages.BatchAck{Status: messages.AckStatus_ACK_STATUS_OK, NextCursor: first + 1, Stored: stored})
		for _, s := range ctx.sends {
			if s.to != self {
				out = append(out, s)
			}
		}
	}
	answer(0, true)
	answer(1, true)
	if len(out) != 0 || len(hook.from) != 0 {
		t.Fatalf("answers sent (%d) or told to the hook (%d) while held", len(out), len(hook.from))
	}
	answer(2, false) // stored differs: the held answer (at 2, stored) goes first
	if len(out) != 1 || !out[0].msg.(*messages.BatchAck).Stored || out[0].msg.(*messages.BatchAck).NextCursor != 2 {
		t.Fatalf("after an answer of another stored: sent %v, want the held one (stored, at 2)", out)
	}
	if len(hook.from) != 2 {
		t.Fatalf("hook told of %d answers, want the 2 the sent answer covers", len(hook.from))
	}
	ctx := &sendCtx{fakeCtx: fakeCtx{msg: &actor.Stopping{}}, self: self}
	w.Receive(ctx)
	if len(ctx.sends) != 1 || ctx.sends[0].to != prod || ctx.sends[0].msg.(*messages.BatchAck).NextCursor != 3 ||
		ctx.sends[0].msg.(*messages.BatchAck).Stored {
		t.Fatalf("told to stop, the worker sent %v, want the held answer (at 3, not stored) to the producer", ctx.sends)
	}
	if len(hook.from) != 3 {
		t.Fatalf("hook told of %d answers, want 3", len(hook.from))
	}
}

// flightOf is the flight [first, to) of epoch epoch, 10 bytes an entry.
func flightOf(first, to, epoch uint64) flight {
	return flight{first: first, to: to, n: int(to - first), size: int(to-first) * 10, epoch: epoch}
}

// peerWith is a peer with fs in flight, counted.
func peerWith(fs ...flight) *peer {
	pe := &peer{}
	for _, f := range fs {
		pe.flights = append(pe.flights, f)
		pe.flightMsgs += f.n
		pe.flightBytes += f.size
	}
	return pe
}

// An OK answer says the worker delivered every cursor below next_cursor,
// so every flight that ends at or below it is done, whatever batch the
// answer names. (Found in review: left in flight, such flights kept the
// window shut until onAckCheck gave up on them: rewind, failed(), a
// RetryInterval pause, for a peer that had answered everything.)
func TestOKAnswerCoversEveryDeliveredFlight(t *testing.T) {
	ok := messages.AckStatus_ACK_STATUS_OK
	fl, mk := flightOf, peerWith

	// A redelivery: the producer gave up on [0,5) (CallTimeout) and resent
	// [0,2) after a rewind; the worker, at 5 already, answers OK at 5
	// naming batch 0. The flight [0,2) is delivered.
	pe := mk(fl(0, 2, 2))
	pe.answeredBy(&messages.BatchAck{Status: ok, NextCursor: 5, BatchFirstCursor: proto.Uint64(0)})
	if len(pe.flights) != 0 {
		t.Errorf("redelivery answered OK at 5: %d flight(s) left in flight (%v), want 0: the worker delivered them", len(pe.flights), pe.flights)
	}

	// The same batch [2,3) in flight twice: once from an earlier epoch
	// (its answer lost), once resent after the rewind. The worker's
	// cumulative answer (OK at 3, naming 2) says everything below 3 is
	// delivered: no flight is left.
	pe = mk(fl(2, 3, 1), fl(0, 1, 2), fl(1, 2, 2), fl(2, 3, 2))
	pe.answeredBy(&messages.BatchAck{Status: ok, NextCursor: 3, BatchFirstCursor: proto.Uint64(2)})
	if len(pe.flights) != 0 {
		t.Errorf("cumulative OK at 3 with [2,3) in flight twice: %d flight(s) left (%v), want 0", len(pe.flights), pe.flights)
	}
}

// Under a steady stream a worker answers a producer at most once per
// AckInterval: the first answer after a quiet interval goes at the
// mailbox's turn, later ones when the interval has passed (ackTimer), and
// a batch a receipt waits on (Batch.awaited) is answered at the mailbox's
// turn whatever the interval. Told to stop, it sends what it holds and
// stops its timer.
func TestWorkerSpacesAnswers(t *testing.T) {
	// The checks that an answer is held run right after the answer they
	// are held behind: they hold only while less than interval has passed,
	// so interval is far more than a loaded machine may pause the test
	// between two statements (150 ms failed with a planted 200 ms pause).
	const interval = time.Second
	fw := newFuzzWorker()
	w := fw.w.(*worker)
	w.cfg.AckInterval = interval
	if ra, _ := ask(t, w, join("p", 1)); ra.Status != messages.AckStatus_ACK_STATUS_OK {
		t.Fatalf("join refused: %v %q", ra.Status, ra.Error)
	}
	// The worker's PID is an actor of a real system that takes what the
	// timer sends it, so the test hands it to the worker as its mailbox would.
	system := actor.NewActorSystem()
	defer system.Shutdown()
	fromTimer := make(chan interface{}, 8)
	self, err := system.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
		if f, ok := c.Message().(*flushAcks); ok {
			fromTimer <- f
		}
	}), "worker")
	if err != nil {
		t.Fatal(err)
	}
	prod := actor.NewPID("p", "echopubsub/fz/g1/producer")
	var queued []interface{}
	var out []*messages.BatchAck
	handle := func(msg interface{}, sender *actor.PID) {
		ctx := &sendCtx{fakeCtx: fakeCtx{msg: msg, sender: sender}, self: self, system: system}
		w.Receive(ctx)
		for _, s := range ctx.sends {
			if s.to == self {
				queued = append(queued, s.msg)
			} else {
				out = append(out, s.msg.(*messages.BatchAck))
			}
		}
	}
	runQueued := func() {
		for len(queued) > 0 {
			q := queued[0]
			queued = queued[1:]
			handle(q, nil)
		}
	}
	answered := func(when string, next uint64) {
		t.Helper()
		if len(out) != 1 || out[0].NextCursor != next {
			t.Fatalf("%s: answers %v, want one at %d", when, out, next)
		}
		out = nil
	}

	handle(encodedBatch(0, 1), prod)
	runQueued()
	answered("first batch after a quiet interval", 1)
	last := w.lastAnswer

	handle(encodedBatch(1, 1), prod)
	handle(encodedBatch(2, 1), prod)
	if len(out) != 0 || len(queued) != 0 {
		t.Fatalf("within AckInterval of the last answer: answers %v, flushes queued %d, want none (held for the timer)", out, len(queued))
	}

	handle(encodedBatchOf(3, 1, true), prod)
	runQueued()
	answered("a batch a receipt waits on", 4)

	handle(encodedBatch(4, 1), prod)
	runQueued()
	if len(out) != 0 {
		t.Fatalf("a batch after the awaited one: answers %v, want it held", out)
	}
	select {
	case f := <-fromTimer:
		if now := core.Monotonic(); now < last+int64(interval) {
			t.Fatalf("the timer's flush came %v after the answer it spaces, want >= %v", time.Duration(now-last), interval)
		}
		handle(f, nil)
	case <-time.After(10 * time.Second):
		t.Fatal("no flush from the timer within 10s: the held answer never goes")
	}
	answered("the timer's flush", 5)

	handle(encodedBatch(5, 1), prod)
	if len(out) != 0 {
		t.Fatalf("right after the timer's answer: answers %v, want it held", out)
	}
	handle(&actor.Stopping{}, nil)
	answered("told to stop", 6)
	if w.ackTimer.Stop() {
		t.Fatal("the answer timer is still armed after Stopping")
	}
}

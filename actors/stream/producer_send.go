package stream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/internal/plant"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/ringbuf"
)

// capacity warns (throttled by CapacityWarningInterval) when a node's lag
// reaches CapacityWarningThreshold of the buffer: it is the slowest node
// that crosses it first.
func (p *producer) capacity(ctx actor.Context, pe *peer, lag uint64) {
	if float64(lag) < p.cfg.CapacityWarningThreshold*float64(p.cfg.BufferSize) ||
		time.Since(p.lastWarn) < p.cfg.CapacityWarningInterval {
		return
	}
	p.lastWarn = time.Now()
	p.log.Warn().Str("peer", pe.m.Name).Uint64("lag", lag).Int("buffer_size", p.cfg.BufferSize).
		Msg("buffer capacity warning: a node is far behind")
	ctx.ActorSystem().EventStream.Publish(&messages.CapacityWarning{Pubsub: p.cfg.Name, Group: p.group,
		Node: pe.m.Name, Lag: lag, Capacity: p.cfg.BufferSize})
}

// service sends pe what it needs next, if it can take it now. At most one
// call is in flight per node, which keeps each node's stream in order.
func (p *producer) service(ctx actor.Context, pe *peer) {
	if pe.absent || pe.inFlight || pe.retrying {
		return
	}
	if !pe.callable {
		p.reach(ctx, pe)
		return
	}
	if !pe.registered {
		if len(pe.flights) == 0 {
			p.register(ctx, pe)
		}
		return
	}
	d, err := p.ring.Decide(pe.next)
	if err != nil { // a cursor ahead of the write cursor: never set by us
		p.log.Error().Err(err).Str("peer", pe.m.Name).Msg("read cursor ahead of write cursor: re-registering")
		pe.next, pe.registered = p.ring.WriteCursor(), false
		p.rewind(pe)
		return
	}
	p.capacity(ctx, pe, d.Lag)
	pe.gauge.SetLag(d.Lag, p.cfg.BufferSize)
	p.watch(pe, d.Lag)
	switch d.Kind {
	case ringbuf.CaughtUp:
		pe.due = false
		if p.drainTo != nil && !pe.retired && len(pe.flights) == 0 {
			p.sendRetire(ctx, pe)
		}
	case ringbuf.Messages:
		if pe.sent < d.From { // everything below next is acked: never resend it
			pe.sent = d.From
		}
		for pe.sent < d.To && !pe.retrying { // a failed send stops the round
			if p.partWaits(pe) {
				break
			}
			if !p.windowOpen(pe) {
				break // the batch waits for room: the ack that makes it sends it
			}
			p.sendBatch(ctx, pe, ringbuf.Decision{Kind: ringbuf.Messages, From: pe.sent, To: d.To})
		}
		if pe.sent >= d.To {
			pe.due = false
		}
	case ringbuf.Expired:
		if len(pe.flights) == 0 { // what is in flight may still be acked: decide after it
			p.sendExpire(ctx, pe, d)
		}
	}
}

// partWaits reports whether a part batch for pe (less than full, see full)
// waits for the batches in flight to be acknowledged. With a BatchInterval
// it does: under light load that makes fewer and fuller batches, and the
// interval already bounds the wait. With BatchInterval 0 it goes as soon as
// the window has room: the flush that sends it runs after the writes queued
// in the mailbox (armFlush), which coalesces them, and waiting for the ack
// in flight would add up to a round trip to every message published while a
// batch is out: most of the tail had waited so (docs/benchmarks.md,
// "Figures behind code comments").
//
// A part batch that holds a write a receipt waits on does not wait for the
// answers to the batches in flight (a round trip; they are not held for
// the worker's AckInterval: see answerNow).
func (p *producer) partWaits(pe *peer) bool {
	return p.cfg.BatchInterval > 0 && len(pe.flights) > 0 && !p.full(pe) &&
		!p.awaited(pe.sent, p.ring.WriteCursor())
}

// burstTail reports whether pe's part batch goes without waiting for the
// flush: nothing is in flight and a full batch went since the last flush.
// The load fills batches, so the window, not the interval, paces them; the
// interval would only delay the part batch that ends the burst (a
// repetition's last part batch waited up to BatchInterval, which cost a
// BatchInterval throughput: docs/benchmarks.md, "Figures behind code
// comments"). Under light load no batch is full and the interval batches
// as before.
func (p *producer) burstTail(pe *peer) bool {
	return p.cfg.BatchInterval > 0 && pe.burst && len(pe.flights) == 0 && pe.sent < p.ring.WriteCursor()
}

// rewind forgets what was sent past next: the next batch starts at next.
// Answers to batches sent before count as acks only.
func (p *producer) rewind(pe *peer) {
	pe.sent = pe.next
	pe.epoch++
}

// sendBatch sends the batch starting at d.From (== pe.sent) as one of the
// peer's batches in flight. The worker takes a batch only at its next
// cursor: one that arrives after a lost one is refused (OUT_OF_ORDER) and
// the producer sends again from the worker's cursor, so the stream a worker
// delivers has no hole, whatever the network dropped.
//
// To a worker that answers cumulatively (RegisterAck.cumulative_answers,
// this build) the batch goes as a request whose sender is the producer
// itself, not a future: the answer arrives as a message (onBatchAck), and
// one answer may acknowledge every batch the worker had queued before it.
// A future per batch cost a process registration, a timer and a
// continuation each, and an answer per batch a write on the receiver and a
// read here (docs/benchmarks.md, "Figures behind code comments"). An
// earlier build answers every batch through its own future, as before. One
// check per peer (onAckCheck) stands in for the futures' timeouts either
// way.
func (p *producer) sendBatch(ctx actor.Context, pe *peer, d ringbuf.Decision) {
	b := p.batch(d, p.speaks(pe), pe)
	target := d.From + uint64(b.n)
	pe.burst = pe.burst || b.full
	pe.sentTo(target, b.size)
	pe.next = plant.Advance(pe.next, target)
	p.m.BatchesSent.Add(context.Background(), 1, pe.gauge.Attrs)
	if p.hook != nil {
		if err := p.hook.Send(pe.m.Name, b.wire); err != nil {
			p.rewind(pe)
			p.failed(ctx, pe, err)
			return
		}
	}
	pe.flights = append(pe.flights, flight{first: d.From, to: target, n: b.n, size: b.size, epoch: pe.epoch, sent: time.Now()})
	pe.flightMsgs += b.n
	pe.flightBytes += b.size
	if pe.cumulative {
		ctx.Request(pe.worker, b.wire)
	} else {
		first, epoch := d.From, pe.epoch
		f := ctx.RequestFuture(pe.worker, b.wire, p.cfg.CallTimeout)
		ctx.ReenterAfter(f, func(res interface{}, err error) {
			if p.dead || p.peers[pe.m.Name] != pe {
				return
			}
			ack, ok := res.(*messages.BatchAck)
			if err == nil && !ok {
				err = fmt.Errorf("batch answered with %T", res)
			}
			if err != nil {
				p.futureFailed(ctx, pe, first, epoch, err)
				return
			}
			// The answer to this very batch, whatever it says.
			ack.ProducerIncarnation, ack.BatchFirstCursor = p.inc, proto.Uint64(first)
			p.onAnswer(ctx, pe, ack)
		})
	}
	if !pe.checking {
		pe.checking = true
		pe.checkCancel = p.sched.SendOnce(p.cfg.CallTimeout, ctx.Self(), &ackCheck{node: pe.m.Name})
	}
}

// landed takes f, out of pe's flights, off the window's counts.
func (pe *peer) landed(f flight) {
	pe.flightMsgs -= f.n
	pe.flightBytes -= f.size
}

// flight is a batch sent and not yet answered.
type flight struct {
	first, to uint64
	n, size   int
	epoch     uint64
	sent      time.Time
}

// answeredBy removes from pe's flights those ack answers. A worker answers
// in the order it was sent, and names the batch it answers (the last of
// those it answers at once): the flights up to the first one from that
// cursor are answered (those before it lost their answers, or were
// answered with it). An OK answer also answers every flight that ends at
// or below its cursor, wherever it is (a batch sent again that the worker
// had). It returns the named flight (the last removed when none is named),
// the entries and the batches removed; ok false: none.
func (pe *peer) answeredBy(ack *messages.BatchAck) (last flight, n, batches int, ok bool) {
	upTo := -1
	for i, f := range pe.flights {
		if f.first == ack.GetBatchFirstCursor() {
			upTo = i
			break
		}
	}
	okAnswer := ack.Status == messages.AckStatus_ACK_STATUS_OK
	keep := pe.flights[:0]
	for i, f := range pe.flights {
		if i <= upTo || (okAnswer && f.to <= ack.NextCursor) {
			n += f.n
			batches++
			pe.landed(f)
			if i == upTo || upTo < 0 {
				last = f
			}
			continue
		}
		keep = append(keep, f)
	}
	clear(pe.flights[len(keep):])
	pe.flights = keep
	return last, n, batches, batches > 0
}

// onBatchAck takes a worker's answer sent to the producer itself (see
// sendBatch). It must name this producer incarnation and the batch it
// answers: anything else is not an answer to this producer's batches (an
// earlier incarnation's, or forged: the guard admits an ack from anyone
// that names a member node, and only members are sent this incarnation).
func (p *producer) onBatchAck(ctx actor.Context, ack *messages.BatchAck) {
	if p.dead || p.ring == nil || ack.ProducerIncarnation != p.inc || ack.BatchFirstCursor == nil {
		return
	}
	for _, pe := range p.peers {
		if pe.m.Address == ack.WorkerNode || pe.m.Name == ack.WorkerNode {
			if pe.cumulative {
				p.onAnswer(ctx, pe, ack)
			}
			return
		}
	}
}

// onAnswer handles a worker's answer to pe's batches. Only an OK answer
// moves the read cursor, to the cursor the worker says it delivered up to
// (acked): whatever the accounting of flights, a cursor never moves past
// what the worker delivered.
func (p *producer) onAnswer(ctx actor.Context, pe *peer, ack *messages.BatchAck) {
	f, n, batches, ok := pe.answeredBy(ack)
	if len(pe.flights) == 0 {
		p.stopCheck(pe)
	}
	if ack.Status == messages.AckStatus_ACK_STATUS_OK {
		if ok {
			rtt := time.Since(f.sent)
			p.m.BatchesAcked.Add(context.Background(), int64(batches), pe.gauge.Attrs)
			p.m.RoundTrip.Record(context.Background(), rtt.Seconds(), pe.gauge.Attrs)
			ctx.ActorSystem().EventStream.Publish(&messages.Flushed{Pubsub: p.cfg.Name, Group: p.group, Node: pe.m.Name, Messages: n, RoundTrip: rtt})
		}
		p.acked(pe, ack.NextCursor, ack.Stored)
		p.answered(pe)
		// Room in the window: a full batch goes now; a part batch at the
		// flush armFlush sends (BatchInterval 0: it runs after the writes
		// queued meanwhile), or, with a BatchInterval, once nothing is in
		// flight and a flush came for it (partWaits) or it ends a burst
		// (burstTail).
		if p.drainTo != nil || p.full(pe) || (pe.due && len(pe.flights) == 0) || p.burstTail(pe) {
			p.service(ctx, pe)
		} else if pe.sent < p.ring.WriteCursor() {
			p.armFlush(ctx)
		}
		return
	}
	if !ok {
		return // an answer to a batch given up on (onAckCheck): handled then
	}
	if ack.Status == messages.AckStatus_ACK_STATUS_OUT_OF_ORDER {
		// The worker missed a batch before this one: everything below its
		// cursor is delivered, nothing from it on. The worker knows what
		// its node got: send again from there (once per epoch).
		if f.epoch == pe.epoch {
			pe.next = min(ack.NextCursor, p.ring.WriteCursor())
			p.settle(pe, pe.next, core.Delivered)
			p.rewind(pe)
		} else {
			p.acked(pe, ack.NextCursor, false)
		}
		p.service(ctx, pe)
		return
	}
	if f.epoch != pe.epoch {
		// A batch sent before the last rewind: its failure is handled.
		// The last one back lets a waiting register or expire go.
		if len(pe.flights) == 0 {
			p.service(ctx, pe)
		}
		return
	}
	p.rewind(pe)
	p.nack(pe, ack)
	p.failed(ctx, pe, fmt.Errorf("%s", pe.lastErr))
}

// futureFailed handles a batch's future that ended without an answer. A
// timeout is onAckCheck's to handle (it gives up on every flight at once);
// any other error (the node says no such worker runs, a dead letter) fails
// the call at once, as before.
func (p *producer) futureFailed(ctx actor.Context, pe *peer, first, epoch uint64, err error) {
	if errors.Is(err, actor.ErrTimeout) {
		return
	}
	for i, f := range pe.flights {
		if f.first == first && f.epoch == epoch {
			pe.flights = append(pe.flights[:i], pe.flights[i+1:]...)
			pe.landed(f)
			break
		}
	}
	if len(pe.flights) == 0 {
		p.stopCheck(pe)
	}
	if epoch != pe.epoch {
		if len(pe.flights) == 0 {
			p.service(ctx, pe)
		}
		return
	}
	p.rewind(pe)
	p.failed(ctx, pe, err)
}

// onAckCheck gives up on pe's batches once the oldest has waited
// CallTimeout for its answer, as a future's timeout did: they count as
// lost, and the peer is retried from its cursor after RetryInterval.
func (p *producer) onAckCheck(ctx actor.Context, m *ackCheck) {
	pe := p.peers[m.node]
	if pe == nil || p.dead {
		return
	}
	pe.checking, pe.checkCancel = false, nil
	if len(pe.flights) == 0 {
		return
	}
	waited := time.Since(pe.flights[0].sent)
	if waited < p.cfg.CallTimeout {
		pe.checking = true
		pe.checkCancel = p.sched.SendOnce(p.cfg.CallTimeout-waited, ctx.Self(), &ackCheck{node: pe.m.Name})
		return
	}
	current := false
	for _, f := range pe.flights {
		current = current || f.epoch == pe.epoch
	}
	clear(pe.flights)
	pe.flights, pe.flightMsgs, pe.flightBytes = pe.flights[:0], 0, 0
	if !current { // only batches of an earlier epoch: their failure is handled
		p.service(ctx, pe)
		return
	}
	p.rewind(pe)
	p.failed(ctx, pe, fmt.Errorf("batch to %s not answered within CallTimeout %v: %w", pe.m.Name, p.cfg.CallTimeout, actor.ErrTimeout))
}

// stopCheck cancels pe's ack check: nothing is in flight.
func (p *producer) stopCheck(pe *peer) {
	if pe.checking {
		pe.checkCancel()
		pe.checking, pe.checkCancel = false, nil
	}
}

// acked advances pe's cursor to what the worker says it delivered.
// stored: the ack says the node's store appended the batch.
func (p *producer) acked(pe *peer, workerNext uint64, stored bool) {
	n := workerNext
	if n > p.ring.WriteCursor() { // trusted only within what was written
		n = p.ring.WriteCursor()
	}
	if n > pe.next {
		pe.next = n
	}
	if pe.sent < pe.next {
		pe.sent = pe.next
	}
	p.settleStored(pe, pe.next, core.Delivered, stored)
	// The lag gauge and the stall watch see the ack now: the ack of the
	// last batch is not followed by a service call when nothing is left
	// (the gauge kept the lag it had at the send, and an idle, caught-up
	// peer showed as stalled).
	if d, err := p.ring.Decide(pe.next); err == nil {
		pe.gauge.SetLag(d.Lag, p.cfg.BufferSize)
		p.watch(pe, d.Lag)
	}
}

// full reports whether a full batch is buffered for pe past what was sent:
// MaxBatchMessages entries, or MaxBatchBytes worth. Such a batch goes as
// soon as the window has room; BatchInterval bounds only how long a part
// batch waits.
func (p *producer) full(pe *peer) bool {
	w := p.ring.WriteCursor()
	if pe.sent >= w {
		return false
	}
	if w-pe.sent >= uint64(p.cfg.MaxBatchMessages) {
		return true
	}
	if pe.mark != pe.sent {
		// sent moved other than by a batch (a join, a rewind, an ack past
		// it): count its bytes again, fewer than MaxBatchMessages entries.
		size := uint64(0)
		for c := pe.sent; c < w; c++ {
			topic, _, payload, ex, err := p.buf.at(c)
			if err != nil { // overwritten: Decide sends Expire, not a batch
				return false
			}
			size += uint64(entrySize(topic, payload, ex.exclude, ex.onlyNode) + ex.trace.Size())
		}
		pe.mark, pe.markSize = pe.sent, p.buf.size-size
	}
	return p.buf.size-pe.markSize >= uint64(p.cfg.MaxBatchBytes)
}

// sentTo moves pe's sent to target past a batch of size bytes (entrySize
// summed), keeping the byte mark at sent.
func (pe *peer) sentTo(target uint64, size int) {
	if pe.mark == pe.sent {
		pe.mark, pe.markSize = target, pe.markSize+uint64(size)
	}
	pe.sent = target
}

// outBatch is a batch as sent: its range, its size (entrySize summed) and
// its encoding in one protocol version. Never modified once built.
type outBatch struct {
	first, inc uint64
	n, size    int
	version    uint32
	// full: cut by MaxBatchMessages or MaxBatchBytes, not by the write
	// cursor: any decision from first that reaches past it gets the same.
	full bool
	// awaited: the batch asks its worker to answer at the mailbox's turn,
	// not after AckInterval (messages.Batch.awaited; see batch).
	awaited bool
	wire    *messages.Batch // messages.Encoded
}

// batch returns the batch for decision d in protocol version version: from
// d.From, as many entries as MaxBatchMessages and MaxBatchBytes allow (at
// least one), encoded once. Nodes that need the same range share it (see
// recent).
//
// The batch is awaited (answered at the worker's mailbox turn, not after
// its AckInterval) when a receipt waits on a write in it, or when pe's
// worker must answer it at once (answerNow: it closes pe's window, fills
// pe's share of the buffer, or goes under a BatchInterval). A cached batch
// that is not awaited is not reused for a node that must answer it at
// once. pe nil: no window (tests).
func (p *producer) batch(d ringbuf.Decision, version uint32, pe *peer) *outBatch {
	for _, b := range p.recent {
		if b != nil && b.first == d.From && b.inc == p.inc && b.version == version &&
			(b.first+uint64(b.n) == d.To || b.full && b.first+uint64(b.n) <= d.To) &&
			(b.awaited || !p.answerNow(pe, version, b.n, b.size)) {
			return b
		}
	}
	b := &outBatch{first: d.From, inc: p.inc, version: version}
	p.enc.Reset()
	to := min(d.To, d.From+uint64(p.cfg.MaxBatchMessages))
	b.full = to-d.From == uint64(p.cfg.MaxBatchMessages) // any longer decision gets the same
	// The ring's records in one or two runs: no per-cursor At (reading the
	// buffer back was a visible share of a publishing node's CPU:
	// docs/benchmarks.md, "Figures behind code comments").
	runA, runB, err := p.ring.Span(d.From, to)
	if err != nil { // never for a decision the ring made: an empty batch, not cached
		p.log.Error().Err(err).Msg("decided messages not buffered")
		b.full = false
	}
	c := d.From
entries:
	for _, run := range [2][]record{runA, runB} {
		for _, rec := range run {
			topic, typ, payload, ex := p.buf.entry(c, rec)
			sz := entrySize(topic, payload, ex.exclude, ex.onlyNode) + ex.trace.Size()
			if p.enc.Len() > 0 && b.size+sz > p.cfg.MaxBatchBytes {
				b.full = true
				break entries
			}
			traceparent, tracestate := ex.trace.Headers()
			p.enc.AddTraced(topic, typ, payload, ex.exclude, ex.onlyNode, ex.stored, traceparent, tracestate)
			b.size += sz
			c++
		}
	}
	b.n = p.enc.Len()
	b.awaited = p.awaited(d.From, d.From+uint64(b.n)) || p.answerNow(pe, version, b.n, b.size)
	b.wire = messages.Encoded(p.enc.Encode(messages.BatchHeader{ProtocolVersion: version, PubsubName: p.cfg.Name,
		ProducerNode: p.node, ProducerIncarnation: p.inc, Group: p.group, FirstCursor: d.From,
		Awaited: b.awaited}))
	if err != nil {
		return b
	}
	if p.recent == nil {
		p.recent = make([]*outBatch, max(p.cfg.MaxBatchesInFlight, 1))
	}
	p.recent[p.recentAt] = b
	p.recentAt = (p.recentAt + 1) % len(p.recent)
	return b
}

// windowOpen reports whether pe may have one more batch in flight. The
// window is in entries and bytes, MaxBatchesInFlight full batches' worth
// (MaxBatchMessages and MaxBatchBytes each), not in batches: MaxBatchesInFlight
// full batches fill it, small batches under light load do not (a window of 4 batches of ~3 messages
// held 57 % of the tail at 10,000 msg/s: docs/benchmarks.md). A version 1
// worker gets one batch at a time: it takes a batch past its cursor as a
// gap (told, but a loss) where a current one refuses it for a resend.
func (p *producer) windowOpen(pe *peer) bool {
	if p.speaks(pe) == messages.PreviousProtocolVersion {
		return len(pe.flights) == 0
	}
	return p.room(len(pe.flights), pe.flightMsgs, pe.flightBytes)
}

// room reports whether a window with flights batches of msgs entries and
// bytes bytes in flight has room for one more full batch: what is in
// flight stays within the window (and InFlightBytes), whatever the next
// batch's size.
func (p *producer) room(flights, msgs, bytes int) bool {
	return flights < maxFlights &&
		msgs+p.cfg.MaxBatchMessages <= p.cfg.MaxBatchesInFlight*p.cfg.MaxBatchMessages &&
		bytes+p.cfg.MaxBatchBytes <= p.cfg.MaxBatchesInFlight*p.cfg.MaxBatchBytes
}

// answerNow reports whether pe's worker must answer a batch of n entries
// and size bytes, sent in protocol version, at once rather than after its
// AckInterval (see batch). A worker of the previous version answers every
// batch at once anyway. It must when the batch:
//   - leaves pe's window with no room: nothing more goes to pe until an
//     answer comes, so a held answer would stall the stream, and a
//     receipt's batch behind it, for the interval;
//   - brings the entries in flight to pe to half the lag at which the
//     capacity warning goes (CapacityWarningThreshold of BufferSize; 2,000
//     entries by default): an answer held holds pe's read cursor back, and
//     the buffer overwrites what a node has not acknowledged in time,
//     however promptly it was delivered (at a high rate an AckInterval's
//     worth of entries would be more than the buffer holds), so what waits
//     for an answer stays under the warning at any rate;
//   - goes under a BatchInterval: a part batch then waits for the batches in
//     flight to be answered (partWaits), and a burst's last one for nothing
//     to be in flight (burstTail), so a held answer would hold the next
//     batch, and every message in it, for the interval, which a shorter
//     BatchInterval would not bound (TestHeldAnswerDoesNotHoldTheNextPartBatch).
//     The answers cost little there: a part batch goes at most once per
//     BatchInterval, and a full one of the default size fills the share.
func (p *producer) answerNow(pe *peer, version uint32, n, size int) bool {
	if pe == nil || version == messages.PreviousProtocolVersion {
		return false
	}
	return !p.room(len(pe.flights)+1, pe.flightMsgs+n, pe.flightBytes+size) ||
		float64(pe.flightMsgs+n) >= p.cfg.CapacityWarningThreshold*float64(p.cfg.BufferSize)/2 ||
		p.cfg.BatchInterval > 0
}

// maxFlights bounds the batches in flight to one node whatever their size,
// so that a stream of one-entry batches keeps a bounded list of flights.
const maxFlights = 256

func (p *producer) sendExpire(ctx actor.Context, pe *peer, d ringbuf.Decision) {
	req := &messages.Expire{ProtocolVersion: p.speaks(pe), PubsubName: p.cfg.Name, ProducerNode: p.node,
		ProducerIncarnation: p.inc, Group: p.group, Missed: d.Missed, NextCursor: d.To,
		AllStored: !pe.unstored.AnyIn(d.From, d.To), AllStoredFrom: d.From}
	p.log.Warn().Str("peer", pe.m.Name).Uint64("missed", d.Missed).Uint64("overwritten", d.Overwritten).Msg("node fell behind the buffer: sending cursor expired")
	p.call(ctx, pe, req, func(res interface{}) bool {
		ack, ok := res.(*messages.BatchAck)
		if !ok || ack.Status != messages.AckStatus_ACK_STATUS_OK {
			return p.nack(pe, res)
		}
		if d.To > pe.next {
			pe.next = d.To
		}
		p.settleExpire(pe, d.To, ack)
		// Counted only when this Expire told the node (a retried one whose
		// first ack was lost was told then); a version 1 worker does not
		// say, and tells every Expire that moves its cursor.
		if ack.ExpiredTold || p.speaks(pe) == messages.PreviousProtocolVersion {
			p.expired(ctx, pe, d.Missed, d.Overwritten)
		}
		p.service(ctx, pe)
		return true
	})
}

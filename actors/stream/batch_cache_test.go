package stream

import (
	"math/rand"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/ringbuf"
)

// TestBatchCacheSendsWhatABuildWould: whatever batch p.batch returns, from
// its cache of recent batches or built anew, carries exactly what building
// it from the buffer gives for that decision, that protocol version and
// that incarnation: nodes at different cursors and versions, ranges that
// grow, old messages overwritten and the incarnation changing.
func TestBatchCacheSendsWhatABuildWould(t *testing.T) {
	buf, err := newStore(300)
	if err != nil {
		t.Fatal(err)
	}
	p := &producer{cfg: core.Config{Name: "ps", MaxBatchMessages: 12, MaxBatchBytes: 400, MaxBatchesInFlight: 4},
		node: "n1", group: 2, inc: 1, buf: buf, ring: buf.ring}
	rng := rand.New(rand.NewSource(1))
	want := func(d ringbuf.Decision, version uint32) *messages.Batch {
		b := &messages.Batch{ProtocolVersion: version, PubsubName: p.cfg.Name, ProducerNode: p.node,
			ProducerIncarnation: p.inc, Group: p.group, FirstCursor: d.From}
		size := 0
		for c := d.From; c < d.To && b.Len() < p.cfg.MaxBatchMessages; c++ {
			topic, typ, payload, ex, err := p.buf.at(c)
			if err != nil {
				t.Fatalf("cursor %d: %v", c, err)
			}
			sz := entrySize(topic, payload, ex.exclude, ex.onlyNode)
			if b.Len() > 0 && size+sz > p.cfg.MaxBatchBytes {
				break
			}
			size += sz
			b.Add(topic, typ, payload, ex.exclude, ex.onlyNode, ex.stored)
		}
		return b
	}
	var sent []uint64 // nodes' cursors
	for i := 0; i < 5; i++ {
		sent = append(sent, 0)
	}
	for step := 0; step < 20_000; step++ {
		w := p.ring.WriteCursor()
		switch r := rng.Intn(20); {
		case r < 10:
			e := core.Write{Topic: strings.Repeat("t", 1+rng.Intn(3)), PayloadType: "x" + strings.Repeat("y", rng.Intn(2)),
				Payload: make([]byte, rng.Intn(80))}
			rng.Read(e.Payload)
			switch rng.Intn(6) {
			case 0:
				e.Exclude = "sub"
			case 1:
				e.OnlyNode = "n3"
			case 2:
				e.SharedCursor = rng.Uint64() >> rng.Intn(64)
			}
			if _, err := p.buf.write(&e, int64(step)); err != nil {
				t.Fatal(err)
			}
		case r == 10: // a restart of sorts: another incarnation, same buffer
			p.inc++
		default:
			i := rng.Intn(len(sent))
			lo := uint64(0)
			if w > uint64(p.ring.Cap()) {
				lo = w - uint64(p.ring.Cap())
			}
			if sent[i] < lo || sent[i] > w || rng.Intn(10) == 0 {
				sent[i] = lo + uint64(rng.Int63n(int64(w-lo+1))) // a rewind, a join
			}
			if sent[i] == w {
				continue
			}
			to := sent[i] + 1 + uint64(rng.Int63n(int64(w-sent[i])))
			if rng.Intn(2) == 0 {
				to = w
			}
			d := ringbuf.Decision{Kind: ringbuf.Messages, From: sent[i], To: to}
			version := uint32(messages.ProtocolVersion)
			if i == 0 {
				version = messages.PreviousProtocolVersion
			}
			b := p.batch(d, version, nil)
			wire, err := proto.Marshal(b.wire)
			if err != nil {
				t.Fatal(err)
			}
			exp := want(d, version)
			if wb, _ := proto.Marshal(exp); string(wire) != string(wb) || b.n != exp.Len() {
				var got messages.Batch
				_ = proto.Unmarshal(wire, &got)
				t.Fatalf("step %d: batch for %+v version %d inc %d:\n got %v\nwant %v", step, d, version, p.inc, &got, exp)
			}
			sent[i] += uint64(b.n)
		}
	}
}

// TestCachedBatchIsAwaitedForThePeerItFills: a batch cached for one node is
// not reused, unawaited, for a node whose share of the buffer it fills
// (answerNow): that node's answer would be held for AckInterval with its read
// cursor past half the capacity warning's lag. Peers in step (the cluster
// tests) always share the flag; here one node has more in flight.
func TestCachedBatchIsAwaitedForThePeerItFills(t *testing.T) {
	buf, err := newStore(100)
	if err != nil {
		t.Fatal(err)
	}
	p := &producer{cfg: core.Config{Name: "ps", BufferSize: 100, CapacityWarningThreshold: 0.4, // fills at 20 in flight
		MaxBatchMessages: 100, MaxBatchBytes: 1 << 20, MaxBatchesInFlight: 4},
		node: "n1", group: 2, inc: 1, buf: buf, ring: buf.ring}
	for i := 0; i < 10; i++ {
		if _, err := p.buf.write(&core.Write{Topic: "t", PayloadType: "x", Payload: []byte{byte(i)}}, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	d := ringbuf.Decision{Kind: ringbuf.Messages, From: 0, To: 10}
	behind, ahead := &peer{}, &peer{}
	ahead.flightMsgs = 15
	if b := p.batch(d, messages.ProtocolVersion, behind); b.awaited {
		t.Fatalf("a batch of 10 to a node with nothing in flight is awaited: its answer need not go at once")
	}
	b := p.batch(d, messages.ProtocolVersion, ahead)
	wire, err := proto.Marshal(b.wire)
	if err != nil {
		t.Fatal(err)
	}
	var got messages.Batch
	if err := proto.Unmarshal(wire, &got); err != nil {
		t.Fatal(err)
	}
	if !b.awaited || !got.Awaited {
		t.Fatalf("the batch to a node with 15 in flight, bringing it to 25 (>= 20), is not awaited (outBatch %v, on the wire %v)", b.awaited, got.Awaited)
	}
}

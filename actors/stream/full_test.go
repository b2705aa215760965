package stream

import (
	"math/rand"
	"strings"
	"testing"

	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/ringbuf"
)

// TestFullMatchesTheBuffer checks the producer's full-batch rule against
// a count of the buffer itself, while sent moves by batches (the byte mark
// follows) and by jumps (a rewind, a join, an ack past it: counted again),
// and while old messages are overwritten.
func TestFullMatchesTheBuffer(t *testing.T) {
	buf, err := newStore(500)
	if err != nil {
		t.Fatal(err)
	}
	p := &producer{cfg: core.Config{MaxBatchMessages: 40, MaxBatchBytes: 900}, buf: buf, ring: buf.ring}
	pe := &peer{}
	rng := rand.New(rand.NewSource(1))
	want := func() bool {
		w := p.ring.WriteCursor()
		n, size := uint64(0), 0
		for c := pe.sent; c < w; c++ {
			topic, _, payload, ex, err := p.buf.at(c)
			if err != nil {
				return false
			}
			n++
			size += len(topic) + len(payload) + len(ex.exclude) + len(ex.onlyNode) + 8
		}
		return n > 0 && (n >= uint64(p.cfg.MaxBatchMessages) || size >= p.cfg.MaxBatchBytes)
	}
	for step := 0; step < 20_000; step++ {
		w := p.ring.WriteCursor()
		switch r := rng.Intn(10); {
		case r < 6: // a write
			e := core.Write{Topic: strings.Repeat("t", 1+rng.Intn(12)), PayloadType: "x", Payload: make([]byte, rng.Intn(60))}
			if rng.Intn(8) == 0 {
				e.Exclude = "sub"
			}
			if _, err := p.buf.write(&e, int64(step)); err != nil {
				t.Fatal(err)
			}
		case r < 9: // a batch from sent, as sendBatch sends it
			if pe.sent < w && w-pe.sent <= uint64(p.ring.Cap()) {
				b := p.batch(ringbuf.Decision{Kind: ringbuf.Messages, From: pe.sent, To: w}, messages.ProtocolVersion, nil)
				pe.sentTo(pe.sent+uint64(b.n), b.size)
			}
		default: // sent jumps anywhere still buffered
			lo := uint64(0)
			if w > uint64(p.ring.Cap()) {
				lo = w - uint64(p.ring.Cap())
			}
			pe.sent = lo + uint64(rng.Int63n(int64(w-lo+1)))
		}
		w = p.ring.WriteCursor()
		if w-pe.sent > uint64(p.ring.Cap()) {
			pe.sent = w // overwritten: the producer sends Expire and moves on
		}
		if got, exp := p.full(pe), want(); got != exp {
			t.Fatalf("step %d: full %v, the buffer says %v (sent %d, write %d)", step, got, exp, pe.sent, w)
		}
	}
}

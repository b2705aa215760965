package stream

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/messages"
)

// A version 1 producer (hand-rolled here: the wire messages a build from
// before the two-step join sends) is served by a current worker with
// version 1's meaning, and never at the cost of a silent gap: a Register
// seeds the worker, a Register or a Batch past its cursor is told as
// CursorExpired, a Register behind it changes nothing.
func TestWorkerServesVersion1Producer(t *testing.T) {
	fw := newFuzzWorker()
	w := fw.w.(*worker)
	reg := func(next uint64, missed bool) *messages.RegisterAck {
		ra, _ := ask(t, w, &messages.Register{ProtocolVersion: 1, PubsubName: "fz", ProducerNode: "old", ProducerIncarnation: 5,
			Group: 1, NextCursor: next, MissedWrites: missed})
		if ra.Status != messages.AckStatus_ACK_STATUS_OK {
			t.Fatalf("version 1 Register refused: %v %q", ra.Status, ra.Error)
		}
		return ra
	}
	batch := func(first uint64, n int) *messages.BatchAck {
		b := &messages.Batch{ProtocolVersion: 1, PubsubName: "fz", ProducerNode: "old", ProducerIncarnation: 5, Group: 1, FirstCursor: first}
		for i := 0; i < n; i++ {
			b.AddEntry(&messages.Entry{Topic: "t", PayloadType: "echopubsub.v1.CursorExpired", Payload: []byte{0x08, byte(i)}})
		}
		_, ba := ask(t, w, b)
		if ba.Status != messages.AckStatus_ACK_STATUS_OK {
			t.Fatalf("version 1 Batch at %d refused: %v %q", first, ba.Status, ba.Error)
		}
		return ba
	}
	check := func() {
		t.Helper()
		fw.m.mu.Lock()
		defer fw.m.mu.Unlock()
		if fw.m.err != nil {
			t.Fatal(fw.m.err)
		}
	}
	fw.m.inc = 5

	ra := reg(10, false)
	if ra.NextCursor != 10 || !messages.Speaks(ra.SupportedVersions, 1) || !messages.Speaks(ra.SupportedVersions, 2) {
		t.Fatalf("version 1 Register answered %v", ra)
	}
	if ba := batch(10, 3); ba.NextCursor != 13 {
		t.Fatalf("batch acked at %d, want 13", ba.NextCursor)
	}
	check()
	if n := expiries(fw, "old"); n != 0 {
		t.Fatalf("%d CursorExpired for an in-order version 1 stream", n)
	}
	// A repeated, late Register behind the cursor: nothing moves.
	if ra := reg(11, true); ra.NextCursor != 13 {
		t.Fatalf("a late version 1 Register moved the cursor to %d", ra.NextCursor)
	}
	// A batch past the cursor (version 1 has no OUT_OF_ORDER): told, then taken.
	if ba := batch(15, 2); ba.NextCursor != 17 {
		t.Fatalf("gap batch acked at %d, want 17", ba.NextCursor)
	}
	check() // the model fails a jump in delivered cursors that no CursorExpired preceded
	// A Register ahead of the cursor skips: told.
	if ra := reg(20, false); ra.NextCursor != 20 {
		t.Fatalf("a skipping version 1 Register left the cursor at %d", ra.NextCursor)
	}
	if n := expiries(fw, "old"); n != 1 {
		t.Fatalf("%d CursorExpired for a skipping version 1 Register, want 1", n)
	}
	batch(20, 1)
	check()
	// Version 1 has no Retire: refused with a reason, nothing changes.
	_, ba := ask(t, w, &messages.Retire{ProtocolVersion: 1, PubsubName: "fz", ProducerNode: "old", ProducerIncarnation: 5, Group: 1, FinalCursor: 30})
	if ba.Status != messages.AckStatus_ACK_STATUS_REJECTED || ba.NextCursor != 0 || w.table.producers["old"].expected != 21 {
		t.Fatalf("version 1 Retire answered %v, cursor %d", ba, w.table.producers["old"].expected)
	}
}

// A worker pinned to version 1 (a node not upgraded yet) refuses a current
// Register cleanly and in version 1's words, listing no versions: what a
// current producer recognises to fall back. A current worker refusing a
// version it does not speak lists what it does.
func TestVersionRefusals(t *testing.T) {
	fw := newFuzzWorker()
	w := fw.w.(*worker)
	w.version = messages.PreviousProtocolVersion
	ra, _ := ask(t, w, probe("p", 1))
	if ra.Status != messages.AckStatus_ACK_STATUS_REJECTED || len(ra.SupportedVersions) != 0 ||
		!strings.Contains(ra.Error, "protocol version 2 not supported (this node speaks 1)") {
		t.Fatalf("a version 1 worker answered a version 2 probe with %v", ra)
	}
	if _, ba := ask(t, w, &messages.Batch{ProtocolVersion: 2, PubsubName: "fz", ProducerNode: "p", ProducerIncarnation: 1, Group: 1}); ba.Status != messages.AckStatus_ACK_STATUS_REJECTED {
		t.Fatalf("a version 1 worker took a version 2 batch: %v", ba)
	}
	cur := newFuzzWorker().w.(*worker)
	r := probe("p", 1)
	r.ProtocolVersion = 3
	if ra, _ := ask(t, cur, r); ra.Status != messages.AckStatus_ACK_STATUS_REJECTED || !messages.Speaks(ra.SupportedVersions, 2) || !strings.Contains(ra.Error, "protocol version 3") {
		t.Fatalf("version 3 probe answered %v", ra)
	}
}

// The worker names the join that told CursorExpired (told_join), in every
// answer while the entry lasts: a join of an incarnation it already holds
// tells nothing and reports nothing new.
func TestJoinReportsWhatItTold(t *testing.T) {
	fw := newFuzzWorker()
	w := fw.w.(*worker)
	j := join("p", 1)
	j.NextCursor, j.JoinId = 4, 1
	if ra, _ := ask(t, w, j); !ra.Known || ra.ToldJoin != 0 {
		t.Fatalf("plain join answered %v", ra)
	}
	j2 := join("p", 1)
	j2.NextCursor, j2.MissedWrites, j2.JoinId = 9, true, 2 // a late join for an incarnation held already
	if ra, _ := ask(t, w, j2); !ra.Known || ra.ToldJoin != 0 || ra.NextCursor != 4 || expiries(fw, "p") != 0 {
		t.Fatalf("join of a held incarnation answered %v, %d told", ra, expiries(fw, "p"))
	}
	j3 := join("q", 1)
	j3.NextCursor, j3.MissedWrites, j3.JoinId = 9, true, 3
	if ra, _ := ask(t, w, j3); ra.ToldJoin != 3 || expiries(fw, "q") != 1 {
		t.Fatalf("join with missed writes answered %v", ra)
	}
	j4 := join("q", 1)
	j4.NextCursor, j4.MissedWrites, j4.JoinId = 12, true, 4 // a repeated join: held, names the join that told
	if ra, _ := ask(t, w, j4); ra.ToldJoin != 3 || ra.NextCursor != 9 || expiries(fw, "q") != 1 {
		t.Fatalf("repeated join answered %v", ra)
	}
	if ra, _ := ask(t, w, probe("q", 1)); ra.ToldJoin != 3 {
		t.Fatalf("probe after a told join answered %v", ra)
	}
}

// A batch a producer sends is an encoding (messages.Encoded), which the
// wire decodes; a worker handed one in process decodes it itself and
// delivers its entries, and bad bytes are refused with a reason.
func TestWorkerTakesAnEncodedBatch(t *testing.T) {
	fw := newFuzzWorker()
	w := fw.w.(*worker)
	if ra, _ := ask(t, w, join("p", 1)); ra.Status != messages.AckStatus_ACK_STATUS_OK {
		t.Fatalf("join refused: %v %q", ra.Status, ra.Error)
	}
	var e messages.BatchEncoder
	for i := 0; i < 3; i++ {
		e.Add("t", "echopubsub.v1.CursorExpired", []byte{0x08, byte(i)}, "", "", 0)
	}
	h := messages.BatchHeader{ProtocolVersion: messages.ProtocolVersion, PubsubName: "fz", ProducerNode: "p", ProducerIncarnation: 1, Group: 1}
	if _, ba := ask(t, w, messages.Encoded(e.Encode(h))); ba.Status != messages.AckStatus_ACK_STATUS_OK || ba.NextCursor != 3 {
		t.Fatalf("encoded batch answered %v %q at %d, want OK at 3", ba.Status, ba.Error, ba.NextCursor)
	}
	if _, ba := ask(t, w, messages.Encoded([]byte{0x12, 0x09})); ba.Status != messages.AckStatus_ACK_STATUS_REJECTED || ba.Error == "" {
		t.Fatalf("bad encoding answered %v %q, want a rejection with a reason", ba.Status, ba.Error)
	}
}

// fromHook records the producer node the worker names to its hook.
type fromHook struct {
	*model
	from []string
}

func (h *fromHook) Receive(from string, _ proto.Message) error {
	h.from = append(h.from, from)
	return nil
}

func (h *fromHook) Acked(from string, _ proto.Message) { h.from = append(h.from, from) }

// The fault hook of a worker handed an encoded batch in process is told
// the batch's producer, as for a batch that crossed the wire (a test that
// cuts or counts a node's batches keys on it).
func TestWorkerHookSeesAnEncodedBatchsProducer(t *testing.T) {
	fw := newFuzzWorker()
	w := fw.w.(*worker)
	if ra, _ := ask(t, w, join("p", 1)); ra.Status != messages.AckStatus_ACK_STATUS_OK {
		t.Fatalf("join refused: %v %q", ra.Status, ra.Error)
	}
	h := &fromHook{model: fw.m}
	w.hook = h
	var e messages.BatchEncoder
	e.Add("t", "echopubsub.v1.CursorExpired", []byte{0x08, 1}, "", "", 0)
	hd := messages.BatchHeader{ProtocolVersion: messages.ProtocolVersion, PubsubName: "fz", ProducerNode: "p", ProducerIncarnation: 1, Group: 1}
	if _, ba := ask(t, w, messages.Encoded(e.Encode(hd))); ba.Status != messages.AckStatus_ACK_STATUS_OK {
		t.Fatalf("encoded batch answered %v %q", ba.Status, ba.Error)
	}
	if len(h.from) != 2 || h.from[0] != "p" || h.from[1] != "p" {
		t.Fatalf("the hook was told the batch came from %q, want \"p\" on receive and on ack", h.from)
	}
}

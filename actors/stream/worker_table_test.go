package stream

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/echopubsub/echopubsub/messages"
)

var producerPID = actor.NewPID("producer", "p")

func join(node string, inc uint64) *messages.Register {
	return &messages.Register{ProtocolVersion: messages.ProtocolVersion, PubsubName: "fz", ProducerNode: node,
		ProducerIncarnation: inc, Group: 1, Join: true, WorkerIncarnation: 7}
}

// A peer inventing producer names cannot grow a worker's table past
// maxProducers: further joins are refused with a reason, and the producers
// already there keep working.
func TestWorkerTableIsCapped(t *testing.T) {
	fw := newFuzzWorker()
	w := fw.w.(*worker)
	for i := 0; i < 3*maxProducers; i++ {
		ctx := &fakeCtx{msg: join(fmt.Sprintf("invented-%d", i), 1), sender: producerPID}
		w.Receive(ctx)
		ack := ctx.res.(*messages.RegisterAck)
		if i < maxProducers && ack.Status != messages.AckStatus_ACK_STATUS_OK {
			t.Fatalf("join %d refused: %v", i, ack.Error)
		}
		if i >= maxProducers && (ack.Status != messages.AckStatus_ACK_STATUS_REJECTED || !strings.Contains(ack.Error, "table full")) {
			t.Fatalf("join %d past the cap answered %v %q", i, ack.Status, ack.Error)
		}
	}
	if n := len(w.table.producers); n != maxProducers {
		t.Fatalf("table holds %d producers, cap %d", n, maxProducers)
	}
}

// ask hands req to w and returns the RegisterAck or BatchAck.
func ask(t *testing.T, w *worker, req interface{}) (*messages.RegisterAck, *messages.BatchAck) {
	t.Helper()
	ctx := &fakeCtx{msg: req, sender: producerPID}
	w.Receive(ctx)
	ra, _ := ctx.res.(*messages.RegisterAck)
	ba, _ := ctx.res.(*messages.BatchAck)
	if ra == nil && ba == nil {
		t.Fatalf("%T answered %T", req, ctx.res)
	}
	return ra, ba
}

func probe(node string, inc uint64) *messages.Register {
	r := join(node, inc)
	r.Join = false
	return r
}

func expiries(fw *fuzzWorker, node string) int {
	fw.m.mu.Lock()
	defer fw.m.mu.Unlock()
	return fw.m.expiredAt[node]
}

// A full table drops the producers silent for ForgetAfter, and only then;
// a dropped producer's return is told apart from a first join: the same
// incarnation learns it was forgotten, a new one is a restart.
func TestWorkerDropsSilentProducersOnlyWhenFull(t *testing.T) {
	fw := newFuzzWorker()
	w := fw.w.(*worker)
	w.cfg.ForgetAfter = time.Millisecond
	if ra, _ := ask(t, w, join("quiet", 1)); !ra.Known {
		t.Fatalf("join not taken: %v", ra)
	}
	time.Sleep(5 * time.Millisecond) // past ForgetAfter
	if ra, _ := ask(t, w, probe("quiet", 1)); !ra.Known || ra.Forgot {
		t.Fatalf("a table with room forgot a silent producer: %v", ra)
	}
	for i := 0; len(w.table.producers) < maxProducers; i++ {
		ask(t, w, join(fmt.Sprintf("filler-%d", i), 1))
	}
	time.Sleep(5 * time.Millisecond) // every entry is silent now
	if ra, _ := ask(t, w, join("newcomer", 1)); !ra.Known {
		t.Fatalf("a full table with silent producers refused a join: %v", ra)
	}
	if _, held := w.table.producers["quiet"]; held {
		t.Fatalf("the silent producer was kept in a full table")
	}
	if ra, _ := ask(t, w, probe("quiet", 1)); ra.Known || !ra.Forgot {
		t.Fatalf("probe of the dropped incarnation: known=%v forgot=%v, want forgot", ra.Known, ra.Forgot)
	}
	if ra, _ := ask(t, w, probe("quiet", 2)); ra.Known || ra.Forgot {
		t.Fatalf("probe of a new incarnation: known=%v forgot=%v, want neither", ra.Known, ra.Forgot)
	}
	before := expiries(fw, "quiet")
	ask(t, w, join("quiet", 2))
	if got := expiries(fw, "quiet") - before; got != 1 {
		t.Fatalf("a dropped producer that restarted was told %d times, want once (producer restarted)", got)
	}
}

// A join is idempotent: a second join of the same incarnation (retried, or
// late) keeps the worker's cursor; an older incarnation is refused.
func TestWorkerJoinIsIdempotentAndStaleIncarnationsRefused(t *testing.T) {
	fw := newFuzzWorker()
	w := fw.w.(*worker)
	j := join("p", 2)
	j.NextCursor = 5
	ask(t, w, j)
	j.NextCursor = 9
	if ra, _ := ask(t, w, j); !ra.Known || ra.NextCursor != 5 {
		t.Fatalf("a repeated join answered %v, want the cursor kept at 5", ra)
	}
	j.NextCursor = 1
	if ra, _ := ask(t, w, j); ra.NextCursor != 5 {
		t.Fatalf("a late join moved the cursor back: %v", ra)
	}
	if ra, _ := ask(t, w, join("p", 1)); ra.Status != messages.AckStatus_ACK_STATUS_REJECTED || !strings.Contains(ra.Error, "stale") {
		t.Fatalf("an older incarnation's join answered %v %q, want refused as stale", ra.Status, ra.Error)
	}
	if expiries(fw, "p") != 0 {
		t.Fatalf("idempotent joins told the subscribers something")
	}
}

// A retired incarnation's successor joins silently, unless its join says
// owed messages were overwritten before it reached this node.
func TestWorkerRetiredThenMissedWritesIsTold(t *testing.T) {
	for _, missed := range []bool{false, true} {
		fw := newFuzzWorker()
		w := fw.w.(*worker)
		ask(t, w, join("p", 1))
		if _, ba := ask(t, w, &messages.Retire{ProtocolVersion: messages.ProtocolVersion, PubsubName: "fz", ProducerNode: "p",
			ProducerIncarnation: 1, Group: 1}); ba.Status != messages.AckStatus_ACK_STATUS_OK {
			t.Fatalf("retire answered %v", ba)
		}
		j := join("p", 2)
		j.MissedWrites = missed
		ask(t, w, j)
		want := 0
		if missed {
			want = 1
		}
		if got := expiries(fw, "p"); got != want {
			t.Fatalf("missed_writes=%v after a retire: told %d times, want %d", missed, got, want)
		}
	}
}

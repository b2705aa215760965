package actors

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

// Producers not heard from for ForgetAfter are dropped, and their return is
// told apart from a first join (RegisterAck.Forgot), so the producer can
// tell the node rather than guess.
func TestWorkerForgetsSilentProducers(t *testing.T) {
	fw := newFuzzWorker()
	w := fw.w.(*worker)
	w.cfg.ForgetAfter = time.Millisecond
	ctx := &fakeCtx{msg: join("quiet", 1), sender: producerPID}
	w.Receive(ctx)
	if ack := ctx.res.(*messages.RegisterAck); !ack.Known {
		t.Fatalf("join not taken: %v", ack)
	}
	time.Sleep(5 * time.Millisecond) // past ForgetAfter
	w.table.lastPrune = time.Time{}  // prune runs at most once a second; this test does not wait for it
	probe := join("quiet", 1)
	probe.Join = false
	ctx = &fakeCtx{msg: probe, sender: producerPID}
	w.Receive(ctx)
	ack := ctx.res.(*messages.RegisterAck)
	if ack.Known || !ack.Forgot {
		t.Fatalf("probe after ForgetAfter: known=%v forgot=%v, want forgotten", ack.Known, ack.Forgot)
	}
	if len(w.table.producers) != 0 {
		t.Fatalf("silent producer still held")
	}
}

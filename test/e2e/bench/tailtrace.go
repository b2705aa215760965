package main

import (
	"runtime/debug"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/internal/proc"
	"github.com/echopubsub/echopubsub/messages"
)

// Tail tracing (-trace-tail, issue 26 item 3): in a latency run every node
// records, in wall-clock time (unix ns, one clock for the processes of the
// machine), what it did to each message, so that the harness can cut the
// latency of a message in the tail into stages and compare it with the
// median's:
//
//	publish (node 0's publisher stamps the message)
//	-> batch sent (node 0's producer, the fault hook's Send)
//	-> batch received (node i's worker, the fault hook's Receive)
//	-> delivered (node i's collector)
//
// with the acks (node i's worker answered, the Acked hook; node 0's
// producer got the answer, the Flushed event) and what the Go runtime did
// in each process (GC cycles and pauses with their times, scheduling
// latency). Raw protoactor has no stages: its collectors record publish and
// receive times and the runtime figures only. The hooks cost the traced
// path a little (a hooked worker consults the hook per entry; the receive
// hook reads each entry's seq): normal runs install none.

// tailTracer is node's fault hook (EchoPubSub) and record of one latency
// repetition.
type tailTracer struct {
	mu      sync.Mutex
	sends   map[string][]int64 // by peer: when each batch was sent
	flushes map[string][]flushRec
	batches []batchRec // received from any producer, in order
	rt0     proc.RuntimeSample
	since   int64 // unix ns of the reset
}

type flushRec struct {
	N   int   `json:"n"`
	At  int64 `json:"at"`  // the ack reached the producer
	RTT int64 `json:"rtt"` // ns
}

type batchRec struct {
	From  string   `json:"from"`
	First uint64   `json:"first"`
	At    int64    `json:"at"`    // the worker got it
	Acked int64    `json:"acked"` // the worker answered
	Seqs  []uint64 `json:"seqs"`
}

// tailRec is one message a collector received.
type tailRec struct {
	Seq  uint64 `json:"seq"`
	Sent int64  `json:"sent"`
	Recv int64  `json:"recv"`
}

// nodeTrace is what a node reports of a traced repetition ("trace").
type nodeTrace struct {
	Runtime rtStats               `json:"runtime"`
	Sends   map[string][]int64    `json:"sends,omitempty"`
	Flushes map[string][]flushRec `json:"flushes,omitempty"`
	Batches []batchRec            `json:"batches,omitempty"`
	Msgs    []tailRec             `json:"msgs,omitempty"`
}

// rtStats is what the Go runtime did in the process since the reset.
type rtStats struct {
	GCCycles   uint64  `json:"gc_cycles"`
	GCCPUMs    float64 `json:"gc_cpu_ms"`
	UserCPUMs  float64 `json:"user_cpu_ms"`
	PauseMaxMs float64 `json:"gc_pause_max_ms"`
	SchedP99Ms float64 `json:"sched_p99_ms"`
	SchedMaxMs float64 `json:"sched_max_ms"`
	// GCEnds: when each GC cycle's last pause ended (unix ns), and that
	// cycle's pause total (ns), from debug.ReadGCStats.
	GCEnds   []int64 `json:"gc_ends,omitempty"`
	GCPauses []int64 `json:"gc_pauses,omitempty"`
}

func newTailTracer() *tailTracer {
	return &tailTracer{sends: map[string][]int64{}, flushes: map[string][]flushRec{}}
}

// reset starts a repetition.
func (t *tailTracer) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sends, t.flushes, t.batches = map[string][]int64{}, map[string][]flushRec{}, nil
	t.rt0, t.since = proc.ReadRuntime(), time.Now().UnixNano()
}

// report is the repetition so far, with the collector's messages.
func (t *tailTracer) report(msgs []tailRec) *nodeTrace {
	rt1 := proc.ReadRuntime()
	t.mu.Lock()
	defer t.mu.Unlock()
	tr := &nodeTrace{Sends: t.sends, Flushes: t.flushes, Batches: t.batches, Msgs: msgs}
	pauses, sched := proc.HistDelta(t.rt0.Pauses, rt1.Pauses), proc.HistDelta(t.rt0.Sched, rt1.Sched)
	tr.Runtime = rtStats{GCCycles: rt1.Cycles - t.rt0.Cycles, GCCPUMs: 1000 * (rt1.GCCPU - t.rt0.GCCPU),
		UserCPUMs: 1000 * (rt1.UserCPU - t.rt0.UserCPU), PauseMaxMs: 1000 * proc.HistQuantile(pauses, 1),
		SchedP99Ms: 1000 * proc.HistQuantile(sched, 0.99), SchedMaxMs: 1000 * proc.HistQuantile(sched, 1)}
	var gs debug.GCStats
	debug.ReadGCStats(&gs)
	for i, end := range gs.PauseEnd {
		if end.UnixNano() >= t.since && i < len(gs.Pause) {
			tr.Runtime.GCEnds = append(tr.Runtime.GCEnds, end.UnixNano())
			tr.Runtime.GCPauses = append(tr.Runtime.GCPauses, int64(gs.Pause[i]))
		}
	}
	return tr
}

// flushed records a Flushed event of the node's producer.
func (t *tailTracer) flushed(evt interface{}) {
	f, ok := evt.(*messages.Flushed)
	if !ok {
		return
	}
	now := time.Now().UnixNano()
	t.mu.Lock()
	t.flushes[f.Node] = append(t.flushes[f.Node], flushRec{N: f.Messages, At: now, RTT: int64(f.RoundTrip)})
	t.mu.Unlock()
}

// Send implements faults.Hook: a batch leaves the producer.
func (t *tailTracer) Send(node string, req proto.Message) error {
	if _, ok := req.(*messages.Batch); ok {
		now := time.Now().UnixNano()
		t.mu.Lock()
		t.sends[node] = append(t.sends[node], now)
		t.mu.Unlock()
	}
	return nil
}

// Receive implements faults.Hook: a worker got a batch; it records the
// seq of each entry (a Stamp).
func (t *tailTracer) Receive(from string, req proto.Message) error {
	b, ok := req.(*messages.Batch)
	if !ok || b.Len() == 0 || b.Validate() != nil {
		return nil
	}
	now := time.Now().UnixNano()
	seqs := make([]uint64, 0, b.Len())
	c := b.Entries()
	for {
		_, _, payload, _, _, ok := c.Next()
		if !ok {
			break
		}
		seqs = append(seqs, stampSeq(payload))
	}
	t.mu.Lock()
	t.batches = append(t.batches, batchRec{From: from, First: b.FirstCursor, At: now, Seqs: seqs})
	t.mu.Unlock()
	return nil
}

// Delivered implements faults.Hook.
func (t *tailTracer) Delivered(string, uint64) {}

// Acked implements faults.Hook: the worker answered a batch.
func (t *tailTracer) Acked(from string, req proto.Message) {
	b, ok := req.(*messages.Batch)
	if !ok {
		return
	}
	now := time.Now().UnixNano()
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := len(t.batches) - 1; i >= 0; i-- {
		if t.batches[i].From == from && t.batches[i].First == b.FirstCursor {
			t.batches[i].Acked = now
			return
		}
	}
}

// stampSeq reads a marshalled testpb.Stamp's seq (field 2) without
// unmarshalling it; 0 if it has none.
func stampSeq(b []byte) uint64 {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0
		}
		b = b[n:]
		if num == 2 && typ == protowire.VarintType {
			v, _ := protowire.ConsumeVarint(b)
			return v
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return 0
		}
		b = b[n:]
	}
	return 0
}

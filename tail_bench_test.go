package echopubsub_test

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/internal/proc"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// BenchmarkTailStages traces where the latency tail of publish -> remote
// subscriber comes from: 2 nodes in one process, 10,000 msg/s from one
// publisher on node 0 for 3 s, BatchInterval 0. Each message's path is cut
// into stages from what the producer and the worker report: the batch
// carrying it left the producer at its ack time less its round trip (the
// Flushed event), reached node 1's worker (the receive hook) and its
// subscriber. Raw protoactor (one remote Send per message, the same
// process pair) runs in the same round. One op is one round of both; the
// stage medians of the whole run and of the tail (latency >= p99) are
// logged (run it with -v: `go test -v -run '^$' -bench BenchmarkTailStages
// -benchtime 3x .`), with what the Go runtime did in each round (GC
// cycles and CPU, the longest GC pause, the scheduling latency). The hooks and the event subscription cost the traced
// path a little; the multi-process figure is the harness's (test/e2e/bench).
func BenchmarkTailStages(b *testing.B) {
	const rate, secs = 10_000, 3
	n := rate * secs
	cfg := echopubsub.DefaultConfig("tail")
	cfg.BatchInterval = 0
	cfg.BufferSize = 4 * n
	nodes := test.StartCluster(b, 2, cfg)
	rec := newTailRecorder(n)
	sub := nodes[1].System.Root.Spawn(actor.PropsFromFunc(rec.receive, actor.WithMailbox(echopubsub.SubscriberMailbox())))
	if err := nodes[1].PS.Subscribe(sub, "tail", echopubsub.WithMaxQueueLen(1<<30)); err != nil {
		b.Fatal(err)
	}
	raw := newTailRecorder(n)
	rawPID := nodes[1].System.Root.Spawn(actor.PropsFromFunc(raw.receive))
	waitJoinedB(b, nodes)

	var mu sync.Mutex
	var sent, got []tailBatch // producer's batches (from Flushed), worker's (receive hook)
	nodes[0].System.EventStream.Subscribe(func(evt interface{}) {
		if f, ok := evt.(*messages.Flushed); ok {
			now := tailNow()
			mu.Lock()
			sent = append(sent, tailBatch{n: f.Messages, at: now - int64(f.RoundTrip), acked: now})
			mu.Unlock()
		}
	})
	nodes[1].Faults.SetOnReceive(func(_ string, req proto.Message) {
		if bt, ok := req.(*messages.Batch); ok {
			now := tailNow()
			mu.Lock()
			got = append(got, tailBatch{first: bt.FirstCursor, n: bt.Len(), at: now})
			mu.Unlock()
		}
	})
	nodes[1].Faults.SetOnAcked(func(_ string, req proto.Message) {
		if bt, ok := req.(*messages.Batch); ok {
			now := tailNow()
			mu.Lock()
			for i := len(got) - 1; i >= 0; i-- {
				if got[i].first == bt.FirstCursor {
					got[i].acked = now
					break
				}
			}
			mu.Unlock()
		}
	})
	pad := []byte("0123456789")
	b.ResetTimer()
	for round := 0; round < b.N; round++ {
		// ours
		mu.Lock()
		sent, got = sent[:0], got[:0]
		mu.Unlock()
		first := nodes[0].Stats(b).WriteCursor
		rec.reset()
		rt0 := proc.ReadRuntime()
		if err := pace(n, rate, rec, func(i int) error {
			return nodes[0].PS.Broadcast(nil, "tail", &testpb.Stamp{Seq: uint64(i), Pad: pad})
		}); err != nil {
			b.Fatal(err)
		}
		test.Eventually(b, time.Minute, func() bool { return rec.count.Load() >= int64(n) }, test.Sprintf("ours: all %d received", n))
		rt1 := proc.ReadRuntime()
		// raw protoactor
		raw.reset()
		_ = pace(n, rate, raw, func(i int) error {
			nodes[0].System.Root.Send(rawPID, &testpb.Stamp{Seq: uint64(i), Pad: pad})
			return nil
		})
		test.Eventually(b, time.Minute, func() bool { return raw.count.Load() >= int64(n) }, test.Sprintf("raw: all %d received", n))
		mu.Lock()
		rt2 := proc.ReadRuntime()
		b.Log(tailReport(rec, raw, first, sent, got) + runtimeReport(rt0, rt1, rt2))
		mu.Unlock()
		lat, rlat := rec.latencies(), raw.latencies()
		b.ReportMetric(pct(lat, 0.99)/1e6, "p99-ms")
		b.ReportMetric(pct(rlat, 0.99)/1e6, "raw-p99-ms")
		b.ReportMetric(pct(lat, 0.5)/1e6, "p50-ms")
		b.ReportMetric(pct(rlat, 0.5)/1e6, "raw-p50-ms")
	}
}

var tailEpoch = time.Now()

// runtimeReport compares the two rounds (ours: a to b, raw: b to c): GC
// cycles, GC CPU, the longest GC pause and the scheduling latency's p99
// and max, each from the runtime's histograms over the round.
func runtimeReport(a, b, c proc.RuntimeSample) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%-8s %10s %12s %14s %14s %14s\n", "runtime", "GC cycles", "GC CPU ms", "GC pause max", "sched p99 ms", "sched max ms")
	for _, r := range []struct {
		name     string
		from, to proc.RuntimeSample
	}{{"ours", a, b}, {"raw", b, c}} {
		pauses, sched := proc.HistDelta(r.from.Pauses, r.to.Pauses), proc.HistDelta(r.from.Sched, r.to.Sched)
		fmt.Fprintf(&sb, "%-8s %10d %12.1f %14.3f %14.3f %14.3f\n", r.name, r.to.Cycles-r.from.Cycles, 1000*(r.to.GCCPU-r.from.GCCPU),
			1000*proc.HistQuantile(pauses, 1), 1000*proc.HistQuantile(sched, 0.99), 1000*proc.HistQuantile(sched, 1))
	}
	return sb.String()
}

func tailNow() int64 { return int64(time.Since(tailEpoch)) }

type tailBatch struct {
	first     uint64
	n         int
	at, acked int64
}

// tailRecorder records each message's publish and receive times, by seq.
type tailRecorder struct {
	pub, recv []int64
	count     atomic.Int64
}

func newTailRecorder(n int) *tailRecorder {
	return &tailRecorder{pub: make([]int64, n), recv: make([]int64, n)}
}

func (r *tailRecorder) reset() {
	clear(r.pub)
	clear(r.recv)
	r.count.Store(0)
}

func (r *tailRecorder) receive(ctx actor.Context) {
	m := ctx.Message()
	if d, ok := m.(*messages.Delivery); ok {
		m = d.Message
	}
	if s, ok := m.(*testpb.Stamp); ok && s.Seq < uint64(len(r.recv)) {
		r.recv[s.Seq] = tailNow()
		r.count.Add(1) // publishes recv[s.Seq] to the reader, which waits for the count
	}
}

func (r *tailRecorder) latencies() []float64 {
	out := make([]float64, len(r.recv))
	for i := range r.recv {
		out[i] = float64(r.recv[i] - r.pub[i])
	}
	sort.Float64s(out)
	return out
}

// pace calls send(i) for i < n at rate per second, from one goroutine,
// recording each publish time first.
func pace(n, rate int, r *tailRecorder, send func(i int) error) error {
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for i := 0; i < n; i++ {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		r.pub[i] = tailNow()
		if err := send(i); err != nil {
			return err
		}
	}
	return nil
}

func pct(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

// tailReport cuts each message's latency into stages: publish -> batch sent
// (producer), sent -> worker received (transport), worker -> subscriber
// (delivery), and compares the whole run with its tail.
func tailReport(rec, raw *tailRecorder, first uint64, sent, got []tailBatch) string {
	n := len(rec.pub)
	sendAt, ackOfPrev, recvAt := make([]int64, n), make([]int64, n), make([]int64, n)
	batchOf := make([]int, n)
	c := 0
	for bi, bt := range sent { // one peer: its batches are acked in cursor order
		for k := 0; k < bt.n && c < n; k++ {
			sendAt[c], batchOf[c] = bt.at, bi
			if bi > 0 {
				ackOfPrev[c] = sent[bi-1].acked
			}
			c++
		}
	}
	worker := map[uint64]tailBatch{} // by first cursor
	for _, bt := range got {
		worker[bt.first] = bt
		for k := 0; k < bt.n; k++ {
			if i := int(bt.first) - int(first) + k; i >= 0 && i < n {
				recvAt[i] = bt.at
			}
		}
	}
	lat := rec.latencies()
	p99 := pct(lat, 0.99)
	starts := make([]uint64, len(sent)) // each producer batch's first cursor
	for bi, c := 0, first; bi < len(sent); bi++ {
		starts[bi] = c
		c += uint64(sent[bi].n)
	}
	// the round trip of the batch in flight before a message's own,
	// in three parts: there, worker (receive to answered), back.
	type stages struct{ wait, transport, deliver, waitedAck, batch, prevThere, prevWorker, prevBack []float64 }
	var all, tail stages
	add := func(s *stages, i int) {
		s.wait = append(s.wait, float64(sendAt[i]-rec.pub[i]))
		s.transport = append(s.transport, float64(recvAt[i]-sendAt[i]))
		s.deliver = append(s.deliver, float64(rec.recv[i]-recvAt[i]))
		w := 0.0
		if bi := batchOf[i]; bi > 0 && rec.pub[i] < sent[bi-1].acked {
			w = 1 // published while the batch before was in flight: waited for its ack
		}
		s.waitedAck = append(s.waitedAck, w)
		s.batch = append(s.batch, float64(sent[batchOf[i]].n))
		if bi := batchOf[i]; bi > 0 && w == 1 {
			if wb, ok := worker[starts[bi-1]]; ok && wb.acked > 0 {
				s.prevThere = append(s.prevThere, float64(wb.at-sent[bi-1].at))
				s.prevWorker = append(s.prevWorker, float64(wb.acked-wb.at))
				s.prevBack = append(s.prevBack, float64(sent[bi-1].acked-wb.acked))
			}
		}
	}
	for i := 0; i < n && i < c; i++ {
		add(&all, i)
		if float64(rec.recv[i]-rec.pub[i]) >= p99 {
			add(&tail, i)
		}
	}
	med := func(xs []float64) float64 {
		ys := append([]float64(nil), xs...)
		sort.Float64s(ys)
		return pct(ys, 0.5)
	}
	mean := func(xs []float64) float64 {
		s := 0.0
		for _, x := range xs {
			s += x
		}
		return s / float64(max(len(xs), 1))
	}
	var sb strings.Builder
	rl := raw.latencies()
	fmt.Fprintf(&sb, "\nours: p50 %.2f ms, p99 %.2f ms, max %.2f ms; raw protoactor: p50 %.2f ms, p99 %.2f ms, max %.2f ms; %d batches\n",
		pct(lat, 0.5)/1e6, p99/1e6, lat[len(lat)-1]/1e6, pct(rl, 0.5)/1e6, pct(rl, 0.99)/1e6, rl[len(rl)-1]/1e6, len(sent))
	fmt.Fprintf(&sb, "%-8s %5s %12s %12s %12s %14s %10s\n", "", "msgs", "producer ms", "transport ms", "delivery ms", "waited ack %", "batch msgs")
	for _, x := range []struct {
		name string
		s    stages
	}{{"all", all}, {"tail", tail}} {
		fmt.Fprintf(&sb, "%-8s %5d %12.3f %12.3f %12.3f %14.0f %10.1f\n", x.name, len(x.s.wait), med(x.s.wait)/1e6, med(x.s.transport)/1e6,
			med(x.s.deliver)/1e6, 100*mean(x.s.waitedAck), mean(x.s.batch))
	}
	sb.WriteString("(medians of each stage; waited ack: published while the batch before it was in flight)\n")
	fmt.Fprintf(&sb, "%-8s %12s %12s %12s   (the batch waited for: medians, ms)\n", "", "there", "worker", "ack back")
	for _, x := range []struct {
		name string
		s    stages
	}{{"all", all}, {"tail", tail}} {
		fmt.Fprintf(&sb, "%-8s %12.3f %12.3f %12.3f\n", x.name, med(x.s.prevThere)/1e6, med(x.s.prevWorker)/1e6, med(x.s.prevBack)/1e6)
	}
	return sb.String()
}

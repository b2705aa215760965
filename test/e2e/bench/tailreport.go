package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
)

// tailInput is what the harness gathered of a traced latency run.
type tailInput struct {
	System string          `json:"system"`
	Addrs  []string        `json:"addrs"`
	Traces []*nodeTrace    `json:"traces"` // by node
	CPU    []time.Duration `json:"cpu"`    // per node, over the repetition
	RunQ   []time.Duration `json:"runq"`   // per node: threads runnable, waiting for a core
	Start  int64           `json:"start"`  // unix ns of the first publish
	// Window: EchoPubSub's MaxBatchesInFlight in the run.
	Window int `json:"window"`
}

func saveTail(path string, in *tailInput) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func loadTail(path string) (*tailInput, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	in := &tailInput{}
	if err := json.Unmarshal(b, in); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return in, nil
}

// tailMsg is one message's path to one receiving node.
type tailMsg struct {
	node                int
	pub, recv           int64
	lat                 int64
	staged              bool
	send, wrecv, wacked int64 // batch sent (node 0), worker got it, worker answered (node i)
	ack, prevAck        int64 // node 0 got the batch's ack; the ack of the batch before
	inflight, batchN    int   // batches to the node in flight when it was sent; its size
	pos                 int   // the message's place in its batch
	gc                  [2]bool
	// prodGap: the longest time in [pub, send] with no sign of node 0's
	// producer (a batch sent or an ack handled, to or from any node);
	// pubGap: the same for node 0's publishers (a message published).
	prodGap, pubGap int64
	// flightAtPub: batches to the node in flight when the message was
	// published; sinceAck: its batch was sent this long after node 0 last
	// handled an ack of that node.
	flightAtPub int
	sinceAck    int64
}

// maxGap is the longest interval between consecutive times of sorted
// within [lo, hi], lo and hi included.
func maxGap(sorted []int64, lo, hi int64) int64 {
	prev, g := lo, int64(0)
	for i := sort.Search(len(sorted), func(i int) bool { return sorted[i] > lo }); i < len(sorted) && sorted[i] < hi; i++ {
		g, prev = max(g, sorted[i]-prev), sorted[i]
	}
	return max(g, hi-prev)
}

// tailAnalysis cuts each message's latency into stages and compares the
// tail (latency >= p99 over every receiving node) with the median.
func tailAnalysis(in *tailInput) string {
	var msgs []tailMsg
	var sb strings.Builder
	n0 := in.Traces[0]
	var prodAct, pubAt []int64
	for _, ts := range n0.Sends {
		prodAct = append(prodAct, ts...)
	}
	for _, fs := range n0.Flushes {
		for _, f := range fs {
			prodAct = append(prodAct, f.At)
		}
	}
	if len(in.Traces) > 1 {
		for _, m := range in.Traces[1].Msgs {
			pubAt = append(pubAt, m.Sent)
		}
	}
	sort.Slice(prodAct, func(a, b int) bool { return prodAct[a] < prodAct[b] })
	sort.Slice(pubAt, func(a, b int) bool { return pubAt[a] < pubAt[b] })
	for i := 1; i < len(in.Traces); i++ {
		tr := in.Traces[i]
		if tr == nil {
			continue
		}
		addr := in.Addrs[i]
		sends, flushes := n0.Sends[addr], n0.Flushes[addr]
		var batches []batchRec
		for _, b := range tr.Batches {
			if b.From == in.Addrs[0] {
				batches = append(batches, b)
			}
		}
		where := map[uint64][2]int{} // seq -> batch, position
		for j, b := range batches {
			for k, s := range b.Seqs {
				where[s] = [2]int{j, k}
			}
		}
		if in.System == sysOurs {
			// One answer (Flushed) may acknowledge several batches
			// (cumulative acks): each batch it covers was acked then.
			answers, bad := len(flushes), 0
			var perBatch []flushRec
			for _, f := range flushes {
				left := f.N
				for left > 0 && len(perBatch) < len(batches) {
					b := batches[len(perBatch)]
					left -= len(b.Seqs)
					perBatch = append(perBatch, flushRec{N: len(b.Seqs), At: f.At, RTT: f.RTT})
				}
				if left != 0 {
					bad++
				}
			}
			flushes = perBatch
			fmt.Fprintf(&sb, "node %d: %d batches sent, %d acked in %d answers (node 0), %d received (node %d)", i, len(sends), len(flushes), answers, len(batches), i)
			if bad > 0 || len(sends) != len(batches) {
				fmt.Fprintf(&sb, " (MISMATCH: %d answers do not end at a batch's end: the stages are unreliable)", bad)
			}
			sb.WriteString("\n")
		}
		for _, m := range tr.Msgs {
			t := tailMsg{node: i, pub: m.Sent, recv: m.Recv, lat: m.Recv - m.Sent}
			if w, ok := where[m.Seq]; ok && w[0] < len(sends) {
				j := w[0]
				b := batches[j]
				t.staged, t.send, t.wrecv, t.wacked, t.batchN, t.pos = true, sends[j], b.At, b.Acked, len(b.Seqs), w[1]
				t.prodGap, t.pubGap = maxGap(prodAct, t.pub, t.send), maxGap(pubAt, t.pub, t.send)
				if j < len(flushes) {
					t.ack = flushes[j].At
				}
				if j > 0 && j-1 < len(flushes) {
					t.prevAck = flushes[j-1].At
				}
				for k := j - 1; k >= 0 && k < len(flushes); k-- {
					if flushes[k].At > t.send {
						t.inflight++
					} else {
						t.sinceAck = t.send - flushes[k].At
						break
					}
				}
				for k := min(j, len(flushes)) - 1; k >= 0 && flushes[k].At > t.pub; k-- {
					if sends[k] <= t.pub {
						t.flightAtPub++
					}
				}
			}
			for p, node := range []int{0, i} {
				for _, e := range in.Traces[node].Runtime.GCEnds {
					if e >= m.Sent && e <= m.Recv+int64(2*time.Millisecond) {
						t.gc[p] = true
					}
				}
			}
			msgs = append(msgs, t)
		}
	}
	if len(msgs) == 0 {
		return sb.String() + "no messages traced\n"
	}
	lats := make([]int64, len(msgs))
	for i, m := range msgs {
		lats[i] = m.lat
	}
	sort.Slice(lats, func(a, b int) bool { return lats[a] < lats[b] })
	q := func(p float64) int64 { return lats[min(len(lats)-1, int(p*float64(len(lats))))] }
	p40, p60, p99 := q(0.40), q(0.60), q(0.99)
	fmt.Fprintf(&sb, "latency over %d deliveries: p50 %.3f ms, p99 %.3f ms, max %.3f ms\n", len(lats), ms(q(0.5)), ms(p99), ms(lats[len(lats)-1]))
	var all, mid, tail []tailMsg
	for _, m := range msgs {
		all = append(all, m)
		if m.lat >= p40 && m.lat <= p60 {
			mid = append(mid, m)
		}
		if m.lat >= p99 {
			tail = append(tail, m)
		}
	}
	type col struct {
		name string
		f    func(m tailMsg) (float64, bool)
	}
	st := func(f func(m tailMsg) int64) func(m tailMsg) (float64, bool) {
		return func(m tailMsg) (float64, bool) { return ms(f(m)), m.staged }
	}
	cols := []col{
		{"latency", func(m tailMsg) (float64, bool) { return ms(m.lat), true }},
	}
	if in.System == sysOurs {
		cols = append(cols,
			col{"pub>sent", st(func(m tailMsg) int64 { return m.send - m.pub })},
			col{"sent>worker", st(func(m tailMsg) int64 { return m.wrecv - m.send })},
			col{"worker>coll", st(func(m tailMsg) int64 { return m.recv - m.wrecv })},
			col{"worker busy", st(func(m tailMsg) int64 { return m.wacked - m.wrecv })},
			col{"ack back", func(m tailMsg) (float64, bool) { return ms(m.ack - m.wacked), m.staged && m.ack > 0 && m.wacked > 0 }},
			col{"in flight", func(m tailMsg) (float64, bool) { return float64(m.inflight), m.staged }},
			col{"flight@pub", func(m tailMsg) (float64, bool) { return float64(m.flightAtPub), m.staged }},
			col{"win full %", func(m tailMsg) (float64, bool) { return pctBool(m.flightAtPub >= in.Window), m.staged }},
			col{"since ack", st(func(m tailMsg) int64 { return m.sinceAck })},
			col{"prod gap", st(func(m tailMsg) int64 { return m.prodGap })},
			col{"pub gap", st(func(m tailMsg) int64 { return m.pubGap })},
			col{"batch msgs", func(m tailMsg) (float64, bool) { return float64(m.batchN), m.staged }},
			col{"pos", func(m tailMsg) (float64, bool) { return float64(m.pos), m.staged }},
		)
	}
	cols = append(cols,
		col{"GC n0 %", func(m tailMsg) (float64, bool) { return pctBool(m.gc[0]), true }},
		col{"GC ni %", func(m tailMsg) (float64, bool) { return pctBool(m.gc[1]), true }},
	)
	fmt.Fprintf(&sb, "%-10s %6s", "", "msgs")
	for _, c := range cols {
		fmt.Fprintf(&sb, " %11s", c.name)
	}
	sb.WriteString("\n")
	row := func(name string, set []tailMsg, agg func([]float64) float64) {
		fmt.Fprintf(&sb, "%-10s %6d", name, len(set))
		for _, c := range cols {
			var xs []float64
			for _, m := range set {
				if v, ok := c.f(m); ok {
					xs = append(xs, v)
				}
			}
			if strings.HasSuffix(c.name, "%") {
				fmt.Fprintf(&sb, " %11.1f", mean(xs))
			} else {
				fmt.Fprintf(&sb, " %11.3f", agg(xs))
			}
		}
		sb.WriteString("\n")
	}
	row("all p50", all, median0)
	row("p40-60 p50", mid, median0)
	row("tail p50", tail, median0)
	row("tail mean", tail, mean)
	row("tail max", tail, func(xs []float64) float64 {
		if len(xs) == 0 {
			return 0
		}
		sort.Float64s(xs)
		return xs[len(xs)-1]
	})
	sb.WriteString("(ms; prod gap / pub gap: the longest time between publish and batch sent with no batch sent nor ack handled by node 0's producer / no message published on node 0; in flight / flight@pub: batches to that node unacked when its batch was sent / when it was published (win full: as many as MaxBatchesInFlight); since ack: its batch sent after node 0 handled that node's last ack; GC %: a GC cycle of node 0 / the receiving node ended between the publish and 2 ms after the delivery)\n")
	if in.System == sysOurs {
		// Which stage holds a tail message's extra time: the stage most
		// above its median over all messages.
		stages := []struct {
			name string
			f    func(m tailMsg) int64
		}{{"pub>sent", func(m tailMsg) int64 { return m.send - m.pub }}, {"sent>worker", func(m tailMsg) int64 { return m.wrecv - m.send }},
			{"worker>coll", func(m tailMsg) int64 { return m.recv - m.wrecv }}}
		meds := make([]float64, len(stages))
		for k, stg := range stages {
			var xs []float64
			for _, m := range all {
				if m.staged {
					xs = append(xs, float64(stg.f(m)))
				}
			}
			meds[k] = median0(xs)
		}
		count, excess := make([]int, len(stages)), make([]float64, len(stages))
		stall, staged := 0, 0
		for _, m := range tail {
			if !m.staged {
				continue
			}
			staged++
			best, bv := 0, -1e18
			for k, stg := range stages {
				x := float64(stg.f(m)) - meds[k]
				excess[k] += x
				if x > bv {
					best, bv = k, x
				}
			}
			count[best]++
			if best == 0 && m.pubGap >= (m.send-m.pub)/2 && m.pubGap >= int64(500*time.Microsecond) {
				stall++
			}
		}
		sb.WriteString("tail: where the extra time is (stage most above its median; mean excess over the median)\n")
		for k, stg := range stages {
			fmt.Fprintf(&sb, "  %-12s %5.1f %% of tail messages, mean excess %.3f ms\n", stg.name, 100*float64(count[k])/float64(max(staged, 1)), ms(int64(excess[k]/float64(max(staged, 1)))))
		}
		fmt.Fprintf(&sb, "  of the pub>sent ones, node 0 stalled (no message published for >= half the wait, >= 0.5 ms): %d of %d\n", stall, count[0])
	}
	// Episodes: the tail in time, split at gaps of 5 ms.
	sort.Slice(tail, func(a, b int) bool { return tail[a].pub < tail[b].pub })
	type episode struct {
		from, to int64
		msgs     []tailMsg
	}
	var eps []episode
	for _, m := range tail {
		if len(eps) == 0 || m.pub-eps[len(eps)-1].to > int64(5*time.Millisecond) {
			eps = append(eps, episode{from: m.pub})
		}
		e := &eps[len(eps)-1]
		e.to = m.pub
		e.msgs = append(e.msgs, m)
	}
	fmt.Fprintf(&sb, "tail episodes (publish times within 5 ms): %d\n", len(eps))
	fmt.Fprintf(&sb, "  %8s %7s %5s %8s %9s %9s %9s %9s %9s %9s  %s\n", "at ms", "len ms", "msgs", "max lat", "pub>sent", "sent>wkr", "wkr>coll", "prod gap", "pub gap", "in flight", "GC (node:ms from episode start)")
	for _, e := range eps {
		var maxLat int64
		var a, b, c, f, pg, ug []float64
		for _, m := range e.msgs {
			maxLat = max(maxLat, m.lat)
			if m.staged {
				a, b, c, f = append(a, ms(m.send-m.pub)), append(b, ms(m.wrecv-m.send)), append(c, ms(m.recv-m.wrecv)), append(f, float64(m.inflight))
				pg, ug = append(pg, ms(m.prodGap)), append(ug, ms(m.pubGap))
			}
		}
		var gcs []string
		for node, tr := range in.Traces {
			for _, g := range tr.Runtime.GCEnds {
				if g >= e.from-int64(3*time.Millisecond) && g <= e.to+int64(5*time.Millisecond)+maxLat {
					gcs = append(gcs, fmt.Sprintf("n%d:%+.1f", node, ms(g-e.from)))
				}
			}
		}
		fmt.Fprintf(&sb, "  %8.1f %7.2f %5d %8.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.1f  %s\n", ms(e.from-in.Start), ms(e.to-e.from), len(e.msgs), ms(maxLat),
			median0(a), median0(b), median0(c), median0(pg), median0(ug), mean(f), strings.Join(gcs, " "))
	}
	fmt.Fprintf(&sb, "%-6s %9s %9s %6s %9s %10s %10s %10s %10s\n", "proc", "CPU ms", "runq ms", "GCs", "GC CPU ms", "pause max", "sched p99", "sched max", "P busy ms")
	for i, tr := range in.Traces {
		rt := tr.Runtime
		fmt.Fprintf(&sb, "%-6s %9.0f %9.1f %6d %9.1f %10.3f %10.3f %10.3f %10.0f\n", fmt.Sprintf("n%d", i), ms(int64(in.CPU[i])), ms(int64(in.RunQ[i])),
			rt.GCCycles, rt.GCCPUMs, rt.PauseMaxMs, rt.SchedP99Ms, rt.SchedMaxMs, rt.UserCPUMs)
	}
	return sb.String()
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

func pctBool(b bool) float64 {
	if b {
		return 100
	}
	return 0
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(max(len(xs), 1))
}

func median0(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return median(xs)
}

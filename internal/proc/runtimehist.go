package proc

import (
	"math"
	"runtime/metrics"
)

// RuntimeSample is what the Go runtime says about this process, cumulative:
// GC cycles, GC pauses, the scheduling latency (time goroutines spent
// runnable before running), and GC and user CPU seconds. Subtract two
// samples (HistDelta for the histograms) for what happened in between.
type RuntimeSample struct {
	Cycles         uint64
	Pauses, Sched  *metrics.Float64Histogram
	GCCPU, UserCPU float64
}

var runtimeMetrics = []string{"/gc/cycles/total:gc-cycles", "/gc/pauses:seconds", "/sched/latencies:seconds",
	"/cpu/classes/gc/total:cpu-seconds", "/cpu/classes/user:cpu-seconds"}

// ReadRuntime samples the runtime's metrics now.
func ReadRuntime() RuntimeSample {
	ms := make([]metrics.Sample, len(runtimeMetrics))
	for i, n := range runtimeMetrics {
		ms[i].Name = n
	}
	metrics.Read(ms)
	return RuntimeSample{Cycles: ms[0].Value.Uint64(), Pauses: ms[1].Value.Float64Histogram(), Sched: ms[2].Value.Float64Histogram(),
		GCCPU: ms[3].Value.Float64(), UserCPU: ms[4].Value.Float64()}
}

// HistDelta is the counts of b less those of a (the same buckets).
func HistDelta(a, b *metrics.Float64Histogram) *metrics.Float64Histogram {
	d := &metrics.Float64Histogram{Buckets: b.Buckets, Counts: make([]uint64, len(b.Counts))}
	for i := range b.Counts {
		d.Counts[i] = b.Counts[i] - a.Counts[i]
	}
	return d
}

// HistQuantile is the upper bound of the bucket holding quantile q (1: the
// highest non-empty bucket), 0 for an empty histogram.
func HistQuantile(h *metrics.Float64Histogram, q float64) float64 {
	var total uint64
	for _, c := range h.Counts {
		total += c
	}
	if total == 0 {
		return 0
	}
	need := uint64(math.Ceil(q * float64(total)))
	var n uint64
	for i, c := range h.Counts {
		n += c
		if n >= need && c > 0 {
			if math.IsInf(h.Buckets[i+1], 1) {
				return h.Buckets[i]
			}
			return h.Buckets[i+1]
		}
	}
	return h.Buckets[len(h.Buckets)-1]
}

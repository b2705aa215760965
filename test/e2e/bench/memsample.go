package main

import (
	"bytes"
	"os"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"sync"
	"time"
)

// memSample is one reading of a node process's memory: its resident set
// and where the Go runtime says the memory went (runtime/metrics), so that
// a peak can be split into live heap, garbage not collected yet, free heap
// not returned to the OS, and the rest.
type memSample struct {
	RSS uint64 `json:"rss"` // VmRSS
	// HeapLive is the heap the last GC found live (/gc/heap/live).
	HeapLive uint64 `json:"heap_live"`
	// HeapObjects is the heap in objects: live plus garbage not collected
	// yet (/memory/classes/heap/objects).
	HeapObjects uint64 `json:"heap_objects"`
	// HeapIdle is heap memory the runtime holds but no object uses: free
	// spans and the unused tails of spans (/memory/classes/heap/free and
	// /unused), resident until the scavenger returns it.
	HeapIdle uint64 `json:"heap_idle"`
	Released uint64 `json:"released"` // returned to the OS (/memory/classes/heap/released)
	Stacks   uint64 `json:"stacks"`   // goroutine stacks
	// Runtime is the runtime's own structures (GC metadata, mspans, ...):
	// /memory/classes/total minus the heap and stacks.
	Runtime  uint64 `json:"runtime"`
	HeapGoal uint64 `json:"heap_goal"`
	Limit    int64  `json:"limit"` // /gc/gomemlimit (math.MaxInt64: none)
	// GCCycles, AllocBytes and AllocObjects are cumulative since start;
	// GCCPU and UsedCPU the runtime's CPU-seconds estimates (UsedCPU: the
	// CPU available to the process, GOMAXPROCS x time, less idle).
	GCCycles     uint64  `json:"gc_cycles"`
	AllocBytes   uint64  `json:"alloc_bytes"`
	AllocObjects uint64  `json:"alloc_objects"`
	GCCPU        float64 `json:"gc_cpu_s"`
	UsedCPU      float64 `json:"used_cpu_s"`
}

// memStats is what a node answers to "memstats": the sample taken at its
// highest resident set so far, and one taken now.
type memStats struct {
	Peak memSample `json:"peak"`
	Now  memSample `json:"now"`
}

var memMetrics = []string{
	"/gc/heap/live:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/released:bytes",
	"/memory/classes/heap/stacks:bytes",
	"/memory/classes/total:bytes",
	"/gc/heap/goal:bytes",
	"/gc/gomemlimit:bytes",
	"/gc/cycles/total:gc-cycles",
	"/gc/heap/allocs:bytes",
	"/gc/heap/allocs:objects",
	"/cpu/classes/gc/total:cpu-seconds",
	"/cpu/classes/total:cpu-seconds",
	"/cpu/classes/idle:cpu-seconds",
}

// memSampler reads the process's memory every interval and keeps the
// reading taken at the highest resident set: VmHWM says how high the peak
// was, this says what it was made of.
type memSampler struct {
	mu   sync.Mutex
	peak memSample
	ms   []metrics.Sample
}

func startMemSampler(interval time.Duration) *memSampler {
	s := &memSampler{ms: make([]metrics.Sample, len(memMetrics))}
	for i, name := range memMetrics {
		s.ms[i].Name = name
	}
	go func() {
		for range time.Tick(interval) { // lives as long as the node process
			cur := s.read()
			s.mu.Lock()
			if cur.RSS >= s.peak.RSS {
				s.peak = cur
			}
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *memSampler) stats() memStats {
	now := s.read()
	s.mu.Lock()
	defer s.mu.Unlock()
	return memStats{Peak: s.peak, Now: now}
}

// read takes one sample; called by the sampling goroutine and by stats,
// under no lock: metrics.Read needs its own slice.
func (s *memSampler) read() memSample {
	ms := make([]metrics.Sample, len(s.ms))
	copy(ms, s.ms)
	metrics.Read(ms)
	u := func(i int) uint64 {
		if ms[i].Value.Kind() == metrics.KindUint64 {
			return ms[i].Value.Uint64()
		}
		return 0
	}
	f := func(i int) float64 {
		if ms[i].Value.Kind() == metrics.KindFloat64 {
			return ms[i].Value.Float64()
		}
		return 0
	}
	m := memSample{RSS: vmRSS(), HeapLive: u(0), HeapObjects: u(1), HeapIdle: u(2) + u(3), Released: u(4), Stacks: u(5),
		HeapGoal: u(7), Limit: int64(u(8)), GCCycles: u(9), AllocBytes: u(10), AllocObjects: u(11), GCCPU: f(12), UsedCPU: f(13) - f(14)}
	heap := m.HeapObjects + m.HeapIdle + m.Released + m.Stacks
	if t := u(6); t > heap {
		m.Runtime = t - heap
	}
	return m
}

// vmRSS is the process's resident set now, in bytes (/proc/self/statm).
func vmRSS() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseUint(string(f[1]), 10, 64)
	return pages * uint64(os.Getpagesize())
}

// handleMem serves the memory commands: "memstats" (the sampler's peak
// and now) and "heapprof" (a heap profile written to c.Path). It reports
// whether c was one of them.
func (n *nodeProc) handleMem(c cmd, reply *event) bool {
	switch c.Op {
	case "memstats":
		if n.mem == nil {
			reply.OK, reply.Err = false, "memory sampler not running (nodeConfig.MemSample)"
			return true
		}
		st := n.mem.stats()
		reply.Mem = &st
	case "heapprof":
		f, err := os.Create(c.Path)
		if err == nil {
			err = pprof.Lookup("heap").WriteTo(f, 0)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			reply.OK, reply.Err = false, err.Error()
		}
	default:
		return false
	}
	return true
}

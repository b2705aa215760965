package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// The memory mode (-memory, make bench-memory) measures issue 26 item 4:
// node 0's resident set with BufferSize 2,000,000 full, at 10 B and 200 B,
// with and without a GOMEMLIMIT on node 0, and what the peak is made of.
// It writes its own section of docs/benchmarks.md (between the markers
// below), and a full run (-full -doc) keeps that section as it was.

const (
	memBegin = "<!-- bench-memory: begin (make bench-memory writes this section) -->"
	memEnd   = "<!-- bench-memory: end -->"
	// memBefore is the heading the section goes before when a document
	// has no section yet.
	memBefore = "## CPU per delivered message"
)

// memLimitOf turns one -memlimit value into bytes for a scenario at pad
// bytes and nodes nodes: "off" is 0 (no limit), "auto" what
// Config.MemoryLimit suggests for node 0's Config, "auto+64MiB" that plus a
// size, anything else a size ("300MiB").
func memLimitOf(v string, pad, buffer, nodes int) (int64, error) {
	if v == "off" {
		return 0, nil
	}
	if rest, ok := strings.CutPrefix(v, "auto"); ok {
		cfg := echopubsub.DefaultConfig("bench")
		cfg.PoolSize, cfg.BufferSize = 1, buffer // as startOurs sets them
		lim := cfg.MemoryLimit(encodedSize(pad), nodes, 0)
		if rest == "" {
			return lim, nil
		}
		more, err := parseSize(strings.TrimPrefix(rest, "+"))
		if err != nil || !strings.HasPrefix(rest, "+") {
			return 0, fmt.Errorf("-memlimit: bad %q (auto+<size>)", v)
		}
		return lim + more, nil
	}
	return parseSize(v)
}

// encodedSize is the bytes a producer buffers per message at pad: the
// Stamp as the publishers send it (a sequence number of the largest
// repetition, publisher and index the runs use).
func encodedSize(pad int) int {
	return proto.Size(&testpb.Stamp{Seq: makeSeq(9, 9, 999_999), Pad: make([]byte, pad)})
}

func parseSize(v string) (int64, error) {
	units := []struct {
		suffix string
		mult   float64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(v, u.suffix); ok {
			var f float64
			if _, err := fmt.Sscanf(num, "%g", &f); err != nil || f <= 0 {
				return 0, fmt.Errorf("-memlimit: bad size %q", v)
			}
			return int64(f * u.mult), nil
		}
	}
	return 0, fmt.Errorf("-memlimit: %q is not off, auto or a size like 300MiB", v)
}

// memoryScenarios lists the memory mode's runs: EchoPubSub, the first node
// count and interval, every payload, each -memlimit value.
func memoryScenarios(o *options) ([]scenario, error) {
	var out []scenario
	for _, pad := range o.payloads {
		for _, v := range splitList(o.memLimits) {
			lim, err := memLimitOf(v, pad, 2*o.n, o.nodes[0])
			if err != nil {
				return nil, err
			}
			out = append(out, scenario{System: sysOurs, Nodes: o.nodes[0], Interval: o.intervals[0], Pad: pad, N: o.n,
				Reps: o.reps, Pubs: o.pubs, MemLimit: lim})
		}
	}
	return out, nil
}

// collectMem asks node 0 for its memory at its peak and saves its heap
// profile (live objects at the end, and everything allocated) beside the
// logs; the top of each goes into res.Profiles.
func (r *runner) collectMem(n0 *child, tag string, res *result) error {
	ev, err := n0.call(cmd{Op: "memstats"}, 10*time.Second)
	if err != nil {
		return err
	}
	if ev.Mem == nil {
		return fmt.Errorf("node 0: no memstats: %s", ev.Err)
	}
	res.Mem = ev.Mem
	path := filepath.Join(r.dir, tag+".n0.heap.pprof")
	if ev, err := n0.call(cmd{Op: "heapprof", Path: path}, 30*time.Second); err != nil || !ev.OK {
		return fmt.Errorf("node 0 heap profile: %v %s", err, ev.Err)
	}
	res.Profiles = map[string]string{}
	for _, idx := range []string{"inuse_space", "alloc_space"} {
		out, err := exec.Command("go", "tool", "pprof", "-sample_index="+idx, "-top", "-nodecount=25", path).CombinedOutput()
		if err != nil {
			out = append(out, []byte("\n(pprof: "+err.Error()+")")...)
		}
		res.Profiles["n0-heap-"+idx] = string(out)
	}
	return nil
}

// memoryMain runs the memory mode and prints (and with -doc, writes) its
// section.
func memoryMain(o *options) error {
	ss, err := memoryScenarios(o)
	if err != nil {
		return err
	}
	dir := o.logDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "echopubsub-bench-memory-"); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	p := newProgress(len(ss), o.quiet)
	p.note("bench -memory: %d scenarios, logs and heap profiles in %s", len(ss), dir)
	r := &runner{dir: dir, stall: o.stall, warmup: o.warmup, maxBatch: o.maxBatch, maxPending: o.maxPending, ackIval: o.ackIval, memory: true, progress: p}
	var rows []memRow
	for _, s := range ss {
		p.next()
		load := loadAvg()
		res := r.run(s)
		rows = append(rows, memRow{res: res, loadBefore: load, loadAfter: loadAvg(), at: time.Now().UTC()})
		if res.Err != "" {
			p.note("%s: ERROR %s", s.label(), res.Err)
		}
		for _, k := range []string{"n0-heap-inuse_space", "n0-heap-alloc_space"} {
			fmt.Fprintf(os.Stderr, "\n%s, %s:\n%s", s.label(), k, res.Profiles[k])
		}
	}
	sec := memorySection(o, rows)
	fmt.Print(sec)
	if o.doc != "" {
		old, err := os.ReadFile(o.doc)
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.doc, []byte(spliceMemory(string(old), sec)), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "wrote the memory section of %s\n", o.doc)
	}
	for _, row := range rows {
		if row.res.Err != "" || !row.res.Valid {
			return fmt.Errorf("%s: not a valid run: %s", row.res.label(), row.res.cell())
		}
	}
	return nil
}

type memRow struct {
	res                   result
	loadBefore, loadAfter string
	at                    time.Time
}

// memBound is issue 26's bound on the producer's resident set:
// 1.5 x BufferSize x (payload + 32 B) + 64 MiB.
func memBound(buffer, payload int) float64 {
	return 1.5*float64(buffer)*float64(payload+32) + 64<<20
}

// memorySection renders the rows as the document's memory section,
// markers included.
func memorySection(o *options, rows []memRow) string {
	var b strings.Builder
	w := func(format string, args ...interface{}) { fmt.Fprintf(&b, format, args...) }
	mib := func(v uint64) string { return fmt.Sprintf("%.0f", float64(v)/(1<<20)) }
	w("%s\n## Producer memory at BufferSize %s (issue 26 item 4)\n\n", memBegin, commas(float64(2*o.n)))
	w("Generated by `make bench-memory` (`%s`) on %s, code %s, %s, `nproc` = %d. ",
		o.cmdline, rows[0].at.Format("2006-01-02 15:04 MST"), gitState(), goVersion(), runtime.NumCPU())
	w("Node 0 of %d separate node processes publishes %s messages per repetition (a %s warm-up, then %d repetitions) into a producer with BufferSize %s, PoolSize 1, BatchInterval %v: ",
		o.nodes[0], commas(float64(o.n)), commas(float64(min(o.warmup, o.n))), o.reps, commas(float64(2*o.n)), o.intervals[0])
	w("%s messages in all, so the buffer is full at the end. The other nodes are not limited. ", commas(float64(min(o.warmup, o.n)+o.reps*o.n)))
	w("Target: VmHWM <= 1.5 x BufferSize x (payload + 32 B) + 64 MiB; the bound is given for the pad alone (as the issue states it) and for the encoded message the producer buffers (the Stamp: pad, sequence number, framing). ")
	w("`auto` is `Config.MemoryLimit(encoded size, nodes, 0)` (see docs/operations.md, Sizing), `auto+X` that plus X.\n\n")
	w("| payload (encoded) | GOMEMLIMIT | node 0 VmHWM MiB | bound MiB (pad / encoded) | met? | msg/s | load average (1, 5, 15 min) before / after |\n|---|---|---:|---|---|---:|---|\n")
	for _, row := range rows {
		r := row.res
		enc := encodedSize(r.Pad)
		lim := "off"
		if r.MemLimit > 0 {
			lim = fmt.Sprintf("%d MiB", r.MemLimit>>20)
		}
		hwm := float64(0)
		if len(r.RSSKB) > 0 {
			hwm = float64(r.RSSKB[0]) * 1024
		}
		bp, be := memBound(2*r.N, r.Pad), memBound(2*r.N, enc)
		met := "no"
		switch {
		case hwm <= bp:
			met = "yes"
		case hwm <= be:
			met = "encoded bound only"
		}
		w("| %d B (%d B) | %s | %.0f | %.0f / %.0f | %s | %s | %s / %s |\n", r.Pad, enc, lim, hwm/(1<<20), bp/(1<<20), be/(1<<20), met, r.cell(), row.loadBefore, row.loadAfter)
	}
	w("\nWhat node 0's peak is made of (runtime/metrics, sampled every 20 ms, the sample at the highest VmRSS), MiB: ")
	w("live = the heap the last GC found live; garbage = heap objects not collected yet; idle = heap spans free or part unused, still resident; runtime = GC metadata and other runtime structures; not Go = VmRSS minus what the runtime holds resident (binary, C, kernel). ")
	w("GC CPU is the runtime's estimate of the GC's share of the CPU node 0 used over its whole life (warm-up and setup included); allocated is the heap allocated per message node 0 published (the publishers' own messages included).\n\n")
	w("| payload | GOMEMLIMIT | VmRSS | live | garbage | idle | released | stacks + runtime | not Go | heap goal | GC cycles | GC CPU | allocated per message |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, row := range rows {
		r := row.res
		if r.Mem == nil {
			continue
		}
		m, now := r.Mem.Peak, r.Mem.Now
		lim := "off"
		if r.MemLimit > 0 {
			lim = fmt.Sprintf("%d MiB", r.MemLimit>>20)
		}
		garbage := uint64(0)
		if m.HeapObjects > m.HeapLive {
			garbage = m.HeapObjects - m.HeapLive
		}
		held := m.HeapObjects + m.HeapIdle + m.Stacks + m.Runtime
		notGo := int64(m.RSS) - int64(held)
		msgs := float64(min(o.warmup, r.N) + r.scenario.Reps*r.N)
		gcShare := 0.0
		if now.UsedCPU > 0 {
			gcShare = 100 * now.GCCPU / now.UsedCPU
		}
		w("| %d B | %s | %s | %s | %s | %s | %s | %s | %.0f | %s | %d | %.1f%% | %.0f B in %.1f objects |\n",
			r.Pad, lim, mib(m.RSS), mib(m.HeapLive), mib(garbage), mib(m.HeapIdle), mib(m.Released), mib(m.Stacks+m.Runtime),
			float64(notGo)/(1<<20), mib(m.HeapGoal), now.GCCycles, gcShare, float64(now.AllocBytes)/msgs, float64(now.AllocObjects)/msgs)
	}
	w("\nReading it: without a limit the peak is about twice the live heap. GOGC=100 puts the next collection at twice what the last one found live, and the full buffer is nearly all of the live heap, so above it sit garbage not collected yet and free heap not yet returned to the OS. ")
	w("Under a GOMEMLIMIT the GC collects as the process nears the limit instead; the price is more collections (GC cycles, GC CPU), each cheap because the buffer holds no pointers for the GC to mark, and their number is the bytes allocated per message over the headroom left above the live heap. ")
	w("msg/s is only indicative here: the machine is shared and loaded (see the load column). Node 0's heap profiles (live at the end, and everything allocated) are kept beside the run's logs.\n")
	w("\n%s\n", memEnd)
	return b.String()
}

// spliceMemory puts sec in doc in place of its memory section, or before
// memBefore when it has none (at the end without that heading either).
func spliceMemory(doc, sec string) string {
	if i := strings.Index(doc, memBegin); i >= 0 {
		if j := strings.Index(doc[i:], memEnd); j >= 0 {
			rest := strings.TrimPrefix(doc[i+j+len(memEnd):], "\n")
			return doc[:i] + strings.TrimSuffix(sec, "\n") + "\n" + rest
		}
	}
	if i := strings.Index(doc, memBefore); i >= 0 {
		return doc[:i] + sec + "\n" + doc[i:]
	}
	return strings.TrimSuffix(doc, "\n") + "\n\n" + sec
}

// keepMemory returns the memory section of the document at path, if it
// has one: a full run rewrites the document and keeps that section.
func keepMemory(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	doc := string(b)
	i := strings.Index(doc, memBegin)
	if i < 0 {
		return ""
	}
	j := strings.Index(doc[i:], memEnd)
	if j < 0 {
		return ""
	}
	return doc[i:i+j+len(memEnd)] + "\n"
}

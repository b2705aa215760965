package main

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/internal/proc"
)

// scenario is one cell of the matrix: one system, one shape.
type scenario struct {
	System   string        `json:"system"`
	Nodes    int           `json:"nodes"`
	Interval time.Duration `json:"interval"` // EchoPubSub's BatchInterval; ignored by the peers
	Pad      int           `json:"pad"`      // payload bytes
	N        int           `json:"n"`
	Reps     int           `json:"reps"`
	Pubs     int           `json:"pubs"`
	// Rate > 0: a latency run at this offered load (msg/s, all publishers).
	Rate int `json:"rate,omitempty"`
	// Profile: one extra repetition with a CPU profile of the publishing
	// node and of one receiving node.
	Profile bool `json:"profile,omitempty"`
	// MemLimit > 0: node 0 runs with GOMEMLIMIT set to it (bytes).
	MemLimit int64 `json:"mem_limit,omitempty"`
	// Encoded: EchoPubSub's subscribers take each message encoded
	// (-encoded), not decoded; labelled "echopubsub-encoded".
	Encoded bool `json:"encoded,omitempty"`
}

func (s scenario) label() string {
	sys := s.System
	if s.Encoded {
		sys += "-encoded" // not the decoded figure: subscribers WithFormat(FormatEncoded)
	}
	l := fmt.Sprintf("%s nodes=%d pad=%dB", sys, s.Nodes, s.Pad)
	if s.System == sysOurs {
		l += fmt.Sprintf(" interval=%v", s.Interval)
	}
	if s.Rate > 0 {
		l += fmt.Sprintf(" latency@%d/s", s.Rate)
	}
	if s.MemLimit > 0 {
		l += fmt.Sprintf(" GOMEMLIMIT=%dMiB", s.MemLimit>>20)
	}
	return l
}

// repResult is one repetition.
type repResult struct {
	Seconds float64 `json:"seconds"`
	Valid   bool    `json:"valid"`
	// Per node: unique messages, duplicates (incl. strays), and notices.
	Unique   []int64 `json:"unique"`
	Dups     []int64 `json:"dups"`
	Notices  []int64 `json:"notices"`
	Reorders []int64 `json:"reorders"`
	PubErrs  int64   `json:"pub_errs"`
	Why      string  `json:"why,omitempty"`
}

type latResult struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms,omitempty"`
	Max   float64 `json:"max_ms"`
}

type result struct {
	scenario
	Reps      []repResult `json:"rep_results"`
	Valid     bool        `json:"valid"` // every repetition counted exactly N everywhere
	MsgPerSec float64     `json:"msg_per_s"`
	RSSKB     []int64     `json:"rss_kb"` // peak RSS (VmHWM) per node, node 0 publishes
	// CPUNsPerDelivery: user+sys CPU of every process of the scenario (the
	// nodes, and the NATS server for NATS) over the counted repetitions,
	// divided by the deliveries (N x nodes x repetitions).
	CPUNsPerDelivery float64 `json:"cpu_ns_per_delivery,omitempty"`
	// RunQueueNsPerDelivery: the time the same processes' threads were
	// runnable but waiting for a core (proc.RunQueueWait), per delivery:
	// with CPUNsPerDelivery, it tells waiting in the pipeline from the
	// machine's other work holding the cores.
	RunQueueNsPerDelivery float64 `json:"runq_ns_per_delivery,omitempty"`
	// NodeCPUNsPerMessage: each node's own user+sys CPU over the counted
	// repetitions per message it delivered (N x repetitions); node 0
	// publishes, the others receive.
	NodeCPUNsPerMessage []float64         `json:"node_cpu_ns_per_message,omitempty"`
	Lat                 *latResult        `json:"latency,omitempty"`
	Profiles            map[string]string `json:"profiles,omitempty"`
	// ProfileFiles are the CPU profiles behind Profiles, by node.
	ProfileFiles map[string]string `json:"profile_files,omitempty"`
	// Mem: node 0's memory at its peak and at the end (-memory runs).
	Mem *memStats `json:"mem,omitempty"`
	// TailTrace: the stages of the latency run's median and tail
	// (-trace-tail, tailreport.go).
	TailTrace string `json:"tail_trace,omitempty"`
	Err       string `json:"err,omitempty"`
}

// runner runs scenarios, one fresh set of processes each.
type runner struct {
	dir    string // logs and profiles
	stall  time.Duration
	warmup int // messages of the uncounted first repetition; 0 none
	// EchoPubSub config overrides for experiments (0: library default).
	maxBatch, maxPending, maxFlight int
	ackIval                         *time.Duration // nil: the library's
	// memory: sample node 0's memory and keep its heap profile (-memory).
	memory bool
	// traceTail: trace each message of the latency runs (-trace-tail);
	// with traceProfile, CPU-profile nodes 0 and 1 over them too.
	traceTail, traceProfile bool
	progress                *progress
}

func (r *runner) run(s scenario) (res result) {
	res = result{scenario: s}
	if err := r.runErr(s, &res); err != nil {
		res.Err = err.Error()
		res.Valid = false
	}
	return res
}

func (r *runner) runErr(s scenario, res *result) error {
	ports, err := proc.FreePorts(s.Nodes + 1)
	if err != nil {
		return err
	}
	tag := strings.NewReplacer(" ", "_", "=", "", "@", "_", "/", "").Replace(s.label())
	var addrs []string
	for i := 0; i < s.Nodes; i++ {
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", ports[i]))
	}
	var natsURL string
	var procs []*child
	defer func() {
		var wg sync.WaitGroup
		for _, p := range procs {
			wg.Add(1)
			go func(p *child) { defer wg.Done(); p.stop() }(p)
		}
		wg.Wait()
	}()
	if s.System == sysNATS || s.System == sysJetStream {
		store, err := os.MkdirTemp(r.dir, "js")
		if err != nil {
			return err
		}
		np, err := startChild("nats-server", "nats", nodeConfig{NatsPort: ports[s.Nodes], StoreDir: store},
			filepath.Join(r.dir, tag+".nats.log"), 30*time.Second)
		if err != nil {
			return err
		}
		procs = append(procs, np)
		natsURL = fmt.Sprintf("nats://127.0.0.1:%d", ports[s.Nodes])
	}
	nodes := make([]*child, s.Nodes)
	errs := make([]error, s.Nodes)
	var wg sync.WaitGroup
	for i := 0; i < s.Nodes; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			cfg := nodeConfig{System: s.System, Index: i, Addrs: addrs, NatsURL: natsURL,
				BatchInterval: s.Interval, Buffer: 2 * s.N, Pubs: s.Pubs,
				MaxBatchMessages: r.maxBatch, MaxPendingWrites: r.maxPending, MaxBatchesInFlight: r.maxFlight, AckInterval: r.ackIval, MemSample: r.memory && i == 0,
				TraceTail: r.traceTail && s.Rate > 0, Encoded: s.Encoded}
			var env []string
			if i == 0 && s.MemLimit > 0 {
				env = append(env, fmt.Sprintf("GOMEMLIMIT=%d", s.MemLimit))
			}
			nodes[i], errs[i] = startChild(fmt.Sprintf("n%d", i), "node", cfg,
				filepath.Join(r.dir, fmt.Sprintf("%s.n%d.log", tag, i)), 60*time.Second, env...)
		}(i)
	}
	wg.Wait()
	for i, p := range nodes {
		if p != nil {
			procs = append(procs, p)
		}
		if errs[i] != nil {
			return errs[i]
		}
	}
	if err := waitReady(nodes, 60*time.Second); err != nil {
		return err
	}
	reps := s.Reps
	if s.Rate > 0 {
		reps = 1
	}
	if r.warmup > 0 && s.Rate == 0 {
		// Connections, heap and caches warm up in a repetition that does
		// not count (numbered 0; it may be inexact, e.g. a lossy peer).
		ws := s
		ws.N = min(s.N, r.warmup)
		if _, err := r.rep(ws, nodes, 0, false); err != nil {
			return err
		}
	}
	cpu0, runq0 := cpuOf(procs), runQueueOf(procs)
	tin := &tailInput{System: s.System, Addrs: addrs, Window: r.maxFlight}
	if tin.Window == 0 {
		tin.Window = echopubsub.DefaultConfig("bench").MaxBatchesInFlight
	}
	for _, p := range nodes {
		tin.CPU, tin.RunQ = append(tin.CPU, p.cpu()), append(tin.RunQ, proc.RunQueueWait(p.Pid()))
	}
	traceProf := r.traceTail && r.traceProfile && s.Rate > 0
	if traceProf {
		for _, i := range []int{0, 1} {
			path := filepath.Join(r.dir, fmt.Sprintf("%s.n%d.cpu.pprof", tag, i))
			if _, err := nodes[i].call(cmd{Op: "prof_start", Path: path}, 5*time.Second); err != nil {
				return err
			}
		}
	}
	for rep := 1; rep <= reps; rep++ {
		rr, err := r.rep(s, nodes, rep, false)
		if err != nil {
			return err
		}
		res.Reps = append(res.Reps, rr)
	}
	if traceProf {
		for _, i := range []int{0, 1} {
			if _, err := nodes[i].call(cmd{Op: "prof_stop"}, 10*time.Second); err != nil {
				return err
			}
		}
	}
	for i, p := range nodes {
		tin.CPU[i], tin.RunQ[i] = p.cpu()-tin.CPU[i], proc.RunQueueWait(p.Pid())-tin.RunQ[i]
	}
	if deliveries := float64(s.N) * float64(s.Nodes) * float64(reps); s.Rate == 0 && deliveries > 0 {
		res.CPUNsPerDelivery = float64(cpuOf(procs)-cpu0) / deliveries
		res.RunQueueNsPerDelivery = float64(runQueueOf(procs)-runq0) / deliveries
		for _, c := range tin.CPU {
			res.NodeCPUNsPerMessage = append(res.NodeCPUNsPerMessage, float64(c)/(float64(s.N)*float64(reps)))
		}
	}
	if s.Profile && s.Rate == 0 {
		res.Profiles = map[string]string{}
		paths := map[string]string{}
		for _, i := range []int{0, 1} {
			path := filepath.Join(r.dir, fmt.Sprintf("%s.n%d.cpu.pprof", tag, i))
			if _, err := nodes[i].call(cmd{Op: "prof_start", Path: path}, 5*time.Second); err != nil {
				return err
			}
			paths[fmt.Sprintf("n%d", i)] = path
		}
		if _, err := r.rep(s, nodes, reps+1, false); err != nil {
			return err
		}
		for _, i := range []int{0, 1} {
			if _, err := nodes[i].call(cmd{Op: "prof_stop"}, 10*time.Second); err != nil {
				return err
			}
		}
		res.ProfileFiles = paths
		for name, path := range paths {
			out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=30", path).CombinedOutput()
			if err != nil {
				out = append(out, []byte("\n(pprof: "+err.Error()+")")...)
			}
			res.Profiles[name] = string(out)
			cum, err := exec.Command("go", "tool", "pprof", "-top", "-cum", "-nodecount=30", path).CombinedOutput()
			if err == nil {
				res.Profiles[name+"-cum"] = string(cum)
			}
		}
	}
	if s.Rate > 0 {
		var all []int64
		for _, p := range nodes[1:] {
			ev, err := p.call(cmd{Op: "latency"}, 30*time.Second)
			if err != nil {
				return err
			}
			if ev.Lat != nil {
				all = append(all, ev.Lat.Samples...)
			}
		}
		sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
		if len(all) > 0 {
			ms := func(q float64) float64 {
				return float64(all[int(math.Min(float64(len(all)-1), q*float64(len(all))))]) / 1e6
			}
			res.Lat = &latResult{Count: len(all), P50: ms(0.50), P99: ms(0.99), P999: ms(0.999), Max: float64(all[len(all)-1]) / 1e6}
		}
		if r.traceTail {
			if err := r.traceRun(tin, nodes, tag, res); err != nil {
				return err
			}
		}
	}
	if r.memory {
		if err := r.collectMem(nodes[0], tag, res); err != nil {
			return err
		}
	}
	for _, p := range nodes {
		res.RSSKB = append(res.RSSKB, p.hwmKB())
	}
	res.Valid = len(res.Reps) > 0
	var times []float64
	for _, rr := range res.Reps {
		if !rr.Valid {
			res.Valid = false
		} else {
			times = append(times, rr.Seconds)
		}
	}
	if len(times) > 0 {
		res.MsgPerSec = float64(s.N) / median(times)
	}
	return nil
}

// traceRun gathers each node's trace of the latency run, saves it
// (<tag>.trace.json) and analyses it into res.TailTrace.
func (r *runner) traceRun(in *tailInput, nodes []*child, tag string, res *result) error {
	for _, p := range nodes {
		ev, err := p.call(cmd{Op: "trace"}, 60*time.Second)
		if err != nil {
			return err
		}
		if ev.Trace == nil {
			return fmt.Errorf("%s: no trace", p.Name())
		}
		in.Traces = append(in.Traces, ev.Trace)
	}
	in.Start = math.MaxInt64
	for _, m := range in.Traces[1].Msgs {
		in.Start = min(in.Start, m.Sent)
	}
	path := filepath.Join(r.dir, tag+".trace.json")
	if err := saveTail(path, in); err != nil {
		return err
	}
	res.TailTrace = tailAnalysis(in) + "(trace: " + path + ")\n"
	return nil
}

func waitReady(nodes []*child, timeout time.Duration) error {
	var why string
	var err error
	ready := proc.Until(timeout, 200*time.Millisecond, func() bool {
		why = ""
		for _, p := range nodes {
			var ev event
			if ev, err = p.call(cmd{Op: "ready"}, 10*time.Second); err != nil {
				return true // stop: the error is the answer
			}
			if !ev.OK {
				why = p.Name() + ": " + ev.Why
				return false
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	if !ready {
		return fmt.Errorf("nodes not ready in %v: %s", timeout, why)
	}
	return nil
}

// rep runs one repetition: reset every collector, publish N from node 0,
// wait until every node counted N (or nothing moved for r.stall).
func (r *runner) rep(s scenario, nodes []*child, rep int, _ bool) (repResult, error) {
	for _, p := range nodes {
		if _, err := p.call(cmd{Op: "reset", Rep: rep, N: s.N, Pubs: s.Pubs, Latency: s.Rate > 0}, 10*time.Second); err != nil {
			return repResult{}, err
		}
	}
	if _, err := nodes[0].call(cmd{Op: "publish", Rep: rep, N: s.N, Pubs: s.Pubs, Pad: s.Pad, Rate: s.Rate}, 10*time.Second); err != nil {
		return repResult{}, err
	}
	statuses := make([]event, len(nodes))
	poll := func() error {
		for i, p := range nodes {
			ev, err := p.call(cmd{Op: "status"}, 30*time.Second)
			if err != nil {
				return err
			}
			statuses[i] = ev
		}
		return nil
	}
	var lastTotal int64 = -1
	lastMove := time.Now()
	why := ""
	for {
		time.Sleep(25 * time.Millisecond)
		if err := poll(); err != nil {
			return repResult{}, err
		}
		var total, min int64 = 0, math.MaxInt64
		done := true
		for _, ev := range statuses {
			u := ev.Coll.Unique
			total += u
			if u < min {
				min = u
			}
			if ev.Coll.DoneAt == 0 {
				done = false
			}
		}
		r.progress.update(s, rep, float64(min)/float64(s.N))
		if done {
			break
		}
		if total != lastTotal {
			lastTotal, lastMove = total, time.Now()
		}
		pubDone := statuses[0].PubEnd != 0
		if time.Since(lastMove) > r.stall && (pubDone || time.Since(lastMove) > 3*r.stall) {
			why = fmt.Sprintf("no progress for %v", r.stall)
			break
		}
	}
	if why == "" {
		time.Sleep(300 * time.Millisecond) // late duplicates still count against the run
	}
	// Wait (a little) for the publisher to finish, for its error count.
	for i := 0; i < 40 && statuses[0].PubEnd == 0; i++ {
		time.Sleep(50 * time.Millisecond)
		if err := poll(); err != nil {
			return repResult{}, err
		}
	}
	if err := poll(); err != nil {
		return repResult{}, err
	}
	rr := repResult{Valid: why == "", Why: why, PubErrs: statuses[0].PubErrs}
	var end int64
	for _, ev := range statuses {
		c := ev.Coll
		rr.Unique = append(rr.Unique, c.Unique)
		rr.Dups = append(rr.Dups, c.Dups+c.Stray+c.OutOfRange)
		rr.Notices = append(rr.Notices, c.Notices)
		rr.Reorders = append(rr.Reorders, c.Reorders)
		if c.Unique != int64(s.N) || c.Dups+c.Stray+c.OutOfRange > 0 || c.Notices > 0 {
			rr.Valid = false
		}
		if c.DoneAt > end {
			end = c.DoneAt
		}
	}
	if rr.PubErrs > 0 {
		rr.Valid = false
		rr.Why = strings.TrimPrefix(rr.Why+"; publish errors", "; ")
	}
	if rr.Valid {
		rr.Seconds = float64(end-statuses[0].PubStart) / 1e9
	}
	r.progress.repDone(s, rep, rr)
	return rr, nil
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Command bench measures EchoPubSub side by side with the peers a Go user
// would pick, every node a separate OS process on loopback (issue 8):
//
//	cd test/e2e && go run ./bench            # a short run (~1-2 min): 3 nodes, 10 B
//	make bench                               # what docs/benchmarks.md is
//
// It lives in the test/e2e module (with its own go.mod), so that NATS stays
// out of the library's module graph.
//
// Throughput: node 0 runs -pubs publishers that send N messages in total;
// every node (node 0 included) has one collector subscribed; msg/s is N
// divided by the median time from the first publish until the last node's
// collector counted N. A repetition counts only if every collector counted
// exactly N distinct messages, with no duplicate and no notice
// (CursorExpired, BackPressure, Undecodable).
//
// Latency: node 0 publishes at a fixed offered load (-rate msg/s) and the
// other nodes' collectors record publish-to-receive time (one clock: the
// processes share the machine).
//
// Peers: raw protoactor remote (one message per payload, fire and forget, to
// a collector on each node), protoactor's cluster PubSub (BatchingProducer,
// a static member list, disthash identity lookup), NATS core and NATS
// JetStream (memory stream, one durable AckExplicit consumer per node), the
// NATS server embedded in its own OS process.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/echopubsub/echopubsub/internal/proc"
)

func main() {
	switch os.Getenv(roleEnv) {
	case "node", "nats":
		os.Exit(childMain())
	}
	if err := coordMain(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// childMain runs a node or the NATS server; the exit code is the process's.
func childMain() int {
	var cfg nodeConfig
	if err := json.Unmarshal([]byte(os.Getenv(configEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench child: config:", err)
		return 2
	}
	var err error
	if os.Getenv(roleEnv) == "nats" {
		out := proc.NewChild(os.Stdout)
		err = natsServerMain(cfg, out, func() {
			for c := range proc.Commands[cmd](out, os.Stdin) {
				out.Send(event{Ev: proc.EvReply, ID: c.ID, OK: true})
				if c.Op == "quit" {
					return
				}
			}
		})
	} else {
		err = nodeMain(cfg, os.Stdin, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench child:", err)
		return 1
	}
	return 0
}

// options are the harness's flags.
type options struct {
	systems    []string
	nodes      []int
	scale      []int
	intervals  []time.Duration
	payloads   []int
	n, n0      int
	nPeer      map[string]int
	reps, pubs int
	warmup     int
	maxBatch   int
	maxPending int
	maxFlight  int
	ackIval    *time.Duration // nil: the library's AckInterval
	rate       int
	// extraRates: more offered loads for the latency runs (EchoPubSub at
	// latIntervals, raw protoactor and NATS core only); latIntervals:
	// EchoPubSub's BatchInterval values in the latency runs (default: intervals).
	extraRates   []int
	latIntervals []time.Duration
	latSecs      float64
	latency      bool
	profile      bool
	stall        time.Duration
	doc, chart   string
	jsonOut      string
	goBench      bool
	quiet        bool
	logDir       string
	from         string
	cmdline      string
	memory       bool
	memLimits    string
	traceTail    bool
	traceFrom    string
	encoded      bool
}

// savedOptions is what a report needs of the options, saved with a run.
type savedOptions struct {
	Systems   []string        `json:"systems"`
	Nodes     []int           `json:"nodes"`
	Intervals []time.Duration `json:"intervals"`
	Payloads  []int           `json:"payloads"`
	Reps      int             `json:"reps"`
	Pubs      int             `json:"pubs"`
	Rate      int             `json:"rate"`
	Extra     []int           `json:"extra_rates,omitempty"`
	LatIvs    []time.Duration `json:"latency_intervals,omitempty"`
	LatSecs   float64         `json:"latency_secs"`
	Warmup    int             `json:"warmup"`
	NPeer     map[string]int  `json:"n_peer"`
}

func savedOptionsOf(o *options) *savedOptions {
	return &savedOptions{Systems: o.systems, Nodes: o.nodes, Intervals: o.intervals, Payloads: o.payloads, Reps: o.reps,
		Pubs: o.pubs, Rate: o.rate, Extra: o.extraRates, LatIvs: o.latIntervals, LatSecs: o.latSecs, Warmup: o.warmup, NPeer: o.nPeer}
}

func (s *savedOptions) options() *options {
	return &options{systems: s.Systems, nodes: s.Nodes, intervals: s.Intervals, payloads: s.Payloads, reps: s.Reps,
		pubs: s.Pubs, rate: s.Rate, extraRates: s.Extra, latIntervals: s.LatIvs, latSecs: s.LatSecs, warmup: s.Warmup, nPeer: s.NPeer}
}

type savedRun struct {
	Options *savedOptions `json:"options"`
	Meta    meta          `json:"meta"`
	Results []result      `json:"results"`
}

func parseFlags(args []string) (*options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	full := fs.Bool("full", false, "the whole matrix of docs/benchmarks.md: nodes 3,4 (+8 for EchoPubSub), payloads 10,200, N=1e6, profiles, Go benchmarks")
	systems := fs.String("systems", strings.Join(allSystems, ","), "systems to run")
	nodes := fs.String("nodes", "3", "node counts")
	scale := fs.String("scale-nodes", "", "node counts for EchoPubSub only, 10 B (scaling)")
	intervals := fs.String("intervals", "100ms,0s", "EchoPubSub BatchIntervals")
	payloads := fs.String("payloads", "10", "payload sizes in bytes (the Stamp's pad)")
	n := fs.Int("n", 50_000, "messages per repetition")
	n0 := fs.Int("n0", 0, "messages per repetition for EchoPubSub at BatchInterval 0 (0: -n)")
	nPeer := fs.String("n-peer", "", "per-peer N overrides, e.g. nats-jetstream=200000,protoactor-cluster=200000")
	reps := fs.Int("reps", 3, "repetitions (msg/s is N / median time)")
	pubs := fs.Int("pubs", 4, "publishers on node 0")
	warmup := fs.Int("warmup", 100_000, "messages of an uncounted warm-up repetition before the counted ones (capped at N; 0: none)")
	rate := fs.Int("rate", 10_000, "offered load of the latency runs, msg/s")
	extraRates := fs.String("extra-rates", "", "more offered loads for latency runs, msg/s, e.g. 1000,50000 (EchoPubSub, raw protoactor, NATS core; -full: 1000,50000)")
	latIntervals := fs.String("lat-intervals", "", "EchoPubSub BatchIntervals of the latency runs (default: -intervals; -full: 0s,100ms,200ms, the last the default)")
	latSecs := fs.Float64("latency-secs", 3, "length of a latency run")
	latency := fs.Bool("latency", true, "run the latency scenarios (first node count, 10 B)")
	profile := fs.Bool("profile", false, "CPU-profile EchoPubSub's publishing node and one receiver (first node count, 10 B)")
	stall := fs.Duration("stall", 5*time.Second, "a repetition ends, invalid, after this long without progress")
	doc := fs.String("doc", "", "write the report (markdown) here; the chart goes beside it as benchmarks.svg")
	jsonOut := fs.String("json", "", "write the raw results here")
	goBench := fs.Bool("gobench", false, "also run the Go micro-benchmarks of the hot paths and include them")
	quiet := fs.Bool("quiet", false, "no progress output")
	logDir := fs.String("logdir", "", "node logs and profiles (default: a new temporary directory)")
	maxBatch := fs.Int("max-batch-messages", 0, "experiment: EchoPubSub Config.MaxBatchMessages (0: library default)")
	maxPending := fs.Int("max-pending-writes", 0, "experiment: EchoPubSub Config.MaxPendingWrites (0: library default)")
	maxFlight := fs.Int("max-batches-in-flight", 0, "experiment: EchoPubSub Config.MaxBatchesInFlight (0: library default)")
	ackIval := fs.Duration("ack-interval", -1, "experiment: EchoPubSub Config.AckInterval (negative: library default)")
	from := fs.String("from", "", "do not run: render -doc from a results.json a previous run saved")
	memory := fs.Bool("memory", false, "node 0's memory with BufferSize 2 x N full (issue 26 item 4): EchoPubSub, 3 nodes, payloads 10,200, N=1e6, 100ms, each -memlimit; -doc writes only its section")
	memLimits := fs.String("memlimit", "off,auto", "with -memory: node 0's GOMEMLIMIT per run: off, auto (Config.MemoryLimit) or a size such as 300MiB")
	traceTail := fs.Bool("trace-tail", false, "latency runs only, each message traced: the stages of the median and of the tail (>= p99) across the processes, and the Go runtime of each process (issue 26 item 3); with -profile, CPU profiles of nodes 0 and 1 over the latency run (<scenario>.n<i>.cpu.pprof in -logdir)")
	encoded := fs.Bool("encoded", false, "EchoPubSub's subscribers take each message encoded (WithFormat(FormatEncoded): type name and bytes, not decoded) and read the Stamp's numbers from the bytes; its scenarios are labelled echopubsub-encoded (not with -doc, -full or -memory: the report would read them as the decoded figures)")
	traceFrom := fs.String("trace-from", "", "do not run: analyse a trace a -trace-tail run saved (<scenario>.trace.json in its -logdir)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *memory {
		def := map[string]*string{"systems": systems, "payloads": payloads, "intervals": intervals}
		for name, v := range map[string]string{"systems": sysOurs, "payloads": "10,200", "intervals": "100ms"} {
			if !set[name] {
				*def[name] = v
			}
		}
		if !set["n"] {
			*n = 1_000_000
		}
		*latency = false
	}
	if *full {
		if !set["nodes"] {
			*nodes = "3,4"
		}
		if !set["scale-nodes"] {
			*scale = "8"
		}
		if !set["payloads"] {
			*payloads = "10,200"
		}
		if !set["extra-rates"] {
			*extraRates = "1000,50000"
		}
		if !set["lat-intervals"] {
			*latIntervals = "0s,100ms,200ms"
		}
		if !set["n"] {
			*n = 1_000_000
		}
		if !set["profile"] {
			*profile = true
		}
		if !set["gobench"] {
			*goBench = true
		}
		if !set["n-peer"] {
			*nPeer = "nats-jetstream=200000" // ~20k msg/s: 1e6 would take a minute per repetition
		}
	}
	o := &options{systems: strings.Split(*systems, ","), n: *n, n0: *n0, reps: *reps, pubs: *pubs, warmup: *warmup, rate: *rate,
		latSecs: *latSecs, latency: *latency, profile: *profile, stall: *stall, doc: *doc, jsonOut: *jsonOut,
		goBench: *goBench, quiet: *quiet, logDir: *logDir, from: *from, maxBatch: *maxBatch, maxPending: *maxPending, maxFlight: *maxFlight, ackIval: durationIfSet(*ackIval), nPeer: map[string]int{},
		memory: *memory, memLimits: *memLimits, traceTail: *traceTail, traceFrom: *traceFrom, encoded: *encoded}
	if o.encoded && (*doc != "" || *full || *memory || *from != "") {
		return nil, fmt.Errorf("-encoded runs are not rendered into a report (-doc, -full, -memory, -from): its rows would read as the decoded figures")
	}
	if o.traceTail {
		o.latency = true
	}
	for _, s := range o.systems {
		if !contains(allSystems, s) {
			return nil, fmt.Errorf("-systems: unknown %q (known: %s)", s, strings.Join(allSystems, ", "))
		}
	}
	var err error
	if o.nodes, err = ints(*nodes); err != nil {
		return nil, fmt.Errorf("-nodes: %w", err)
	}
	if o.scale, err = ints(*scale); err != nil {
		return nil, fmt.Errorf("-scale-nodes: %w", err)
	}
	if o.payloads, err = ints(*payloads); err != nil {
		return nil, fmt.Errorf("-payloads: %w", err)
	}
	if o.intervals, err = durations(*intervals); err != nil {
		return nil, fmt.Errorf("-intervals: %w", err)
	}
	if o.extraRates, err = ints(*extraRates); err != nil {
		return nil, fmt.Errorf("-extra-rates: %w", err)
	}
	if o.latIntervals, err = durations(*latIntervals); err != nil {
		return nil, fmt.Errorf("-lat-intervals: %w", err)
	}
	if len(o.latIntervals) == 0 {
		o.latIntervals = o.intervals
	}
	for _, kv := range splitList(*nPeer) {
		k, v, ok := strings.Cut(kv, "=")
		x, err := strconv.Atoi(v)
		if !ok || err != nil || !contains(allSystems, k) {
			return nil, fmt.Errorf("-n-peer: bad %q", kv)
		}
		o.nPeer[k] = x
	}
	for _, nn := range append(append([]int{}, o.nodes...), o.scale...) {
		if nn < 2 {
			return nil, fmt.Errorf("node counts must be >= 2 (a remote subscriber), got %d", nn)
		}
	}
	if o.n < o.pubs || o.pubs < 1 || o.pubs > 255 || o.reps < 1 {
		return nil, fmt.Errorf("need 1 <= -pubs <= 255, -n >= -pubs, -reps >= 1")
	}
	if *doc != "" {
		o.chart = filepath.Join(filepath.Dir(*doc), "benchmarks.svg")
	}
	o.cmdline = "cd test/e2e && go run ./bench " + strings.Join(args, " ")
	return o, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		v, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func durations(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range splitList(s) {
		d, err := time.ParseDuration(f)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

func contains[T comparable](xs []T, x T) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// matrix lists the scenarios of o, in the order they run.
func (o *options) matrix() []scenario {
	var out []scenario
	if o.traceTail {
		return o.latencyScenarios(out)
	}
	nFor := func(sys string, iv time.Duration) int {
		if v, ok := o.nPeer[sys]; ok {
			return v
		}
		if sys == sysOurs && iv == 0 && o.n0 > 0 {
			return o.n0
		}
		return o.n
	}
	for _, nodes := range o.nodes {
		for _, pad := range o.payloads {
			for _, sys := range o.systems {
				if sys == sysOurs {
					for _, iv := range o.intervals {
						out = append(out, scenario{System: sys, Nodes: nodes, Interval: iv, Pad: pad, N: nFor(sys, iv), Reps: o.reps, Pubs: o.pubs,
							Profile: o.profile && nodes == o.nodes[0] && pad == o.payloads[0], Encoded: o.encoded})
					}
					continue
				}
				out = append(out, scenario{System: sys, Nodes: nodes, Pad: pad, N: nFor(sys, 0), Reps: o.reps, Pubs: o.pubs})
			}
		}
	}
	if contains(o.systems, sysOurs) {
		for _, nodes := range o.scale {
			for _, iv := range o.intervals {
				out = append(out, scenario{System: sysOurs, Nodes: nodes, Interval: iv, Pad: o.payloads[0], N: nFor(sysOurs, iv), Reps: o.reps, Pubs: o.pubs, Encoded: o.encoded})
			}
		}
	}
	if o.latency {
		out = o.latencyScenarios(out)
	}
	return out
}

// latencyScenarios appends the latency runs to out: every system at -rate,
// then EchoPubSub, raw protoactor and NATS core at each -extra-rates.
func (o *options) latencyScenarios(out []scenario) []scenario {
	for i, rate := range append([]int{o.rate}, o.extraRates...) {
		n := int(float64(rate) * o.latSecs)
		for _, sys := range o.systems {
			if i > 0 && sys != sysOurs && sys != sysRaw && sys != sysNATS {
				continue
			}
			ivs := []time.Duration{0}
			if sys == sysOurs {
				ivs = o.latIntervals
			}
			for _, iv := range ivs {
				out = append(out, scenario{System: sys, Nodes: o.nodes[0], Interval: iv, Pad: o.payloads[0], N: n, Reps: 1, Pubs: o.pubs, Rate: rate,
					Encoded: o.encoded && sys == sysOurs})
			}
		}
	}
	return out
}

// runAll runs o's matrix and returns the results.
func runAll(o *options) ([]result, error) {
	dir := o.logDir
	if dir == "" {
		d, err := os.MkdirTemp("", "echopubsub-bench-")
		if err != nil {
			return nil, err
		}
		dir = d
		o.logDir = d
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	m := o.matrix()
	p := newProgress(len(m), o.quiet)
	p.note("bench: %d scenarios, logs in %s", len(m), dir)
	r := &runner{dir: dir, stall: o.stall, warmup: o.warmup, maxBatch: o.maxBatch, maxPending: o.maxPending, maxFlight: o.maxFlight, ackIval: o.ackIval, traceTail: o.traceTail, traceProfile: o.traceTail && o.profile, progress: p}
	var out []result
	for _, s := range m {
		p.next()
		res := r.run(s)
		if res.Err != "" {
			p.note("[%d/%d] %s: ERROR %s", p.index, p.total, s.label(), res.Err)
		}
		out = append(out, res)
	}
	return out, nil
}

func coordMain(args []string) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	if o.memory {
		return memoryMain(o)
	}
	if o.traceFrom != "" {
		in, err := loadTail(o.traceFrom)
		if err != nil {
			return err
		}
		fmt.Print(tailAnalysis(in))
		return nil
	}
	var rep *report
	if o.from != "" {
		b, err := os.ReadFile(o.from)
		if err != nil {
			return err
		}
		var saved savedRun
		if err := json.Unmarshal(b, &saved); err != nil {
			return fmt.Errorf("%s: %w", o.from, err)
		}
		if saved.Options == nil {
			return fmt.Errorf("%s: no options saved", o.from)
		}
		o2 := saved.Options.options()
		o2.doc, o2.chart = o.doc, o.chart
		o = o2
		rep = &report{opts: o, results: saved.Results, meta: saved.Meta}
	} else {
		started := time.Now()
		load0 := loadAvg()
		git := gitState() // the code measured is the code at the start
		results, err := runAll(o)
		if err != nil {
			return err
		}
		rep = &report{opts: o, results: results, meta: newMeta(o, started, load0)}
		rep.Git = git
		if o.goBench {
			rep.GoBench = runGoBench()
		}
		b, _ := json.MarshalIndent(savedRun{Options: savedOptionsOf(o), Meta: rep.meta, Results: results}, "", "  ")
		path := o.jsonOut
		if path == "" {
			path = filepath.Join(o.logDir, "results.json")
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "results saved in %s (re-render with -from)\n", path)
	}
	fmt.Print(rep.tables())
	for _, r := range rep.results {
		if r.TailTrace != "" {
			fmt.Printf("\n== tail trace: %s\n%s", r.label(), r.TailTrace)
		}
	}
	if o.doc != "" {
		if err := os.WriteFile(o.chart, []byte(rep.svg()), 0o644); err != nil {
			return err
		}
		md := rep.markdown()
		if sec := keepMemory(o.doc); sec != "" { // make bench-memory's section stays
			md = spliceMemory(md, sec)
		}
		if err := os.WriteFile(o.doc, []byte(md), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "wrote %s and %s\n", o.doc, o.chart)
		if err := saveProfiles(rep.results, filepath.Join(filepath.Dir(o.doc), "profiles")); err != nil {
			return err
		}
	}
	for _, r := range rep.results {
		if r.Err != "" {
			return fmt.Errorf("%d scenario(s) failed to run (see above)", countErr(rep.results))
		}
	}
	return nil
}

func countErr(rs []result) int {
	n := 0
	for _, r := range rs {
		if r.Err != "" {
			n++
		}
	}
	return n
}

// saveProfiles copies the CPU profiles of the run next to the document
// (docs/profiles/<scenario>.<node>.cpu.pprof), replacing the previous run's.
func saveProfiles(results []result, dir string) error {
	var files []string
	for _, r := range results {
		for _, f := range r.ProfileFiles {
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		return nil
	}
	old, _ := filepath.Glob(filepath.Join(dir, "*.pprof"))
	for _, f := range old {
		_ = os.Remove(f)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "copied %d CPU profiles to %s\n", len(files), dir)
	return nil
}

// durationIfSet is d, or nil when d is negative (a flag's "not set").
func durationIfSet(d time.Duration) *time.Duration {
	if d < 0 {
		return nil
	}
	return &d
}

package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

type report struct {
	opts    *options
	results []result
	meta
}

// meta is what the report says about the run besides its results; it is
// saved with them (results.json) so the report can be rendered again.
type meta struct {
	Started    time.Time     `json:"started"`
	Elapsed    time.Duration `json:"elapsed"`
	LoadBefore string        `json:"load_before"`
	LoadAfter  string        `json:"load_after"`
	GoBench    string        `json:"go_bench,omitempty"`
	Cmdline    string        `json:"cmdline"`
	CPU        string        `json:"cpu"`
	NumCPU     int           `json:"num_cpu"`
	GoVersion  string        `json:"go_version"`
	Git        string        `json:"git"`
}

func newMeta(o *options, started time.Time, loadBefore string) meta {
	return meta{Started: started, Elapsed: time.Since(started), LoadBefore: loadBefore, LoadAfter: loadAvg(),
		Cmdline: o.cmdline, CPU: cpuModel(), NumCPU: runtime.NumCPU(), GoVersion: goVersion(), Git: gitState()}
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "model name") {
			if _, v, ok := strings.Cut(l, ":"); ok {
				return strings.TrimSpace(v)
			}
		}
	}
	return "?"
}

func goVersion() string {
	out, err := exec.Command("go", "version").Output()
	if err != nil {
		return runtime.Version()
	}
	return strings.TrimSpace(string(out))
}

// gitState names the commit measured, and whether the tree had changes.
func gitState() string {
	c := exec.Command("git", "rev-parse", "--short", "HEAD")
	c.Dir = goModRoot()
	out, err := c.Output()
	if err != nil {
		return "unknown commit"
	}
	s := "commit " + strings.TrimSpace(string(out))
	c = exec.Command("git", "status", "--porcelain", "--untracked-files=no")
	c.Dir = goModRoot()
	if st, err := c.Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		files := strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(st)), "\n", " "))
		var names []string
		for i := 1; i < len(files); i += 2 {
			names = append(names, files[i])
		}
		s += " with uncommitted changes to " + strings.Join(names, ", ")
	}
	return s
}

// goModRoot is the library's module root (for the Go benchmarks and the
// hand-written parts of the report): the directory the harness's module
// replaces github.com/echopubsub/echopubsub with.
func goModRoot() string {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/echopubsub/echopubsub").Output()
	if err != nil {
		return "."
	}
	return strings.TrimSpace(string(out))
}

// runGoBench runs the hot-path micro-benchmarks and returns their output.
func runGoBench() string {
	c := exec.Command("go", "test", "-run", "^$", "-bench", goBenchPattern,
		"-benchtime", "1s", "-count", "1", "./ringbuf/", "./messages/", "./actors/...")
	c.Dir = goModRoot()
	out, err := c.CombinedOutput()
	if err != nil {
		return string(out) + "\n(go test: " + err.Error() + ")"
	}
	var keep []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "Benchmark") || strings.HasPrefix(l, "ok") || strings.HasPrefix(l, "cpu:") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

func commas(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// cell is a throughput figure, or why there is none.
func (r result) cell() string {
	if r.Err != "" {
		return "error: " + r.Err
	}
	if r.Valid {
		return commas(r.MsgPerSec)
	}
	worst := ""
	for _, rr := range r.Reps {
		if rr.Valid {
			continue
		}
		var minU int64 = math.MaxInt64
		var dups, notices int64
		for i := range rr.Unique {
			minU = min(minU, rr.Unique[i])
			dups += rr.Dups[i]
			notices += rr.Notices[i]
		}
		w := fmt.Sprintf("lost %s of %s", commas(float64(int64(r.N)-minU)), commas(float64(r.N)))
		if dups > 0 {
			w += fmt.Sprintf(", %d dups", dups)
		}
		if notices > 0 {
			w += fmt.Sprintf(", %d notices", notices)
		}
		if rr.PubErrs > 0 {
			w += fmt.Sprintf(", %d publish errors", rr.PubErrs)
		}
		worst = w
		break
	}
	valid := 0
	for _, rr := range r.Reps {
		if rr.Valid {
			valid++
		}
	}
	s := fmt.Sprintf("INVALID (%s", worst)
	if valid > 0 {
		s += fmt.Sprintf("; %d/%d reps exact: %s msg/s", valid, len(r.Reps), commas(r.MsgPerSec))
	}
	return s + ")"
}

func (rp *report) throughput() []result {
	var out []result
	for _, r := range rp.results {
		if r.Rate == 0 {
			out = append(out, r)
		}
	}
	return out
}

// latencies is the latency runs at the main offered load (-rate).
func (rp *report) latencies() []result {
	var out []result
	for _, r := range rp.latenciesAll() {
		if r.Rate == rp.opts.rate {
			out = append(out, r)
		}
	}
	return out
}

// latenciesAll is every latency run, at every offered load.
func (rp *report) latenciesAll() []result {
	var out []result
	for _, r := range rp.results {
		if r.Rate > 0 {
			out = append(out, r)
		}
	}
	return out
}

// latencyOf is the exact latency result of sys at rate (EchoPubSub at
// BatchInterval iv).
func (rp *report) latencyOf(sys string, rate int, iv time.Duration) *latResult {
	for _, r := range rp.latenciesAll() {
		if r.System == sys && r.Rate == rate && (sys != sysOurs || r.Interval == iv) && r.Valid && r.Lat != nil {
			return r.Lat
		}
	}
	return nil
}

// find returns the throughput result for these coordinates.
func (rp *report) find(sys string, nodes int, iv time.Duration, pad int) (result, bool) {
	for _, r := range rp.throughput() {
		if r.System == sys && r.Nodes == nodes && r.Pad == pad && (sys != sysOurs || r.Interval == iv) {
			return r, true
		}
	}
	return result{}, false
}

type column struct{ nodes, pad int }

func (rp *report) columns() []column {
	seen := map[column]bool{}
	var cols []column
	for _, r := range rp.throughput() {
		c := column{r.Nodes, r.Pad}
		if !seen[c] {
			seen[c] = true
			cols = append(cols, c)
		}
	}
	sort.Slice(cols, func(i, j int) bool {
		if cols[i].nodes != cols[j].nodes {
			return cols[i].nodes < cols[j].nodes
		}
		return cols[i].pad < cols[j].pad
	})
	return cols
}

type rowKey struct {
	sys string
	iv  time.Duration
}

func (rp *report) rows() []rowKey {
	var rows []rowKey
	seen := map[rowKey]bool{}
	for _, sys := range allSystems {
		for _, r := range rp.throughput() {
			k := rowKey{r.System, r.Interval}
			if r.System != sys || seen[k] {
				continue
			}
			if sys != sysOurs {
				k.iv = 0
			}
			seen[k] = true
			rows = append(rows, k)
		}
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].sys == sysOurs && rows[j].sys == sysOurs {
			return rows[i].iv > rows[j].iv
		}
		return false
	})
	return rows
}

func rowLabel(k rowKey) string {
	if k.sys == sysOurs {
		return fmt.Sprintf("**EchoPubSub, %v**", k.iv)
	}
	return map[string]string{
		sysRaw:       "protoactor remote, raw fire-and-forget (1 msg per payload)",
		sysRelay:     "protoactor remote, raw, with EchoPubSub's two actor hops",
		sysBatch:     "protoactor remote, raw, batched (no cursor, no ack: the batching floor)",
		sysCluster:   "protoactor cluster PubSub (BatchingProducer)",
		sysNATS:      "NATS core",
		sysJetStream: "NATS JetStream, AckExplicit",
	}[k.sys]
}

// tables is the plain summary printed on stdout.
func (rp *report) tables() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-62s %9s %24s %12s  %s\n", "scenario", "N", "msg/s (median)", "CPU-bound %", "peak RSS per node (MiB)")
	for _, r := range rp.throughput() {
		bound := ""
		if limit := rp.cpuBound(r); limit > 0 {
			bound = fmt.Sprintf("%.0f %%", 100*r.MsgPerSec/limit)
		}
		fmt.Fprintf(&b, "%-62s %9d %24s %12s  %s\n", r.label(), r.N, r.cell(), bound, rssList(r.RSSKB))
	}
	if l := rp.latenciesAll(); len(l) > 0 {
		fmt.Fprintf(&b, "\n%-62s %9s %9s %9s %9s %9s\n", "latency (remote subscribers)", "count", "p50 ms", "p99 ms", "p99.9 ms", "max ms")
		for _, r := range l {
			if r.Lat == nil {
				fmt.Fprintf(&b, "%-62s %s\n", r.label(), r.cell())
				continue
			}
			v := ""
			if !r.Valid {
				v = "  " + r.cell()
			}
			fmt.Fprintf(&b, "%-62s %9d %9.2f %9.2f %9.2f %9.2f%s\n", r.label(), r.Lat.Count, r.Lat.P50, r.Lat.P99, r.Lat.P999, r.Lat.Max, v)
		}
	}
	return b.String()
}

func rssList(kb []int64) string {
	var parts []string
	for _, v := range kb {
		parts = append(parts, fmt.Sprintf("%.0f", float64(v)/1024))
	}
	return strings.Join(parts, " / ")
}

func (rp *report) markdown() string {
	var b strings.Builder
	o := rp.opts
	w := func(format string, args ...interface{}) { fmt.Fprintf(&b, format, args...) }
	w("# Benchmarks\n\n")
	w("Generated by the harness in `test/e2e/bench` (issue 8) from one run on %s, which took %v.\n",
		rp.Started.UTC().Format("2006-01-02 15:04 MST"), rp.Elapsed.Round(time.Second))
	w("Reproduce it with:\n\n```\n%s\n```\n\n", rp.Cmdline)
	w("## Machine\n\n")
	w("- CPU: %s, `nproc` = %d\n- %s\n", rp.CPU, rp.NumCPU, rp.GoVersion)
	w("- load average (1, 5, 15 min) before the run: %s; after: %s. The machine is shared with other engineers' builds and tests, so absolute figures move from run to run; the ratios between systems measured in the same run are the figures to compare.\n", rp.LoadBefore, rp.LoadAfter)
	w("- code: %s\n", rp.Git)
	w("- protoactor-go v0.0.0-20240822202345-3c0e61ca19c9, nats-server v2.15.3 (embedded, alone in its own OS process), nats.go v1.56.0\n\n")
	w("## Shape\n\n")
	w("Every node is a separate OS process on loopback. Node 0 runs %d publishers that send N messages in total; every node, node 0 included, has one collector subscribed. ", o.pubs)
	w("msg/s = N / median over %d repetitions of the time from the first publish until the last node's collector counted N. ", o.reps)
	w("A repetition counts only if every collector counted exactly N distinct messages, with no duplicate and no CursorExpired/BackPressure notice; a row marked INVALID says what was lost. ")
	w("The payload is a `testpb.Stamp` whose `pad` has the stated size (plus an 8-byte sequence number that identifies the repetition, the publisher and the message). ")
	w("EchoPubSub: PoolSize 1, BufferSize 2 x N, the collector subscribed `WithMaxQueueLen(1<<30)`, other settings the defaults (MaxBatchMessages 10,000, MaxBatchBytes 1 MiB, MaxPendingWrites 10,000), RemoteConfig on every node. ")
	w("Peers: raw protoactor remote with `RemoteConfig` (node 0 sends each payload as its own message to each node's collector: the ceiling for unreliable delivery, what Phoenix's PG2 adapter does); protoactor cluster PubSub (one `BatchingProducer` per publisher, default batch size 2,000, a static member list, disthash identity lookup); NATS core (one connection per publisher, unlimited client pending limits); NATS JetStream (memory storage, one durable pull consumer per node with AckExplicit, MaxAckPending 20,000, every message acked; publishers use PublishAsync and wait for every PubAck).\n\n")

	w("## Throughput\n\n![msg/s, log scale](benchmarks.svg)\n\n")
	cols := rp.columns()
	w("| system |")
	for _, c := range cols {
		w(" %d nodes, %d B |", c.nodes, c.pad)
	}
	w("\n|---|")
	for range cols {
		w("---:|")
	}
	w("\n")
	for _, k := range rp.rows() {
		w("| %s |", rowLabel(k))
		for _, c := range cols {
			if r, ok := rp.find(k.sys, c.nodes, k.iv, c.pad); ok {
				w(" %s |", r.cell())
			} else {
				w(" |")
			}
		}
		w("\n")
	}
	w("| *Elixir EchoPubSub on Fly.io (seed 001, other hardware: performance-4x), 100 ms* |")
	for _, c := range cols {
		w(" %s |", seedFigure(c.nodes, 100*time.Millisecond, c.pad))
	}
	w("\n| *Elixir EchoPubSub on Fly.io (seed 001, other hardware), 0 ms* |")
	for _, c := range cols {
		w(" %s |", seedFigure(c.nodes, 0, c.pad))
	}
	w("\n\nN per cell: ")
	var ns []string
	for _, r := range rp.throughput() {
		ns = append(ns, fmt.Sprintf("%s %d nodes %d B: %s", shortName(r), r.Nodes, r.Pad, commas(float64(r.N))))
	}
	w("%s.\n\n", strings.Join(dedupe(ns), "; "))

	w("### Ratios (same run)\n\n")
	w("EchoPubSub's figure divided by the peer's, per column (a peer that lost or duplicated messages has no valid figure: the ratio is then taken against what it reached in its exact repetitions, if any, and marked).\n\n")
	w("| EchoPubSub at | vs |")
	for _, c := range cols {
		w(" %d nodes, %d B |", c.nodes, c.pad)
	}
	w("\n|---|---|")
	for range cols {
		w("---:|")
	}
	w("\n")
	for _, iv := range o.intervals {
		for _, k := range rp.rows() {
			if k.sys == sysOurs && k.iv == iv {
				continue
			}
			w("| %v | %s |", iv, rowLabel(k))
			for _, c := range cols {
				a, ok1 := rp.find(sysOurs, c.nodes, iv, c.pad)
				p, ok2 := rp.find(k.sys, c.nodes, k.iv, c.pad)
				w(" %s |", ratio(a, p, ok1 && ok2))
			}
			w("\n")
		}
	}
	w("\n")
	rp.targets(&b)
	rp.targets17(&b)
	rp.batchTargets(&b)
	rp.tailTargets(&b)

	if l := rp.latencies(); len(l) > 0 {
		w("## Latency\n\nPublish to a remote subscriber (every node but node 0), %s msg/s offered by node 0 for %.0f s, %d nodes, %d B. Percentiles over every message every remote node received.\n\n", commas(float64(o.rate)), o.latSecs, o.nodes[0], o.payloads[0])
		latRows := func(l []result, withRate bool) {
			for _, r := range l {
				ok := "yes"
				if !r.Valid {
					ok = r.cell()
				}
				rate := ""
				if withRate {
					rate = commas(float64(r.Rate)) + " | "
				}
				if r.Lat == nil {
					w("| %s%s | | | | | | %s |\n", rate, rowLabel(rowKey{r.System, r.Interval}), ok)
					continue
				}
				w("| %s%s | %d | %.2f | %.2f | %.2f | %.2f | %s |\n", rate, rowLabel(rowKey{r.System, r.Interval}), r.Lat.Count, r.Lat.P50, r.Lat.P99, r.Lat.P999, r.Lat.Max, ok)
			}
		}
		w("| system | messages | p50 ms | p99 ms | p99.9 ms | max ms | exact? |\n|---|---:|---:|---:|---:|---:|---|\n")
		latRows(l, false)
		w("\n")
		var other []result
		for _, r := range rp.latenciesAll() {
			if r.Rate != o.rate {
				other = append(other, r)
			}
		}
		if len(other) > 0 {
			w("At other offered loads (EchoPubSub, raw protoactor and NATS core; same shape, %.0f s each):\n\n", o.latSecs)
			w("| msg/s | system | messages | p50 ms | p99 ms | p99.9 ms | max ms | exact? |\n|---:|---|---:|---:|---:|---:|---:|---|\n")
			latRows(other, true)
			w("\n")
		}
	}

	w("## Peak RSS per node\n\nVmHWM of each node process at the end of its scenario (node 0 publishes; the NATS server's own process is not counted), MiB.\n\n")
	w("| scenario | N | node 0 / node 1 / ... |\n|---|---:|---|\n")
	for _, r := range rp.throughput() {
		w("| %s | %s | %s |\n", r.label(), commas(float64(r.N)), rssList(r.RSSKB))
	}
	w("\n")

	w("## CPU per delivered message\n\nuser+sys CPU of every process of the scenario (its nodes, and for NATS the server) over the counted repetitions, divided by the deliveries (N x nodes x repetitions), in microseconds. ")
	w("The machine's %d cores bound throughput at %d / (this x nodes) messages per second: the CPU-bound limit. ", rp.NumCPU, rp.NumCPU)
	w("\"Of the limit\" is the measured msg/s over it: the share of the cores the scenario kept busy. Below 100 %%, the scenario waited while a core was idle, or other work on the machine had the cores: ")
	w("\"waiting for a core\" is the time the scenario's threads were runnable but not running (`/proc/<pid>/task/*/schedstat`, summed over threads, so it can pass 100 %%), in the same units: the cores were taken, by other work on the machine or by the scenario's own processes (each runs up to NumCPU threads of Go code). Near 0, a run below its limit waited in its own pipeline with a core free.\n\n")
	w("| scenario | us per delivery | CPU-bound limit, msg/s | msg/s | of the limit | waiting for a core |\n|---|---:|---:|---:|---:|---:|\n")
	for _, r := range rp.throughput() {
		if r.CPUNsPerDelivery > 0 {
			limit := rp.cpuBound(r)
			runq := ""
			if r.RunQueueNsPerDelivery > 0 {
				runq = fmt.Sprintf("%.0f %%", 100*r.MsgPerSec*r.RunQueueNsPerDelivery*float64(r.Nodes)/(float64(rp.NumCPU)*1e9))
			}
			w("| %s | %.2f | %s | %s | %.0f %% | %s |\n", r.label(), r.CPUNsPerDelivery/1000, commas(limit), r.cell(), 100*r.MsgPerSec/limit, runq)
		}
	}
	w("\n")

	w("## Every repetition\n\nSeconds per repetition (x: not exact; unique = the fewest distinct messages any node counted).\n\n| scenario | repetitions |\n|---|---|\n")
	for _, r := range rp.results {
		var parts []string
		for _, rr := range r.Reps {
			if rr.Valid {
				parts = append(parts, fmt.Sprintf("%.3f", rr.Seconds))
			} else {
				var minU int64 = math.MaxInt64
				var d, n int64
				for i := range rr.Unique {
					minU = min(minU, rr.Unique[i])
					d += rr.Dups[i]
					n += rr.Notices[i]
				}
				parts = append(parts, fmt.Sprintf("x (unique %d, dups %d, notices %d, publish errors %d %s)", minU, d, n, rr.PubErrs, rr.Why))
			}
		}
		if r.Err != "" {
			parts = append(parts, "error: "+r.Err)
		}
		w("| %s | %s |\n", r.label(), strings.Join(parts, ", "))
	}
	w("\n")

	if rp.GoBench != "" {
		w("## Go micro-benchmarks of the hot paths\n\n`go test -run '^$' -bench '%s' ./ringbuf/ ./messages/ ./actors/...` (same run). `BenchmarkStoreHeap` is the live heap per buffered message beyond its payload (`heap-B/msg`); `TestHotPathAllocations` (in `make test`) fails if an allocation per message comes back on the write, batch or delivery path.\n\n```\n%s\n```\n\n", goBenchPattern, rp.GoBench)
	}
	// Subscriptions at scale (issue 19) are measured by Go benchmarks run on
	// their own (they take minutes and gigabytes): their section is kept in
	// a file of its own, with the command that reproduces it.
	// Receipts, presence and durable streams likewise; every hand-written
	// section lives in this directory, so that a new run keeps it.
	for _, name := range []string{"receipts.md", "subscriptions.md", "presence.md", "durable.md"} {
		if a, err := os.ReadFile(filepath.Join(goModRoot(), "test", "e2e", "bench", name)); err == nil {
			w("%s\n\n", strings.TrimSpace(string(a)))
		}
	}
	var prof []result
	for _, r := range rp.results {
		if len(r.Profiles) > 0 {
			prof = append(prof, r)
		}
	}
	if len(prof) > 0 {
		w("## CPU profiles\n\nOne extra repetition of each scenario below ran with a CPU profile of node 0 (the publishing node: publishers, producer, its own subscriber) and node 1 (a receiving node: worker, dispatcher, collector); `go tool pprof -top` of each. The repetition under profile is not in the figures above.\n\n")
		for _, r := range prof {
			for _, node := range []string{"n0", "n1"} {
				for _, kind := range []string{"", "-cum"} {
					if t, ok := r.Profiles[node+kind]; ok {
						what := map[string]string{"": "flat", "-cum": "cumulative"}[kind]
						w("<details><summary>%s, node %s (%s), %s</summary>\n\n```\n%s\n```\n</details>\n\n", r.label(), node[1:], map[string]string{"n0": "publisher", "n1": "receiver"}[node], what, trimProfile(t))
					}
				}
			}
		}
	}
	for _, name := range []string{"analysis.md", "figures.md"} {
		if a, err := os.ReadFile(filepath.Join(goModRoot(), "test", "e2e", "bench", name)); err == nil {
			w("%s\n\n", strings.TrimSpace(string(a)))
		}
	}
	return b.String()
}

func trimProfile(t string) string {
	var keep []string
	for _, l := range strings.Split(t, "\n") {
		if strings.HasPrefix(l, "File:") || strings.HasPrefix(l, "Build ID:") {
			continue
		}
		keep = append(keep, l)
	}
	return strings.TrimSpace(strings.Join(keep, "\n"))
}

func dedupe(xs []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

func shortName(r result) string {
	if r.System == sysOurs {
		return fmt.Sprintf("EchoPubSub %v", r.Interval)
	}
	return r.System
}

// seedFigure is seed 001's Fly.io table (Elixir, other hardware).
func seedFigure(nodes int, iv time.Duration, pad int) string {
	t := map[[3]int]float64{
		{3, 100, 10}: 79_445, {3, 100, 200}: 41_784, {3, 0, 10}: 1_319,
		{4, 100, 10}: 75_468, {4, 100, 200}: 43_479, {4, 0, 10}: 787,
	}
	if v, ok := t[[3]int{nodes, int(iv / time.Millisecond), pad}]; ok {
		return "*" + commas(v) + "*"
	}
	return ""
}

func ratio(a, p result, ok bool) string {
	if !ok || a.MsgPerSec == 0 || p.MsgPerSec == 0 {
		if ok && p.MsgPerSec == 0 && !p.Valid {
			return "peer lost messages"
		}
		return ""
	}
	s := fmt.Sprintf("%.2fx", a.MsgPerSec/p.MsgPerSec)
	if !a.Valid || !p.Valid {
		s += " (not all reps exact)"
	}
	return s
}

// goBenchPattern selects the hot-path micro-benchmarks of the report.
const goBenchPattern = "BenchmarkWrite$|BenchmarkBatch|BenchmarkFanOut$|BenchmarkStoreHeap"

// targets writes the targets against this run.
func (rp *report) targets(b *strings.Builder) {
	w := func(format string, args ...interface{}) { fmt.Fprintf(b, format, args...) }
	first := 3
	if len(rp.opts.nodes) > 0 {
		first = rp.opts.nodes[0]
	}
	get := func(sys string, iv time.Duration, pad int) (float64, bool) {
		r, ok := rp.find(sys, first, iv, pad)
		if !ok || !r.Valid {
			return 0, false
		}
		return r.MsgPerSec, true
	}
	var lat0 *latResult
	for _, r := range rp.latencies() {
		if r.System == sysOurs && r.Interval == 0 && r.Valid {
			lat0 = r.Lat
		}
	}
	w("### Targets (issue 8, %d nodes)\n\n| target | measured | met? |\n|---|---|---|\n", first)
	row := func(name string, have bool, val string, met bool) { targetRow(b, name, have, val, met) }
	o10, ok10 := get(sysOurs, 100*time.Millisecond, 10)
	row("100 ms, 10 B >= 1,000,000 msg/s", ok10, commas(o10), o10 >= 1e6)
	o200, ok200 := get(sysOurs, 100*time.Millisecond, 200)
	row("100 ms, 200 B >= 500,000 msg/s", ok200, commas(o200), o200 >= 5e5)
	z10, okz := get(sysOurs, 0, 10)
	row("0 ms >= half of 100 ms (10 B)", okz && ok10, fmt.Sprintf("%s = %.2f of 100 ms", commas(z10), z10/math.Max(o10, 1)), z10 >= o10/2)
	if lat0 != nil {
		row("0 ms: p99 < 2 ms at 10,000 msg/s", true, fmt.Sprintf("p99 %.2f ms", lat0.P99), lat0.P99 < 2)
	} else {
		row("0 ms: p99 < 2 ms at 10,000 msg/s", false, "", false)
	}
	raw, okRaw := rp.find(sysRaw, first, 0, 10)
	if okRaw && raw.MsgPerSec > 0 {
		row("100 ms >= 2.5x raw fire-and-forget, nothing lost", ok10, fmt.Sprintf("%.2fx (raw: %s)", o10/raw.MsgPerSec, raw.cell()), o10 >= 2.5*raw.MsgPerSec)
	} else if okRaw {
		row("100 ms >= 2.5x raw fire-and-forget, nothing lost", ok10, fmt.Sprintf("raw has no exact repetition: %s", raw.cell()), ok10)
	} else {
		row("100 ms >= 2.5x raw fire-and-forget, nothing lost", false, "", false)
	}
	js, okJS := get(sysJetStream, 0, 10)
	row("100 ms >= 20x JetStream with acks", ok10 && okJS, fmt.Sprintf("%.1fx", o10/math.Max(js, 1)), o10 >= 20*js)
	nc, okNC := get(sysNATS, 0, 10)
	row("100 ms >= NATS core", ok10 && okNC, fmt.Sprintf("%.2fx", o10/math.Max(nc, 1)), o10 >= nc)
	w("\n")
}

// latencyAt0 is the exact latency results of EchoPubSub at BatchInterval 0
// and of raw protoactor (nil: not measured, or not exact).
func (rp *report) latencyAt0() (ours, raw *latResult) {
	for _, r := range rp.latencies() {
		if r.Valid && r.Lat != nil && r.Interval == 0 {
			switch r.System {
			case sysOurs:
				ours = r.Lat
			case sysRaw:
				raw = r.Lat
			}
		}
	}
	return ours, raw
}

// cpuBound is the msg/s the machine's cores could carry at r's CPU per
// delivery (the CPU of every process of the scenario): NumCPU / (CPU
// seconds per delivery x nodes). 0 when r has no CPU figure.
func (rp *report) cpuBound(r result) float64 {
	if r.CPUNsPerDelivery <= 0 || r.Nodes == 0 {
		return 0
	}
	return float64(rp.NumCPU) * 1e9 / (r.CPUNsPerDelivery * float64(r.Nodes))
}

// svg draws the throughput results as horizontal bars on a log scale.
func (rp *report) svg() string {
	type bar struct {
		label string
		v     float64
		ok    bool
		ours  bool
		seed  bool
		note  string
	}
	var bars []bar
	for _, c := range rp.columns() {
		for _, k := range rp.rows() {
			r, ok := rp.find(k.sys, c.nodes, k.iv, c.pad)
			if !ok {
				continue
			}
			name := shortName(r)
			b := bar{label: fmt.Sprintf("%d nodes %d B  %s", c.nodes, c.pad, name), v: r.MsgPerSec, ok: r.Valid, ours: r.System == sysOurs}
			if !r.Valid {
				b.note = "not exact"
				if r.MsgPerSec == 0 {
					b.note = "lost messages"
				}
			}
			bars = append(bars, b)
		}
		for _, iv := range []time.Duration{100 * time.Millisecond, 0} {
			if s := seedFigure(c.nodes, iv, c.pad); s != "" {
				var v float64
				fmt.Sscanf(strings.ReplaceAll(strings.Trim(s, "*"), ",", ""), "%f", &v)
				bars = append(bars, bar{label: fmt.Sprintf("%d nodes %d B  Elixir %v (Fly.io, seed)", c.nodes, c.pad, iv), v: v, ok: true, seed: true})
			}
		}
	}
	const left, right, rowH, top = 330.0, 120.0, 18.0, 56.0
	width := 1000.0
	plotW := width - left - right
	height := top + rowH*float64(len(bars)) + 40
	lo, hi := 2.0, 7.0 // 100 .. 10M msg/s
	x := func(v float64) float64 {
		if v <= 0 {
			return 0
		}
		l := math.Log10(v)
		return plotW * math.Max(0, math.Min(1, (l-lo)/(hi-lo)))
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="18" font-size="14" font-weight="bold">Throughput, msg/s (log scale), every node a process on loopback, %d-core machine</text>`+"\n", 10.0, rp.NumCPU)
	for e := lo; e <= hi; e++ {
		xx := left + x(math.Pow(10, e))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#ddd"/>`+"\n", xx, top-5, xx, height-30)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle" fill="#555">%s</text>`+"\n", xx, height-15, commas(math.Pow(10, e)))
	}
	for i, t := range []struct {
		v     float64
		label string
	}{{5e5, "target 200 B (3 nodes, 100 ms)"}, {1e6, "target 10 B"}} {
		xx := left + x(t.v)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#e08a00" stroke-dasharray="4 3"/>`+"\n", xx, top-20+float64(i)*12, xx, height-30)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle" fill="#e08a00" font-size="10">%s</text>`+"\n", xx, top-22+float64(i)*12, t.label)
	}
	for i, br := range bars {
		y := top + float64(i)*rowH
		color := "#7a8ca3"
		switch {
		case br.seed:
			color = "#c9c9c9"
		case br.ours:
			color = "#2b7bb9"
		}
		if !br.ok {
			color = "#d9534f"
		}
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y+12, escape(br.label))
		wv := x(br.v)
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.1f" width="%.1f" height="%.0f" fill="%s"/>`+"\n", left, y+2, wv, rowH-4, color)
		val := commas(br.v)
		if br.v == 0 {
			val = ""
		}
		if br.note != "" {
			val = strings.TrimSpace(val + " (" + br.note + ")")
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", left+wv+4, y+12, escape(val))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// targets17 writes issue 17's targets against this run: met or not, with
// the figure; the reasons are in the analysis below the tables.
func (rp *report) targets17(b *strings.Builder) {
	w := func(format string, args ...interface{}) { fmt.Fprintf(b, format, args...) }
	first := 3
	if len(rp.opts.nodes) > 0 {
		first = rp.opts.nodes[0]
	}
	w("### Targets (issue 17, %d nodes unless said)\n\n| target | measured | met? |\n|---|---|---|\n", first)
	row := func(name string, have bool, val string, met bool) { targetRow(b, name, have, val, met) }
	get := func(sys string, nodes int, iv time.Duration, pad int) (result, bool) {
		r, ok := rp.find(sys, nodes, iv, pad)
		return r, ok && r.Valid && r.MsgPerSec > 0
	}
	for _, t := range []struct {
		pad      int
		abs, rel float64
	}{{10, 1e6, 2.5}, {200, 5e5, 2.0}} {
		o, ok := get(sysOurs, first, 100*time.Millisecond, t.pad)
		raw, okRaw := get(sysRaw, first, 0, t.pad)
		val, met := "", false
		if ok {
			val = commas(o.MsgPerSec) + " msg/s"
			met = o.MsgPerSec >= t.abs
			if okRaw {
				val += fmt.Sprintf(" = %.2fx raw (%s)", o.MsgPerSec/raw.MsgPerSec, commas(raw.MsgPerSec))
				met = met || o.MsgPerSec >= t.rel*raw.MsgPerSec
			}
		}
		row(fmt.Sprintf("100 ms, %d B: >= %s msg/s or >= %.1fx raw fire-and-forget", t.pad, commas(t.abs), t.rel), ok, val, met)
	}
	o100, ok100 := get(sysOurs, first, 100*time.Millisecond, 10)
	o0, ok0 := get(sysOurs, first, 0, 10)
	row("BatchInterval 0 at least as fast as 100 ms (10 B)", ok100 && ok0,
		fmt.Sprintf("%s vs %s = %.2f", commas(o0.MsgPerSec), commas(o100.MsgPerSec), o0.MsgPerSec/math.Max(o100.MsgPerSec, 1)), o0.MsgPerSec >= o100.MsgPerSec)
	if r, ok := rp.find(sysOurs, first, 100*time.Millisecond, 10); ok && len(r.RSSKB) > 0 {
		payload := 10 + 12 // pad, plus the Stamp's sequence number and framing
		bound := 1.5*float64(2*r.N)*float64(payload+32) + 64<<20
		rss := float64(r.RSSKB[0]) * 1024
		row(fmt.Sprintf("producer RSS <= 1.5 x BufferSize x (payload + 32 B) + 64 MiB (BufferSize %s, 10 B)", commas(float64(2*r.N))), true,
			fmt.Sprintf("%.0f MiB, bound %.0f MiB", rss/(1<<20), bound/(1<<20)), rss <= bound)
	}
	ours, raw := rp.latencyAt0()
	if ours != nil {
		val := fmt.Sprintf("p99 %.2f ms", ours.P99)
		met := ours.P99 < 2
		if raw != nil {
			val += fmt.Sprintf(" (raw protoactor p99 %.2f ms)", raw.P99)
			met = met && ours.P99 <= raw.P99
		}
		row(fmt.Sprintf("p99 publish-to-remote-subscriber at %s msg/s, BatchInterval 0: < 2 ms and <= raw protoactor's", commas(float64(rp.opts.rate))), true, val, met)
	} else {
		row("p99 publish-to-remote-subscriber, BatchInterval 0: < 2 ms and <= raw protoactor's", false, "", false)
	}
	if big, okBig := get(sysOurs, 8, 100*time.Millisecond, 10); okBig && ok100 {
		d8, d3 := big.MsgPerSec*8, o100.MsgPerSec*float64(first)
		row(fmt.Sprintf("8 nodes: delivered msg/s (msg/s x receiving nodes) >= 80%% of %d nodes (100 ms, 10 B)", first), true,
			fmt.Sprintf("%s vs %s = %.0f%%", commas(d8), commas(d3), 100*d8/d3), d8 >= 0.8*d3)
	} else {
		row("8 nodes: delivered msg/s >= 80% of 3 nodes", false, "", false)
	}
	w("\nHeap per buffered message (target: payload + 32 B): `BenchmarkStoreHeap` under \"Go micro-benchmarks\" below. CPU per delivered message, per system: \"CPU per delivered message\" below.\n\n")
}

// batchTargets writes issue 26's targets: BatchInterval 100 ms at least as
// fast as 0 at every node count and payload the run measured both (item 1);
// 100 ms, 10 B at the first node count against raw protoactor and against
// the CPU-bound limit (item 2); the p99 at BatchInterval 0 (item 3).
func (rp *report) batchTargets(b *strings.Builder) {
	var rows strings.Builder
	for _, c := range rp.columns() {
		o100, ok100 := rp.find(sysOurs, c.nodes, 100*time.Millisecond, c.pad)
		o0, ok0 := rp.find(sysOurs, c.nodes, 0, c.pad)
		if !ok100 || !ok0 {
			continue
		}
		have := o100.Valid && o0.Valid && o100.MsgPerSec > 0 && o0.MsgPerSec > 0
		targetRow(&rows, fmt.Sprintf("%d nodes, %d B: BatchInterval 100 ms at least as fast as 0", c.nodes, c.pad), have,
			fmt.Sprintf("%s vs %s = %.2f", commas(o100.MsgPerSec), commas(o0.MsgPerSec), o100.MsgPerSec/math.Max(o0.MsgPerSec, 1)),
			o100.MsgPerSec >= o0.MsgPerSec)
	}
	first := 3
	if len(rp.opts.nodes) > 0 {
		first = rp.opts.nodes[0]
	}
	if o, ok := rp.find(sysOurs, first, 100*time.Millisecond, 10); ok {
		have := o.Valid && o.MsgPerSec > 0
		if raw, okRaw := rp.find(sysRaw, first, 0, 10); okRaw {
			targetRow(&rows, fmt.Sprintf("%d nodes, 10 B, 100 ms: >= 2.5x raw fire-and-forget", first), have && raw.Valid && raw.MsgPerSec > 0,
				fmt.Sprintf("%s = %.2fx raw (%s)", commas(o.MsgPerSec), o.MsgPerSec/math.Max(raw.MsgPerSec, 1), commas(raw.MsgPerSec)),
				o.MsgPerSec >= 2.5*raw.MsgPerSec)
		}
		if limit := rp.cpuBound(o); limit > 0 {
			targetRow(&rows, fmt.Sprintf("%d nodes, 10 B, 100 ms: >= 80 %% of the CPU-bound limit", first), have,
				fmt.Sprintf("%s of %s (%.2f us per delivery) = %.0f %%", commas(o.MsgPerSec), commas(limit), o.CPUNsPerDelivery/1000, 100*o.MsgPerSec/limit),
				o.MsgPerSec >= 0.8*limit)
		}
	}
	ours, raw := rp.latencyAt0()
	if ours != nil && raw != nil {
		targetRow(&rows, fmt.Sprintf("p99 publish to remote subscriber at %s msg/s, BatchInterval 0: <= raw protoactor's and < 2 ms", commas(float64(rp.opts.rate))), true,
			fmt.Sprintf("%.2f ms (raw protoactor %.2f ms)", ours.P99, raw.P99), ours.P99 <= raw.P99 && ours.P99 < 2)
	}
	if rows.Len() > 0 {
		fmt.Fprintf(b, "### Targets (issue 26: batching, throughput against the CPU, the tail)\n\n| target | measured | met? |\n|---|---|---|\n%s\n", rows.String())
	}
}

// tailTargets is issue 42's table: the tail against raw protoactor and NATS
// core at BatchInterval 0 (-rate), and throughput against raw at 10 B and
// 200 B for every node count measured.
func (rp *report) tailTargets(b *strings.Builder) {
	var rows strings.Builder
	rate := rp.opts.rate
	ours, raw, nats := rp.latencyOf(sysOurs, rate, 0), rp.latencyOf(sysRaw, rate, 0), rp.latencyOf(sysNATS, rate, 0)
	if ours != nil && raw != nil && nats != nil {
		targetRow(&rows, fmt.Sprintf("p99 at %s msg/s, BatchInterval 0: <= NATS core's and <= 1.5x raw protoactor's", commas(float64(rate))), true,
			fmt.Sprintf("%.2f ms (NATS core %.2f, raw %.2f: %.2fx raw)", ours.P99, nats.P99, raw.P99, ours.P99/math.Max(raw.P99, 1e-9)),
			ours.P99 <= nats.P99 && ours.P99 <= 1.5*raw.P99)
		if rl := rp.latencyOf(sysRelay, rate, 0); rl != nil {
			// Not a target of the issue: whether EchoPubSub's two hops alone
			// keep raw protoactor within the 1.5x, i.e. could explain a miss.
			targetRow(&rows, fmt.Sprintf("(for the cause) p99 at %s msg/s of raw protoactor with EchoPubSub's two actor hops: <= 1.5x raw's", commas(float64(rate))), true,
				fmt.Sprintf("%.2f ms: %.2fx raw; EchoPubSub %.2fx this", rl.P99, rl.P99/math.Max(raw.P99, 1e-9), ours.P99/math.Max(rl.P99, 1e-9)),
				rl.P99 <= 1.5*raw.P99)
		}
		targetRow(&rows, fmt.Sprintf("p99.9 at %s msg/s, BatchInterval 0: <= 2x raw protoactor's", commas(float64(rate))), ours.P999 > 0 && raw.P999 > 0,
			fmt.Sprintf("%.2f ms (raw %.2f: %.2fx)", ours.P999, raw.P999, ours.P999/math.Max(raw.P999, 1e-9)), ours.P999 <= 2*raw.P999)
	}
	for _, c := range rp.columns() {
		want := 3.0
		if c.pad >= 200 {
			want = 2.5
		}
		for _, iv := range []time.Duration{100 * time.Millisecond, 0} {
			o, ok := rp.find(sysOurs, c.nodes, iv, c.pad)
			raw, okRaw := rp.find(sysRaw, c.nodes, 0, c.pad)
			if !ok || !okRaw {
				continue
			}
			have := o.Valid && raw.Valid && o.MsgPerSec > 0 && raw.MsgPerSec > 0
			val := fmt.Sprintf("%s = %.2fx raw (%s)", commas(o.MsgPerSec), o.MsgPerSec/math.Max(raw.MsgPerSec, 1), commas(raw.MsgPerSec))
			if o.CPUNsPerDelivery > 0 && raw.CPUNsPerDelivery > 0 {
				val += fmt.Sprintf("; CPU per delivery %.2f us (raw %.2f", o.CPUNsPerDelivery/1000, raw.CPUNsPerDelivery/1000)
				if fl, ok := rp.find(sysBatch, c.nodes, 0, c.pad); ok && fl.Valid && fl.CPUNsPerDelivery > 0 {
					val += fmt.Sprintf(", batching floor %.2f: %.2fx raw's CPU", fl.CPUNsPerDelivery/1000, raw.CPUNsPerDelivery/fl.CPUNsPerDelivery)
				}
				val += ")"
			}
			targetRow(&rows, fmt.Sprintf("%d nodes, %d B, BatchInterval %v: >= %.1fx raw protoactor", c.nodes, c.pad, iv, want), have, val,
				o.MsgPerSec >= want*raw.MsgPerSec)
		}
	}
	if rows.Len() > 0 {
		fmt.Fprintf(b, "### Targets (issue 42: the tail, and throughput against raw)\n\n| target | measured | met? |\n|---|---|---|\n%s\n", rows.String())
	}
}

// targetRow writes one row of a targets table: the figure and whether it
// meets the target ("not measured" when the run has no figure for it).
func targetRow(b *strings.Builder, name string, have bool, val string, met bool) {
	m := "no"
	if !have {
		m, val = "not measured", "-"
	} else if met {
		m = "yes"
	}
	fmt.Fprintf(b, "| %s | %s | %s |\n", name, val, m)
}

package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"syscall"
	"time"

	"github.com/echopubsub/echopubsub/test"
)

// Fault kinds.
const (
	FaultProxyCut       = "proxy_cut"        // node cut off completely at its proxy
	FaultProxyBlackhole = "proxy_blackhole"  // node's proxy stops forwarding, connections stay open
	FaultProxyLatency   = "proxy_latency"    // 150 ms added to everything towards a node
	FaultOneWay         = "partition_oneway" // iptables: a cannot send to b
	FaultPairwise       = "partition_pair"   // iptables: a and b cannot reach each other
	FaultLoss           = "packet_loss"      // iptables statistic: 30% of a node's packets dropped
	FaultKill           = "kill9_restart"    // kill -9, then a new process on the same addresses
	FaultPause          = "sigstop"          // SIGSTOP ... SIGCONT
	FaultProducerCrash  = "producer_crash"   // a faults.Hook panic in the producer
	FaultWorkerCrash    = "worker_crash"     // a faults.Hook panic in the worker
	// FaultColdRestart kill -9s every node, then starts them all again at
	// once; each subscribes and starts publishing as soon as it is up,
	// without waiting for the cluster to form (the join protocol must give
	// every node every message written after its Start, and no false
	// CursorExpired).
	FaultColdRestart = "cold_restart"
)

// AllFaults lists every kind; the network ones need Netns.
var AllFaults = []string{FaultProxyCut, FaultProxyBlackhole, FaultProxyLatency, FaultOneWay, FaultPairwise,
	FaultLoss, FaultKill, FaultPause, FaultProducerCrash, FaultWorkerCrash, FaultColdRestart}

func needsNetns(kind string) bool {
	return kind == FaultOneWay || kind == FaultPairwise || kind == FaultLoss
}

// SoakOptions configure RunSoak.
type SoakOptions struct {
	Cluster     ClusterOptions
	Messages    int64 // at least this many broadcasts, and every fault kind once
	Publishers  int   // per node
	Rate        int   // messages/s per publisher
	Pad         int   // payload padding, bytes
	Subscribers int   // per node
	// SlowSubscribers per node are bounded at 100 queued messages and spend
	// SlowMicros on each: they are dropped for, with BackPressure notices.
	SlowSubscribers int
	SlowMicros      int
	// Kinds restricts the faults injected (default: AllFaults).
	Kinds  []string
	Hold   time.Duration
	Settle time.Duration
	Drain  time.Duration // how long the end may take to catch up
	Seed   int64
	// Restart, when set, replaces what a node does after a kill -9 (and
	// each node after a cold restart) once its new process is up: by
	// default its late subscribers subscribe and its publishers start.
	Restart func(c *Cluster, i int) error
	// Killed, when set, runs right after a kill -9 of node i was confirmed,
	// while it is down (the session soak's owners fail over to a live node).
	Killed func(c *Cluster, i int) error
	// IsolateAtEnd, when > 0, cuts the last node off at its proxy for this
	// long at the end of the run while the others keep publishing, and
	// samples the first node's RSS: the memory of a producer whose peer is
	// partitioned.
	IsolateAtEnd time.Duration
	// PresenceDownAfter, when > 0, runs a presence tracker and its churn on
	// every node (chaosnode -presence-down-after) and, after each fault has
	// settled and at the end, checks that every live node's List equals the
	// union of what the live nodes track (Result.PresenceViolations),
	// waiting at most PresenceWithin for it.
	PresenceDownAfter time.Duration
	PresenceWithin    time.Duration
}

// Result is what a soak measured.
type Result struct {
	Duration time.Duration
	Messages int64 // broadcasts accepted
	// SentBeforeFormed: broadcasts made while the cluster was still
	// joining (every node publishes from its start; a lower bound, from
	// the nodes' status reports when the last producer had joined).
	SentBeforeFormed  int64
	Publishers        int
	Deliveries        int64 // stamps received, all subscribers
	Faults            map[string]int
	Confirmed         map[string]int // faults whose effect was observed
	Skipped           []string       // kinds not run (no root)
	Counts            test.Counts
	ReordersPerSender map[string]int
	DuplicatesPerNode map[string]int64
	ExpiriesPerNode   map[string]int64
	Violations        []test.Violation
	// Memory, KiB.
	BaselineRSSKB  int64 // node 0 after start-up, publishing, all healthy
	PeerCutRSSKB   int64 // highest RSS of a node while a peer was cut off (any cut fault)
	IsolationRSSKB []int64
	PeakHWMKB      map[string]int64
	// DataRaces reported by nodes built with -race.
	DataRaces int
	// Record is the verdict: CheckRecords over every process's record.
	Record *RecordCheck
	// LiveViolations is what the nodes' live checkers reported (progress
	// only; the record is the verdict).
	LiveViolations int
	// PresenceChecks is how many times (after each fault, and at the end)
	// every live node's presence list was compared with the union of live
	// tracks; PresenceViolations, each time they did not agree within
	// SoakOptions.PresenceWithin.
	PresenceChecks     int
	PresenceViolations []string
}

// RunSoak starts a cluster, publishes from every node while injecting each
// fault kind in turn until Messages were sent, heals, drains, and collects
// every node's checker. An error means the soak could not run; guarantee
// breaches are in Result (Counts.SilentGaps, Counts.Reorders, Violations).
func RunSoak(ctx context.Context, o SoakOptions) (*Result, error) {
	logf := o.Cluster.Logf
	if logf == nil {
		logf = func(string, ...interface{}) {}
	}
	rng := rand.New(rand.NewSource(o.Seed))
	start := time.Now()
	// Each node subscribes and starts publishing as soon as its process is
	// up, while the nodes after it are not started yet: every node joins a
	// cluster that is already publishing (each producer is owed to a
	// joining node what was written after that node's Start).
	pub := Command{Op: OpPublish, Publishers: o.Publishers, Rate: o.Rate, Pad: o.Pad}
	copt := o.Cluster
	if o.PresenceDownAfter > 0 {
		args := copt.NodeArgs
		copt.NodeArgs = func(nd *NodeProc) []string {
			var a []string
			if args != nil {
				a = args(nd)
			}
			return append(a, "-presence-down-after", o.PresenceDownAfter.String())
		}
	}
	copt.Started = func(c *Cluster, i int) error {
		if err := subscribe(c, i, o, false); err != nil {
			return err
		}
		_, err := c.Call(i, pub)
		return err
	}
	c, err := NewCluster(copt)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	res := &Result{Faults: map[string]int{}, Confirmed: map[string]int{}, ReordersPerSender: map[string]int{}, DuplicatesPerNode: map[string]int64{},
		ExpiriesPerNode: map[string]int64{}, PeakHWMKB: map[string]int64{}}
	var kinds []string
	kinds, res.Skipped = SplitKinds(o.Kinds, o.Cluster.Netns)
	if err := c.WaitRegistered(30 * time.Second); err != nil {
		return nil, fmt.Errorf("cluster did not form: %w", err)
	}
	res.SentBeforeFormed = c.Sent() // as of the nodes' last status reports: a lower bound
	logf("soak: %d nodes publishing (%d publishers x %d msg/s each), netns=%v; %d messages broadcast before every producer had joined every node",
		len(c.Nodes), o.Publishers, o.Rate, o.Cluster.Netns, res.SentBeforeFormed)
	if err := Sleep(ctx, o.Settle); err != nil {
		return nil, err
	}
	res.BaselineRSSKB = c.Nodes[0].Proc.Status().RSSKB

	faults := FaultLoop{Name: "soak", Kinds: kinds, Messages: o.Messages, Settle: o.Settle, Logf: o.Cluster.Logf,
		Inject:  func(ctx context.Context, kind string) error { return runFault(ctx, c, o, rng, kind, res, pub) },
		Settled: func(_ context.Context, kind string) error { return checkPresence(c, o, res, kind) }}
	if err := faults.Run(ctx, c, res.Faults); err != nil {
		return nil, err
	}
	if o.IsolateAtEnd > 0 {
		if err := isolate(ctx, c, o, res); err != nil {
			return nil, fmt.Errorf("isolation: %w", err)
		}
	}

	if err := c.HealNet(); err != nil {
		return nil, err
	}
	if err := checkPresence(c, o, res, "the end"); err != nil {
		return nil, err
	}
	// Quiesce: heal, stop publishing, wait until every live subscriber has
	// everything or was told, then the tail check.
	if err := c.HealNet(); err != nil {
		return nil, err
	}
	for _, nd := range c.Live() {
		ev, err := nd.Proc.Call(Command{Op: OpStopPublish}, 20*time.Second)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		c.notePubs(ev.Pubs)
		c.mu.Unlock()
	}
	pubs := c.Publishers()
	sort.Slice(pubs, func(i, j int) bool { return pubs[i].Name < pubs[j].Name })
	err = poll(o.Drain, func() (bool, string) {
		for _, nd := range c.Live() {
			ev, err := nd.Proc.Call(Command{Op: OpBehind, Sent: pubs}, 10*time.Second)
			if err != nil {
				return false, err.Error()
			}
			if ev.Behind > 0 {
				return false, fmt.Sprintf("%s: %d subscriber/publisher pairs behind", nd.Name, ev.Behind)
			}
		}
		return true, ""
	})
	if err != nil {
		logf("soak: drain incomplete (the tail check will report it): %v", err)
	}
	c.mu.Lock()
	for _, f := range c.finals {
		if f.hwm > res.PeakHWMKB[f.node] {
			res.PeakHWMKB[f.node] = f.hwm
		}
	}
	c.mu.Unlock()
	res.LiveViolations = len(c.Violations())
	// The verdict: every record, checked offline.
	var files []RecordFile
	res.DataRaces, files, err = SoakEnd(c)
	if err != nil {
		return nil, err
	}
	rc, err := CheckRecords(files)
	if err != nil {
		return nil, fmt.Errorf("checking the records: %w", err)
	}
	res.Record = rc
	res.Counts = rc.Report.Counts
	res.Deliveries = res.Counts.Delivered
	res.Violations = rc.Report.Violations
	res.ReordersPerSender = rc.Report.Reorders
	res.DuplicatesPerNode = rc.DuplicatesPerNode
	res.ExpiriesPerNode = rc.ExpiriesPerNode
	res.Messages = rc.Messages
	res.Publishers = rc.Publishers
	if rc.WorkerCrashes < res.Faults[FaultWorkerCrash] {
		return nil, fmt.Errorf("fault %s not confirmed: %d injected, %d recorded after a delivered entry of a batch",
			FaultWorkerCrash, res.Faults[FaultWorkerCrash], rc.WorkerCrashes)
	}
	res.Duration = time.Since(start)
	return res, nil
}

func subscribe(c *Cluster, i int, o SoakOptions, late bool) error {
	if _, err := c.Call(i, Command{Op: OpSubscribe, Count: o.Subscribers, Late: late}); err != nil {
		return err
	}
	if o.SlowSubscribers > 0 {
		_, err := c.Call(i, Command{Op: OpSubscribe, Count: o.SlowSubscribers, Late: late, Bound: 100, SlowMicros: o.SlowMicros})
		return err
	}
	return nil
}

// hold waits d while sampling the RSS of every node but the excluded ones.
func hold(ctx context.Context, c *Cluster, d time.Duration, res *Result, cut ...int) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if len(cut) > 0 {
			for _, nd := range c.Live() {
				if !contains(cut, nd.Index) && !nd.Paused {
					if rss := nd.Proc.Status().RSSKB; rss > res.PeerCutRSSKB {
						res.PeerCutRSSKB = rss
					}
				}
			}
		}
		if err := Sleep(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func runFault(ctx context.Context, c *Cluster, o SoakOptions, rng *rand.Rand, kind string, res *Result, pub Command) error {
	n := len(c.Nodes)
	a := rng.Intn(n)
	b := (a + 1 + rng.Intn(n-1)) % n
	logf := o.Cluster.Logf
	if logf == nil {
		logf = func(string, ...interface{}) {}
	}
	logf("soak: injecting %s (node %d, peer %d)", kind, a, b)
	// Each fault confirms its effect by an observation independent of the
	// command that made it; one that cannot be confirmed fails the run.
	confirm := func(ok bool, format string, args ...interface{}) error {
		if !ok {
			return fmt.Errorf("fault %s on node %d not confirmed: %s", kind, a, fmt.Sprintf(format, args...))
		}
		res.Confirmed[kind]++
		return nil
	}
	switch kind {
	case FaultProxyCut, FaultProxyBlackhole, FaultProxyLatency:
		mode, latency := ModeCut, time.Duration(0)
		switch kind {
		case FaultProxyBlackhole:
			mode = ModeBlackhole
		case FaultProxyLatency:
			mode, latency = ModeLatency, 150*time.Millisecond
		}
		before, err := c.ProxyCounters(a)
		if err != nil {
			return err
		}
		if err := c.SetProxy(a, mode, latency); err != nil {
			return err
		}
		if kind == FaultProxyLatency {
			err = hold(ctx, c, o.Hold, res)
		} else {
			err = hold(ctx, c, o.Hold, res, a)
		}
		if err != nil {
			return err
		}
		after, err := c.ProxyCounters(a)
		if err != nil {
			return err
		}
		if err := c.SetProxy(a, ModePass, 0); err != nil {
			return err
		}
		switch kind {
		case FaultProxyCut:
			return confirm(after.Closed+after.Refused > before.Closed+before.Refused,
				"the proxy closed and refused no connection (%+v, before %+v)", after, before)
		case FaultProxyBlackhole:
			return confirm(after.Held > before.Held, "the proxy held nothing (%+v, before %+v)", after, before)
		default:
			return confirm(after.Delayed > before.Delayed, "the proxy delayed nothing (%+v, before %+v)", after, before)
		}
	case FaultOneWay, FaultPairwise, FaultLoss:
		var err error
		targets := []int{a}
		switch kind {
		case FaultLoss:
			err = c.Loss(a, 0.3)
		case FaultOneWay:
			err = c.Block(a, b)
		case FaultPairwise:
			err = errors.Join(c.Block(a, b), c.Block(b, a))
			targets = append(targets, b)
		}
		if err != nil {
			return err
		}
		if kind == FaultLoss {
			err = hold(ctx, c, o.Hold, res)
		} else {
			err = hold(ctx, c, o.Hold, res, b)
		}
		if err != nil {
			return err
		}
		var dropped []int64
		ok := true
		for _, i := range targets {
			n, err := c.DroppedPackets(i)
			if err != nil {
				return err
			}
			dropped = append(dropped, n)
			ok = ok && n > 0
		}
		if err := c.HealNet(); err != nil {
			return err
		}
		return confirm(ok, "iptables DROP packet counters of nodes %v: %v", targets, dropped)
	case FaultKill:
		if err := c.Kill(a); err != nil {
			return err // Kill returns once the process was reaped
		}
		st := c.Nodes[a].Proc.ExitState()
		if err := confirm(st != nil && st.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL,
			"the process did not die of SIGKILL (%v)", st); err != nil {
			return err
		}
		if o.Killed != nil {
			if err := o.Killed(c, a); err != nil {
				return err
			}
		}
		if err := hold(ctx, c, o.Hold/2, res, a); err != nil {
			return err
		}
		return restart(c, a, o, pub)
	case FaultColdRestart:
		for i := range c.Nodes {
			if err := c.Kill(i); err != nil {
				return err
			}
			st := c.Nodes[i].Proc.ExitState()
			if st == nil || st.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				return confirm(false, "node %d did not die of SIGKILL (%v)", i, st)
			}
		}
		if err := hold(ctx, c, o.Hold/2, res); err != nil {
			return err
		}
		// All at once: each node's process starts, subscribes and publishes
		// while the others are still starting.
		errs := make(chan error, len(c.Nodes))
		for i := range c.Nodes {
			go func(i int) { errs <- restart(c, i, o, pub) }(i)
		}
		var err error
		for range c.Nodes {
			err = errors.Join(err, <-errs)
		}
		if err != nil {
			return err
		}
		return confirm(true, "")
	case FaultPause:
		if err := c.Pause(a); err != nil {
			return err
		}
		var state string
		err := poll(2*time.Second, func() (bool, string) {
			var err error
			state, err = c.ProcState(a)
			return err == nil && state == "T", fmt.Sprintf("state %q, %v", state, err)
		})
		if err := confirm(err == nil, "/proc/<pid>/stat never showed T: %v", err); err != nil {
			_ = c.Resume(a)
			return err
		}
		if err := hold(ctx, c, o.Hold, res, a); err != nil {
			return err
		}
		return c.Resume(a)
	case FaultProducerCrash, FaultWorkerCrash:
		what := "producer"
		if kind == FaultWorkerCrash {
			what = "worker"
		}
		before := crashes(c.Nodes[a].Proc.Status(), what)
		if _, err := c.Call(a, Command{Op: OpCrash, What: what}); err != nil {
			return err
		}
		// The hook fires on the next call (producer) or request (worker).
		if err := poll(o.Hold+10*time.Second, func() (bool, string) {
			return crashes(c.Nodes[a].Proc.Status(), what) > before, what + " crash not injected yet"
		}); err != nil {
			return err
		}
		// Confirmed by the node's own count; a worker crash also by its
		// record (a W line: an entry of the batch was delivered before it).
		res.Confirmed[kind]++
		return hold(ctx, c, o.Hold/2, res)
	}
	return errors.New("unknown fault kind")
}

// restart starts node i's next process and what runs on it
// (SoakOptions.Restart, or late subscribers and pub).
func restart(c *Cluster, i int, o SoakOptions, pub Command) error {
	if o.Restart != nil {
		return c.Restart(i, func() error { return o.Restart(c, i) }, Command{})
	}
	return c.Restart(i, func() error { return subscribe(c, i, o, true) }, pub)
}

// InjectFault injects one fault of kind into c, holds it for o.Hold,
// heals it, and confirms its effect by an observation independent of the
// command that made it (an error when it cannot be confirmed); res counts
// what was confirmed and samples RSS. pub is what a restarted node
// publishes when o.Restart is nil. RunSoak injects its faults with it; a
// soak of another module (test/e2e's session soak) drives its own
// cluster and workload and injects the same faults the same way.
func InjectFault(ctx context.Context, c *Cluster, o SoakOptions, rng *rand.Rand, kind string, res *Result, pub Command) error {
	return runFault(ctx, c, o, rng, kind, res, pub)
}

// NeedsNetns reports whether fault kind needs network namespaces (root).
func NeedsNetns(kind string) bool { return needsNetns(kind) }

func crashes(ev Event, what string) int64 {
	if what == "producer" {
		return ev.ProducerCrashes
	}
	return ev.WorkerCrashes
}

// isolate cuts the last node off while the others publish, sampling node
// 0's RSS every second and the producers' lag towards the cut node.
func isolate(ctx context.Context, c *Cluster, o SoakOptions, res *Result) error {
	last := len(c.Nodes) - 1
	if err := c.SetProxy(last, ModeCut, 0); err != nil {
		return err
	}
	deadline := time.Now().Add(o.IsolateAtEnd)
	for time.Now().Before(deadline) {
		if err := Sleep(ctx, time.Second); err != nil {
			return err
		}
		res.IsolationRSSKB = append(res.IsolationRSSKB, c.Nodes[0].Proc.Status().RSSKB)
	}
	return c.SetProxy(last, ModePass, 0)
}

// FalseAlarmReasons are the false alarms per reason.
func (r *Result) FalseAlarmReasons() map[string]int64 {
	if r.Record == nil {
		return nil
	}
	return r.Record.Report.FalseAlarmReasons
}

func nonZero(m map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

// Summary renders r for logs and docs.
func (r *Result) Summary() string {
	s := fmt.Sprintf("duration %v\nmessages %d from %d publishers (at least %d while the cluster was joining), %d deliveries checked\nfaults %v, confirmed %v\n",
		r.Duration.Round(time.Second), r.Messages, r.Publishers, r.SentBeforeFormed, r.Deliveries, r.Faults, r.Confirmed)
	if len(r.Skipped) > 0 {
		s += fmt.Sprintf("SKIPPED (no root or no ip tool): %v\n", r.Skipped)
	}
	if r.DataRaces > 0 {
		s += fmt.Sprintf("DATA RACES reported by the nodes: %d\n", r.DataRaces)
	}
	s += fmt.Sprintf("silent gaps %d (mid-stream %d, start %d, tail %d), reorders %d (per sender %v), covered gaps %d\n",
		r.Counts.SilentGaps, r.Counts.SilentGaps-r.Counts.StartGaps-r.Counts.TailGaps, r.Counts.StartGaps, r.Counts.TailGaps,
		r.Counts.Reorders, nonZero(r.ReordersPerSender), r.Counts.CoveredGaps)
	s += fmt.Sprintf("false alarms %d %v, precautionary (producer restarted, nothing missing) %d, unjudged (dead subscribers) %d\n",
		r.Counts.FalseAlarms, r.FalseAlarmReasons(), r.Counts.Precautionary, r.Counts.Unjudged)
	s += fmt.Sprintf("cursor expiries %d, of them with a known range %d; wrong ranges (naming a cursor that came) %d\n",
		r.Counts.Expiries, r.Counts.Ranged, r.Counts.WrongRanges)
	s += fmt.Sprintf("undecodable %d, other unexpected messages %d, cursor expiries for a gap in a producer's stream %d\n",
		r.Counts.Undecodable, r.Counts.Other, r.Counts.StreamGaps)
	if r.Record != nil {
		s += fmt.Sprintf("record: %d files, %d torn last lines, expiries by reason %v; live checkers reported %d violations (progress only)\n",
			r.Record.Files, r.Record.TornLines, r.Record.Report.ExpiryReasons, r.LiveViolations)
	}
	s += fmt.Sprintf("duplicates per node %v\nexpiries per node %v, dropping notices %d, resumed %d\n",
		r.DuplicatesPerNode, r.ExpiriesPerNode, r.Counts.Dropping, r.Counts.Resumed)
	s += fmt.Sprintf("rss: baseline %d KiB, highest while a peer was cut %d KiB, peak (VmHWM) per node %v\n",
		r.BaselineRSSKB, r.PeerCutRSSKB, r.PeakHWMKB)
	if len(r.IsolationRSSKB) > 0 {
		s += fmt.Sprintf("rss of n0 each second while the last node was cut off: %v KiB\n", r.IsolationRSSKB)
	}
	if r.PresenceChecks > 0 {
		s += fmt.Sprintf("presence: %d checks of every node's list against the union of live tracks, %d failed\n",
			r.PresenceChecks, len(r.PresenceViolations))
		for _, v := range r.PresenceViolations {
			s += "  presence " + v + "\n"
		}
	}
	for i, v := range r.Violations {
		if i == 20 {
			s += fmt.Sprintf("... %d more violations\n", len(r.Violations)-20)
			break
		}
		s += "  " + v.String() + "\n"
	}
	return s
}

// DefaultNetns reports whether the soak can use namespaces: root and the
// ip tool.
func DefaultNetns() bool { return os.Getuid() == 0 && ipAvailable() }

func ipAvailable() bool {
	for _, p := range []string{"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}

// checkPresence (with SoakOptions.PresenceDownAfter) pauses every live
// node's presence churn and waits until each node's List equals the union
// of what the live nodes track themselves: no zombie of a killed or cut
// node, no presence missing. A disagreement past PresenceWithin is a
// violation; an error means the check could not run.
func checkPresence(c *Cluster, o SoakOptions, res *Result, after string) error {
	if o.PresenceDownAfter <= 0 {
		return nil
	}
	live := c.Live()
	for _, nd := range live {
		if _, err := nd.Proc.Call(Command{Op: OpPresence, What: "pause"}, 15*time.Second); err != nil {
			return fmt.Errorf("presence pause on %s: %w", nd.Name, err)
		}
	}
	res.PresenceChecks++
	err := poll(o.PresenceWithin, func() (bool, string) {
		var union []string
		lists := make([][]string, len(live))
		for i, nd := range live {
			ev, err := nd.Proc.Call(Command{Op: OpPresence, What: "list"}, 15*time.Second)
			if err != nil {
				return false, err.Error()
			}
			union = append(union, ev.OwnPresence...)
			lists[i] = ev.Presence
		}
		sort.Strings(union)
		for i, nd := range live {
			if missing, extra := setDiff(union, lists[i]), setDiff(lists[i], union); len(missing)+len(extra) > 0 {
				return false, fmt.Sprintf("%s lists %d presences, the live nodes track %d: missing %v, extra (zombies) %v",
					nd.Name, len(lists[i]), len(union), clipStrings(missing), clipStrings(extra))
			}
		}
		return true, ""
	})
	if err != nil {
		res.PresenceViolations = append(res.PresenceViolations, fmt.Sprintf("after %s: %v", after, err))
	}
	for _, nd := range live {
		if _, err := nd.Proc.Call(Command{Op: OpPresence, What: "resume"}, 15*time.Second); err != nil {
			return fmt.Errorf("presence resume on %s: %w", nd.Name, err)
		}
	}
	return nil
}

// setDiff is what a holds and b does not (both sorted).
func setDiff(a, b []string) []string {
	var out []string
	for _, s := range a {
		if i := sort.SearchStrings(b, s); i == len(b) || b[i] != s {
			out = append(out, s)
		}
	}
	return out
}

func clipStrings(s []string) []string {
	if len(s) > 3 {
		return append(s[:3:3], fmt.Sprintf("... %d more", len(s)-3))
	}
	return s
}

package chaos

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/echopubsub/echopubsub/internal/proc"
	"github.com/echopubsub/echopubsub/test"
)

// ClusterOptions configure a chaos cluster.
type ClusterOptions struct {
	Binary string // chaosnode, from BuildNode
	// ProxyBinary runs the proxy (chaosnode -proxy); defaults to Binary.
	// A node binary of another module (test/e2e's session soak) takes the
	// chaos flags and protocol but leaves the proxy to chaosnode.
	ProxyBinary string
	// NodeArgs, when set, adds flags to each node process's command line
	// (the same on every incarnation of the slot).
	NodeArgs func(nd *NodeProc) []string
	// Started, when set, runs right after each node's first process is up,
	// before the next node starts (NewCluster starts them one by one): a
	// soak that subscribes and publishes there publishes while the cluster
	// is still joining.
	Started func(c *Cluster, i int) error
	Dir     string // logs: one file per process
	Nodes   int
	// Netns puts every node in its own network namespace, linked by veth to
	// a bridge in a hub namespace where the proxy runs. Needs root; enables
	// partitions and packet loss (iptables inside the node namespaces).
	Netns bool
	// Node settings (chaosnode flags). BatchInterval is passed as it is:
	// 0 is BatchInterval 0, not the library default.
	Buffer        int
	Pool          int
	BatchInterval time.Duration
	CallTimeout   time.Duration
	Retry         time.Duration
	LogLevel      string
	Logf          func(format string, args ...interface{})
}

// NodeProc is one node slot; its process changes on restart.
type NodeProc struct {
	Index       int
	Name        string // n0, n1, ...
	NS          string // its network namespace ("" on loopback)
	Listen      string // where its remote binds
	Advertise   string // its proxy route: what other nodes dial
	Incarnation int
	Proc        *Proc
	Paused      bool
}

// Cluster is a set of chaosnode processes behind one proxy process.
type Cluster struct {
	opt   ClusterOptions
	Nodes []*NodeProc
	proxy *Proc
	hubNS string
	hubIP string
	nsAll []string

	mu         sync.Mutex
	violations []test.Violation
	pubs       map[string]PubInfo   // every publisher ever, last known
	finals     map[string]nodeFinal // per process (name#incarnation): last counts
	killed     map[string]bool      // processes (name#incarnation) killed: their subscribers died
}

type nodeFinal struct {
	node   string
	counts test.Counts
	hwm    int64
}

const nsNet = "10.77.0." // the private subnet inside the namespaces

// NewCluster starts the proxy and opt.Nodes nodes (not yet subscribed or
// publishing). Close it when done.
func NewCluster(opt ClusterOptions) (c *Cluster, err error) {
	if opt.Netns && os.Getuid() != 0 {
		return nil, errors.New("chaos: network namespaces need root")
	}
	if opt.Logf == nil {
		opt.Logf = func(string, ...interface{}) {}
	}
	c = &Cluster{opt: opt, pubs: map[string]PubInfo{}, finals: map[string]nodeFinal{}, killed: map[string]bool{}}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	prefix := fmt.Sprintf("eps%d", os.Getpid())
	proxyHost := "127.0.0.1"
	var proxyArgv []string
	if opt.Netns {
		c.hubNS, c.hubIP, proxyHost = prefix+"-hub", nsNet+"254", nsNet+"254"
		if err := c.setupNetns(prefix); err != nil {
			return c, err
		}
		proxyArgv = []string{"ip", "netns", "exec", c.hubNS}
	}
	proxyBin := opt.ProxyBinary
	if proxyBin == "" {
		proxyBin = opt.Binary
	}
	c.proxy, _, err = StartProc("proxy", append(proxyArgv, proxyBin, "-proxy"), filepath.Join(opt.Dir, "proxy.log"), nil)
	if err != nil {
		return c, err
	}
	for i := 0; i < opt.Nodes; i++ {
		nd := &NodeProc{Index: i, Name: fmt.Sprintf("n%d", i)}
		if opt.Netns {
			nd.NS = fmt.Sprintf("%s-n%d", prefix, i)
			nd.Listen = fmt.Sprintf("%s%d:7100", nsNet, i+1)
			nd.Advertise = fmt.Sprintf("%s:%d", proxyHost, 7000+i)
		} else {
			ports, err := proc.FreePorts(2)
			if err != nil {
				return c, err
			}
			nd.Listen = fmt.Sprintf("127.0.0.1:%d", ports[0])
			nd.Advertise = fmt.Sprintf("%s:%d", proxyHost, ports[1])
		}
		if _, err := c.proxy.Call(Command{Op: OpRoute, Listen: nd.Advertise, Target: nd.Listen}, 5*time.Second); err != nil {
			return c, err
		}
		c.Nodes = append(c.Nodes, nd)
	}
	for i, nd := range c.Nodes {
		if err := c.startNode(nd); err != nil {
			return c, err
		}
		if opt.Started != nil {
			if err := opt.Started(c, i); err != nil {
				return c, err
			}
		}
	}
	return c, nil
}

func run(argv ...string) error {
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// setupNetns builds hub (bridge, the proxy's address) and one namespace per
// node with a veth into the bridge. Nothing is added to the root namespace.
func (c *Cluster) setupNetns(prefix string) error {
	hub := c.hubNS
	cmds := [][]string{
		{"ip", "netns", "add", hub},
		{"ip", "-n", hub, "link", "set", "lo", "up"},
		{"ip", "-n", hub, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", hub, "addr", "add", c.hubIP + "/24", "dev", "br0"},
		{"ip", "-n", hub, "link", "set", "br0", "up"},
	}
	c.nsAll = append(c.nsAll, hub)
	for i := 0; i < c.opt.Nodes; i++ {
		ns := fmt.Sprintf("%s-n%d", prefix, i)
		veth := fmt.Sprintf("v%d", i)
		cmds = append(cmds,
			[]string{"ip", "netns", "add", ns},
			[]string{"ip", "-n", ns, "link", "set", "lo", "up"},
			[]string{"ip", "-n", hub, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
			[]string{"ip", "-n", hub, "link", "set", veth, "master", "br0", "up"},
			[]string{"ip", "-n", ns, "addr", "add", fmt.Sprintf("%s%d/24", nsNet, i+1), "dev", "eth0"},
			[]string{"ip", "-n", ns, "link", "set", "eth0", "up"},
		)
	}
	for _, cmd := range cmds {
		if cmd[1] == "netns" && cmd[2] == "add" && cmd[3] != hub {
			c.nsAll = append(c.nsAll, cmd[3])
		}
		if err := run(cmd...); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) peers() string {
	var a []string
	for _, nd := range c.Nodes {
		a = append(a, nd.Advertise)
	}
	return strings.Join(a, ",")
}

func (c *Cluster) startNode(nd *NodeProc) error {
	nd.Incarnation++
	var argv []string
	if nd.NS != "" {
		argv = []string{"ip", "netns", "exec", nd.NS}
	}
	o := c.opt
	argv = append(argv, o.Binary, "-name", nd.Name, "-incarnation", strconv.Itoa(nd.Incarnation),
		"-listen", nd.Listen, "-advertise", nd.Advertise, "-peers", c.peers(),
		"-buffer", strconv.Itoa(o.Buffer), "-pool", strconv.Itoa(o.Pool),
		"-batch-interval", o.BatchInterval.String(), "-call-timeout", o.CallTimeout.String(),
		"-retry", o.Retry.String(), "-log-level", o.LogLevel)
	key := fmt.Sprintf("%s#%d", nd.Name, nd.Incarnation)
	argv = append(argv, "-record", filepath.Join(o.Dir, key+".rec"))
	if o.NodeArgs != nil {
		argv = append(argv, o.NodeArgs(nd)...)
	}
	p, _, err := StartProc(key, argv, filepath.Join(o.Dir, nd.Name+".log"), func(p *Proc, ev Event) { c.event(nd.Name, p.Name(), ev) })
	if err != nil {
		return err
	}
	nd.Proc, nd.Paused = p, false
	return nil
}

func (c *Cluster) event(node, proc string, ev Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch ev.Ev {
	case "violation":
		c.violations = append(c.violations, *ev.Violation)
		c.opt.Logf("VIOLATION on %s: %v", proc, ev.Violation)
	case "status":
		c.notePubs(ev.Pubs)
		if ev.Report != nil {
			c.finals[proc] = nodeFinal{node: node, counts: ev.Report.Counts, hwm: ev.HWMKB}
		}
	}
}

func (c *Cluster) notePubs(pubs []PubInfo) {
	for _, p := range pubs {
		if old, ok := c.pubs[p.Name]; !ok || p.Last >= old.Last {
			c.pubs[p.Name] = p
		}
	}
}

// Publishers returns every publisher ever started, with what it sent last
// as far as the harness knows (exact once it was stopped).
func (c *Cluster) Publishers() []PubInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]PubInfo, 0, len(c.pubs))
	for _, p := range c.pubs {
		out = append(out, p)
	}
	return out
}

// Records lists every process's record, the killed ones marked dead.
func (c *Cluster) Records() ([]RecordFile, error) {
	c.mu.Lock()
	dead := make(map[string]bool, len(c.killed))
	for k, v := range c.killed {
		dead[k] = v
	}
	c.mu.Unlock()
	return RecordFiles(c.opt.Dir, dead)
}

// Violations returns what the nodes' checkers reported as it happened
// (progress only: the verdict is CheckRecords').
func (c *Cluster) Violations() []test.Violation {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]test.Violation(nil), c.violations...)
}

// Sent is the number of messages all publishers sent.
func (c *Cluster) Sent() int64 {
	var n int64
	for _, p := range c.Publishers() {
		n += int64(p.Last)
	}
	return n
}

// Live returns the nodes whose process runs.
func (c *Cluster) Live() []*NodeProc {
	var out []*NodeProc
	for _, nd := range c.Nodes {
		if nd.Proc != nil {
			select {
			case <-nd.Proc.Exited():
				continue
			default:
				out = append(out, nd)
			}
		}
	}
	return out
}

// Call sends a command to node i.
func (c *Cluster) Call(i int, cmd Command) (Event, error) {
	return c.Nodes[i].Proc.Call(cmd, 15*time.Second)
}

// WaitRegistered waits until every live node's producers registered with
// every other node.
func (c *Cluster) WaitRegistered(timeout time.Duration) error {
	return poll(timeout, func() (bool, string) {
		for _, nd := range c.Nodes {
			st := nd.Proc.Status()
			if len(st.Registered) < len(c.Nodes)-1 {
				return false, fmt.Sprintf("%s registered with %v only", nd.Name, st.Registered)
			}
		}
		return true, ""
	})
}

// Poll is poll, for soaks of other modules (test/e2e's session soak).
func Poll(timeout time.Duration, cond func() (bool, string)) error { return poll(timeout, cond) }

// poll checks cond every 50 ms until it holds, or fails at the deadline
// with cond's last explanation.
func poll(timeout time.Duration, cond func() (bool, string)) error {
	var why string
	if proc.Until(timeout, 50*time.Millisecond, func() (ok bool) { ok, why = cond(); return ok }) {
		return nil
	}
	return fmt.Errorf("not true after %v: %s", timeout, why)
}

// SetProxy sets the mode of node i's proxy route (what others dial to reach
// it, and what carries the answers to its requests).
func (c *Cluster) SetProxy(i int, mode string, latency time.Duration) error {
	_, err := c.proxy.Call(Command{Op: OpMode, Listen: c.Nodes[i].Advertise, Mode: mode, LatencyMS: int(latency / time.Millisecond)}, 5*time.Second)
	return err
}

// ProxyCounters returns what node i's proxy route observed of its faults.
func (c *Cluster) ProxyCounters(i int) (ProxyCounters, error) {
	ev, err := c.proxy.Call(Command{Op: OpCounters, Listen: c.Nodes[i].Advertise}, 5*time.Second)
	if err != nil {
		return ProxyCounters{}, err
	}
	if ev.Counters == nil {
		return ProxyCounters{}, errors.New("proxy: no counters in reply")
	}
	return *ev.Counters, nil
}

// DroppedPackets sums the packet counters of node i's iptables DROP rules
// (OUTPUT chain): non-zero once a partition or loss rule dropped something.
func (c *Cluster) DroppedPackets(i int) (int64, error) {
	out, err := exec.Command("ip", "netns", "exec", c.Nodes[i].NS, "iptables", "-w", "-L", "OUTPUT", "-v", "-n", "-x").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("iptables -L: %v: %s", err, out)
	}
	var n int64
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[2] == "DROP" {
			v, err := strconv.ParseInt(f[0], 10, 64)
			if err == nil {
				n += v
			}
		}
	}
	return n, nil
}

// ProcState is the state letter of node i's process in /proc/<pid>/stat
// (R, S, T for stopped, ...).
func (c *Cluster) ProcState(i int) (string, error) { return PidState(c.Nodes[i].Proc.Pid()) }

// PidState is the state letter of process pid in /proc/<pid>/stat (R, S,
// T for stopped, ...): how a SIGSTOP is confirmed.
func PidState(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	// pid (comm) state ...: comm may hold spaces, so read after the last ')'.
	s := string(b)
	j := strings.LastIndexByte(s, ')')
	if j < 0 || j+2 >= len(s) {
		return "", fmt.Errorf("bad /proc stat %q", s)
	}
	return s[j+2 : j+3], nil
}

func (c *Cluster) iptables(i int, args ...string) error {
	return run(append([]string{"ip", "netns", "exec", c.Nodes[i].NS, "iptables", "-w"}, args...)...)
}

// Block drops every packet node from sends towards node to (a one-way
// partition: from cannot reach to; to still reaches from).
func (c *Cluster) Block(from, to int) error {
	if c.hubNS == "" {
		return errors.New("chaos: partitions need network namespaces (root)")
	}
	_, port, _ := net.SplitHostPort(c.Nodes[to].Advertise)
	return c.iptables(from, "-A", "OUTPUT", "-p", "tcp", "-d", c.hubIP, "--dport", port, "-j", "DROP")
}

// Loss drops a random fraction p of node i's outgoing packets.
func (c *Cluster) Loss(i int, p float64) error {
	if c.hubNS == "" {
		return errors.New("chaos: packet loss needs network namespaces (root)")
	}
	return c.iptables(i, "-A", "OUTPUT", "-p", "tcp", "-d", c.hubIP, "-m", "statistic", "--mode", "random",
		"--probability", strconv.FormatFloat(p, 'f', 3, 64), "-j", "DROP")
}

// HealNet removes every iptables rule and proxy fault.
func (c *Cluster) HealNet() error {
	var errs []error
	for i, nd := range c.Nodes {
		if nd.NS != "" {
			errs = append(errs, c.iptables(i, "-F", "OUTPUT"))
		}
		errs = append(errs, c.SetProxy(i, ModePass, 0))
	}
	return errors.Join(errs...)
}

// Kill kill -9s node i, keeping what it last reported.
func (c *Cluster) Kill(i int) error {
	nd := c.Nodes[i]
	if nd.Paused {
		_ = nd.Proc.Signal(syscall.SIGCONT)
	}
	c.mu.Lock()
	c.killed[nd.Proc.Name()] = true
	c.mu.Unlock()
	return nd.Proc.Kill()
}

// Restart starts a new process for node i (same addresses, next
// incarnation), runs subscribe (late collectors) and starts publishers.
func (c *Cluster) Restart(i int, subscribe func() error, pub Command) error {
	nd := c.Nodes[i]
	if err := c.startNode(nd); err != nil {
		return err
	}
	if err := subscribe(); err != nil {
		return err
	}
	if pub.Publishers > 0 {
		pub.Op = OpPublish
		if _, err := c.Call(i, pub); err != nil {
			return err
		}
	}
	return nil
}

// Pause SIGSTOPs node i; Resume SIGCONTs it.
func (c *Cluster) Pause(i int) error {
	c.Nodes[i].Paused = true
	return c.Nodes[i].Proc.Signal(syscall.SIGSTOP)
}

func (c *Cluster) Resume(i int) error {
	c.Nodes[i].Paused = false
	return c.Nodes[i].Proc.Signal(syscall.SIGCONT)
}

// DataRaces counts "WARNING: DATA RACE" reports in the processes' logs
// (nodes built with -race print them to stderr).
func (c *Cluster) DataRaces() int {
	n := 0
	files, _ := filepath.Glob(filepath.Join(c.opt.Dir, "*.log"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil {
			n += strings.Count(string(b), "WARNING: DATA RACE")
		}
	}
	return n
}

// Close stops every process and removes the namespaces. Idempotent.
func (c *Cluster) Close() {
	var wg sync.WaitGroup
	for _, nd := range c.Nodes {
		if nd.Proc == nil {
			continue
		}
		if nd.Paused {
			_ = nd.Proc.Signal(syscall.SIGCONT)
		}
		wg.Add(1)
		go func(p *Proc) { defer wg.Done(); _ = p.Quit(10 * time.Second) }(nd.Proc) // Quit kills after 10s
	}
	wg.Wait()
	if c.proxy != nil {
		_ = c.proxy.Quit(5 * time.Second)
	}
	for _, ns := range c.nsAll {
		if err := run("ip", "netns", "del", ns); err != nil {
			c.opt.Logf("cleanup: %v", err)
		}
	}
	c.nsAll = nil
}

package echopubsub_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/cluster/consul"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// Child nodes: this test binary run as one EchoPubSub node in its own
// process, for the tests about processes (start-up order, kill -9). The
// parent passes a childSpec in childEnv; the child starts its remote and its
// pubsub, subscribes one recorder to "match" right after Start (as a user
// would), prints "node ADDR", and then answers commands on stdin, one line
// each, with one line on stdout:
//
//	publish P N  -> broadcasts Stamp{P, next..next+N-1} from P, then "ok"
//	report       -> a childReport as JSON
//
// It serves until killed or until its stdin closes (the parent is gone).

const childEnv = "ECHOPUBSUB_TEST_CHILD"

type childSpec struct {
	Name        string
	Port        int
	Peers       []string // static membership, when Consul is empty
	Consul      string
	CallTimeout time.Duration // 0: fastConfig's
	BufferSize  int           // 0: fastConfig's
}

// childReport is what a child's recorder received, per publisher.
type childReport struct {
	Pubs    map[string]*pubRecord
	Expired []string // reasons of CursorExpired notices, in order
	Other   int      // anything else
}

type pubRecord struct {
	N           int
	First, Last uint64
	Ordered     bool // each seq was the previous + 1
}

func init() {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChildNode(spec))
	}
}

func runChildNode(specJSON string) int {
	log := zerolog.New(os.Stderr).With().Timestamp().Str("child", "1").Logger()
	var spec childSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		log.Error().Err(err).Msg("child: spec")
		return 2
	}
	system := actor.NewActorSystem(echopubsub.ActorSystemLogger(log.Level(zerolog.ErrorLevel)))
	r := remote.NewRemote(system, echopubsub.RemoteConfig("127.0.0.1", spec.Port, log))
	r.Start()
	var mem cluster.Membership = cluster.NewStatic(spec.Peers...)
	if spec.Consul != "" {
		c, err := consul.New(test.FastConsulConfig(spec.Consul))
		if err != nil {
			log.Error().Err(err).Msg("child: consul.New")
			return 2
		}
		mem = c
	}
	cfg := fastConfig()
	if spec.Name != "" {
		cfg.Name = spec.Name
	}
	if spec.CallTimeout > 0 {
		cfg.CallTimeout = spec.CallTimeout
	}
	if spec.BufferSize > 0 {
		cfg.BufferSize = spec.BufferSize
	}
	ps, err := echopubsub.Start(system, cfg, echopubsub.WithMembership(mem), echopubsub.WithLogger(log))
	if err != nil {
		log.Error().Err(err).Msg("child: start")
		return 2
	}
	rec := &recorder{rep: childReport{Pubs: map[string]*pubRecord{}}}
	if err := ps.Subscribe(system.Root.Spawn(actor.PropsFromFunc(rec.receive, actor.WithMailbox(echopubsub.SubscriberMailbox()))), "match"); err != nil {
		log.Error().Err(err).Msg("child: subscribe")
		return 2
	}
	fmt.Fprintf(os.Stdout, "node %s\n", system.Address())
	next := map[string]uint64{}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		switch {
		case len(f) == 3 && f[0] == "publish":
			n, _ := strconv.Atoi(f[2])
			for i := 0; i < n; i++ {
				next[f[1]]++
				if err := ps.Broadcast(nil, "match", &testpb.Stamp{Publisher: f[1], Seq: next[f[1]]}); err != nil {
					log.Error().Err(err).Msg("child: broadcast")
				}
			}
			fmt.Fprintln(os.Stdout, "ok")
		case len(f) == 1 && f[0] == "report":
			b, _ := json.Marshal(rec.report())
			fmt.Fprintf(os.Stdout, "%s\n", b)
		default:
			fmt.Fprintf(os.Stdout, "unknown command %q\n", in.Text())
		}
	}
	return 0
}

type recorder struct {
	mu  sync.Mutex
	rep childReport
}

func (r *recorder) receive(ctx actor.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch m := ctx.Message().(type) {
	case *actor.Started, *actor.Stopping, *actor.Stopped, *actor.Restarting:
	case *testpb.Stamp:
		p := r.rep.Pubs[m.Publisher]
		if p == nil {
			p = &pubRecord{First: m.Seq, Last: m.Seq - 1, Ordered: true}
			r.rep.Pubs[m.Publisher] = p
		}
		p.Ordered = p.Ordered && m.Seq == p.Last+1
		p.N, p.Last = p.N+1, m.Seq
	case *messages.CursorExpired:
		r.rep.Expired = append(r.rep.Expired, m.Node+": "+m.Reason)
	default:
		r.rep.Other++
	}
}

func (r *recorder) report() childReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, _ := json.Marshal(r.rep)
	var out childReport
	_ = json.Unmarshal(b, &out)
	return out
}

type childNode struct {
	addr  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan struct{}
	reap  sync.Once
	log   string
}

// startChild runs a node in a child process (see init) and returns once its
// pubsub's Start returned. It is killed when the test ends.
func startChild(t *testing.T, spec childSpec) *childNode {
	t.Helper()
	specJSON, _ := json.Marshal(spec)
	c := &childNode{log: filepath.Join(t.TempDir(), "child.log"), done: make(chan struct{}), lines: make(chan string, 16)}
	errFile, err := os.Create(c.log)
	if err != nil {
		t.Fatalf("child log: %v", err)
	}
	defer errFile.Close()
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), childEnv+"="+string(specJSON))
	c.cmd.Stderr = errFile
	if c.stdin, err = c.cmd.StdinPipe(); err != nil { // closed when we exit: the child follows
		t.Fatalf("child stdin: %v", err)
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("child stdout: %v", err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start child node: %v", err)
	}
	t.Cleanup(func() { c.kill(t); c.stdin.Close() })
	go func() { // ends when the child's stdout closes (it exited)
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	s := c.read(t, 15*time.Second)
	if !strings.HasPrefix(s, "node ") {
		t.Fatalf("child node did not start (said %q):\n%s", s, c.output())
	}
	c.addr = strings.TrimPrefix(s, "node ")
	return c
}

func (c *childNode) read(t *testing.T, timeout time.Duration) string {
	t.Helper()
	select {
	case s, ok := <-c.lines:
		if !ok {
			t.Fatalf("child node %s exited:\n%s", c.addr, c.output())
		}
		return s
	case <-time.After(timeout):
		t.Fatalf("child node %s: no answer within %v:\n%s", c.addr, timeout, c.output())
	}
	return ""
}

func (c *childNode) command(t *testing.T, cmd string) string {
	t.Helper()
	if _, err := fmt.Fprintln(c.stdin, cmd); err != nil {
		t.Fatalf("child node %s: %v", c.addr, err)
	}
	return c.read(t, 30*time.Second)
}

// publish broadcasts n stamps from publisher pub through this node.
func (c *childNode) publish(t *testing.T, pub string, n int) {
	t.Helper()
	if s := c.command(t, fmt.Sprintf("publish %s %d", pub, n)); s != "ok" {
		t.Fatalf("child node %s: publish answered %q", c.addr, s)
	}
}

func (c *childNode) report(t *testing.T) childReport {
	t.Helper()
	var r childReport
	if err := json.Unmarshal([]byte(c.command(t, "report")), &r); err != nil {
		t.Fatalf("child node %s: report: %v", c.addr, err)
	}
	return r
}

// kill sends SIGKILL (no deregistration, no goodbye) and waits for the
// exit. Idempotent.
func (c *childNode) kill(t *testing.T) {
	t.Helper()
	_ = c.cmd.Process.Kill()
	c.reap.Do(func() { go func() { _ = c.cmd.Wait(); close(c.done) }() }) // ends with the process
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		t.Errorf("child node %q did not exit within 10s of SIGKILL", c.addr)
	}
}

func (c *childNode) output() string {
	b, _ := os.ReadFile(c.log)
	return string(b)
}

// wantReceived polls c until it received exactly seqs from..to of each
// publisher in want, in order, with nothing else: no notice, no other
// publisher. It fails at the deadline with the last report.
func wantReceived(t *testing.T, c *childNode, want map[string][2]uint64) {
	t.Helper()
	var last childReport
	ok := func(r childReport) bool {
		if len(r.Expired) != 0 || r.Other != 0 || len(r.Pubs) > len(want) {
			return false
		}
		for pub, w := range want {
			p := r.Pubs[pub]
			if p == nil || !p.Ordered || p.First != w[0] || p.Last != w[1] || p.N != int(w[1]-w[0]+1) {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		last = c.report(t)
		if len(last.Expired) != 0 {
			t.Fatalf("node %s: false alarm: CursorExpired %q (received %s)", c.addr, last.Expired, describe(last))
		}
		if ok(last) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s: want %v, got %s", c.addr, want, describe(last))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func describe(r childReport) string {
	var b strings.Builder
	for pub, p := range r.Pubs {
		fmt.Fprintf(&b, "%s: %d messages %d..%d ordered=%v; ", pub, p.N, p.First, p.Last, p.Ordered)
	}
	fmt.Fprintf(&b, "expired %q, other %d", r.Expired, r.Other)
	return b.String()
}

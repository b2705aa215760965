package echopubsub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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
	"github.com/echopubsub/echopubsub/internal/proc"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/store/seglog"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// Child nodes: this test binary run as one EchoPubSub node in its own
// process, for the tests about processes (start-up order, kill -9). The
// parent passes a childSpec in childEnv; the child starts its remote and its
// pubsub, subscribes one recorder to "match" right after Start (as a user
// would), writes its "ready" line with its address, and then answers
// commands on stdin, in internal/proc's JSON lines:
//
//	publish {pub, n} -> broadcasts Stamp{pub, next..next+n-1} from pub
//	report           -> a childReport
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
	// Defaults: DefaultConfig's timings instead of fastConfig's (the fields
	// above still apply).
	Defaults bool
	// StoreDir, when set, is a store/seglog directory: the node's
	// node-local store. Cut names a peer this node's calls never reach
	// (test.Faults.Cut).
	StoreDir string
	Cut      string
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
	if spec.Defaults {
		cfg = echopubsub.DefaultConfig(cfg.Name)
	}
	if spec.Name != "" {
		cfg.Name = spec.Name
	}
	if spec.CallTimeout > 0 {
		cfg.CallTimeout = spec.CallTimeout
	}
	if spec.BufferSize > 0 {
		cfg.BufferSize = spec.BufferSize
	}
	opts := []echopubsub.Option{echopubsub.WithMembership(mem), echopubsub.WithLogger(log)}
	if spec.StoreDir != "" {
		s, err := seglog.Open(spec.StoreDir)
		if err != nil {
			log.Error().Err(err).Msg("child: seglog.Open")
			return 2
		}
		defer s.Close()
		opts = append(opts, echopubsub.WithStore(s))
	}
	if spec.Cut != "" {
		f := test.NewFaults()
		f.Cut(spec.Cut)
		opts = append(opts, test.WithFaultHook(f))
	}
	ps, err := echopubsub.Start(system, cfg, opts...)
	if err != nil {
		log.Error().Err(err).Msg("child: start")
		return 2
	}
	rec := &recorder{rep: childReport{Pubs: map[string]*pubRecord{}}}
	if err := ps.Subscribe(system.Root.Spawn(actor.PropsFromFunc(rec.receive, actor.WithMailbox(echopubsub.SubscriberMailbox()))), "match"); err != nil {
		log.Error().Err(err).Msg("child: subscribe")
		return 2
	}
	out := proc.NewChild(os.Stdout)
	out.Send(childEvent{Ev: proc.EvReady, Addr: system.Address()})
	next := map[string]uint64{}
	for c := range proc.Commands[childCommand](out, os.Stdin) {
		reply := childEvent{Ev: proc.EvReply, ID: c.ID}
		switch c.Op {
		case "publish":
			for i := 0; i < c.N; i++ {
				next[c.Pub]++
				if err := ps.Broadcast(nil, "match", &testpb.Stamp{Publisher: c.Pub, Seq: next[c.Pub]}); err != nil {
					log.Error().Err(err).Msg("child: broadcast")
				}
			}
		case "report":
			r := rec.report()
			reply.Report = &r
		default:
			reply.Err = fmt.Sprintf("unknown op %q", c.Op)
		}
		out.Send(reply)
	}
	return 0
}

// childCommand and childEvent are the lines of the parent and the child.
type childCommand struct {
	ID  int64  `json:"id"`
	Op  string `json:"op"`
	Pub string `json:"pub,omitempty"`
	N   int    `json:"n,omitempty"`
}

func (c *childCommand) SetID(id int64) { c.ID = id }

type childEvent struct {
	Ev     string       `json:"ev"`
	ID     int64        `json:"id,omitempty"`
	Err    string       `json:"err,omitempty"`
	Addr   string       `json:"addr,omitempty"`
	Report *childReport `json:"report,omitempty"`
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
	addr string
	p    *proc.Proc
	log  string
}

// startChild runs a node in a child process (see init) and returns once its
// pubsub's Start returned. It is killed when the test ends.
func startChild(t *testing.T, spec childSpec) *childNode {
	t.Helper()
	specJSON, _ := json.Marshal(spec)
	c := &childNode{log: filepath.Join(t.TempDir(), "child.log")}
	p, err := proc.Start(context.Background(), proc.Spec{Name: "child node", Argv: []string{os.Args[0], "-test.run=^$"},
		Env: []string{childEnv + "=" + string(specJSON)}, Log: c.log, ReadyTimeout: 15 * time.Second})
	if err != nil {
		t.Fatalf("child node did not start: %v\n%s", err, c.output())
	}
	c.p = p
	t.Cleanup(func() { c.kill(t) })
	var ready childEvent
	if err := p.Ready(&ready); err != nil {
		t.Fatalf("child node's ready line: %v", err)
	}
	c.addr = ready.Addr
	return c
}

func (c *childNode) call(t *testing.T, cmd childCommand) childEvent {
	t.Helper()
	var ev childEvent
	if err := c.p.Call(&cmd, &ev, 30*time.Second); err != nil {
		t.Fatalf("child node %s: %v\n%s", c.addr, err, c.output())
	}
	return ev
}

// publish broadcasts n stamps from publisher pub through this node.
func (c *childNode) publish(t *testing.T, pub string, n int) {
	t.Helper()
	c.call(t, childCommand{Op: "publish", Pub: pub, N: n})
}

func (c *childNode) report(t *testing.T) childReport {
	t.Helper()
	ev := c.call(t, childCommand{Op: "report"})
	if ev.Report == nil {
		t.Fatalf("child node %s: report without a report", c.addr)
	}
	return *ev.Report
}

// kill sends SIGKILL (no deregistration, no goodbye) and waits for the
// exit. Idempotent.
func (c *childNode) kill(t *testing.T) {
	t.Helper()
	if err := c.p.Kill(); err != nil {
		t.Errorf("child node %q: %v", c.addr, err)
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
	received := proc.Until(30*time.Second, 50*time.Millisecond, func() bool {
		last = c.report(t)
		if len(last.Expired) != 0 {
			t.Fatalf("node %s: false alarm: CursorExpired %q (received %s)", c.addr, last.Expired, describe(last))
		}
		return ok(last)
	})
	if !received {
		t.Fatalf("node %s: want %v, got %s", c.addr, want, describe(last))
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

package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/internal/proc"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// Store nodes: the test binary run as one EchoPubSub node with a store
// of its own (durable topics room:*; the Opener the backend's test
// package passes RunRestartChild), in its own process, stopped as
// an operator stops a node: SIGTERM, on which it stops its pubsub (Stop,
// with its drain) and then shuts its remote down, and exits. The parent
// passes a restartChildSpec in restartChildEnv; the child writes its "ready"
// line and answers, in internal/proc's JSON lines:
//
//	publish {n} -> broadcasts Stamp{its name, next..next+n-1} on room:1
//	joined      -> whether every producer registered with every peer
//	replay      -> a restartReplay of room:1 into a new session
const restartChildEnv = "ECHOPUBSUB_TEST_RESTART_CHILD"

type restartChildSpec struct {
	Name  string // the publisher name of its stamps
	Port  int
	Peers []string
	Store string
}

// restartReplay is what one replay of room:1 handed a session.
type restartReplay struct {
	Delivered int
	Pubs      map[string]*pubRecord
	Gaps      []string // "node: reason" of each StreamGap, in order
}

type restartCommand struct {
	ID int64  `json:"id"`
	Op string `json:"op"`
	N  int    `json:"n,omitempty"`
}

func (c *restartCommand) SetID(id int64) { c.ID = id }

type restartEvent struct {
	Ev     string         `json:"ev"`
	ID     int64          `json:"id,omitempty"`
	Err    string         `json:"err,omitempty"`
	Addr   string         `json:"addr,omitempty"`
	Joined bool           `json:"joined,omitempty"`
	Replay *restartReplay `json:"replay,omitempty"`
}

// RunRestartChild makes the test binary a store node of
// FullClusterRestart when it was started as one: call it from the test
// package's init (it exits the process then, and returns otherwise).
func RunRestartChild(open Opener) {
	if spec := os.Getenv(restartChildEnv); spec != "" {
		os.Exit(runRestartChild(spec, open))
	}
}

func runRestartChild(specJSON string, open Opener) int {
	log := zerolog.New(os.Stderr).With().Timestamp().Str("child", "store").Logger()
	var spec restartChildSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		log.Error().Err(err).Msg("child: spec")
		return 2
	}
	term, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	system := actor.NewActorSystem(echopubsub.ActorSystemLogger(log.Level(zerolog.ErrorLevel)))
	r := remote.NewRemote(system, echopubsub.RemoteConfig("127.0.0.1", spec.Port, log))
	r.Start()
	cfg := test.FastConfig()
	cfg.SoftQueue, cfg.HardQueue = 500, 1000
	store, err := open(spec.Store)
	if err != nil {
		log.Error().Err(err).Msg("child: open store")
		return 2
	}
	defer store.Close() // after Stop: the pubsub does not close a store it was given
	ps, err := echopubsub.Start(system, cfg, echopubsub.WithMembership(cluster.NewStatic(spec.Peers...)),
		echopubsub.WithLogger(log), echopubsub.WithDurableTopics("room:*"), echopubsub.WithStore(store))
	if err != nil {
		log.Error().Err(err).Msg("child: start")
		return 2
	}
	out := proc.NewChild(os.Stdout)
	out.Send(restartEvent{Ev: proc.EvReady, Addr: system.Address()})
	go restartChildServe(ps, system, spec, log, out) // ends with stdin (the parent is gone) or the process
	<-term.Done()
	// As an operator's node stops: the pubsub first, then the remote.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ps.Stop(ctx); err != nil {
		log.Error().Err(err).Msg("child: stop")
		return 1
	}
	r.Shutdown(true)
	return 0
}

func restartChildServe(ps *echopubsub.PubSub, system *actor.ActorSystem, spec restartChildSpec, log zerolog.Logger, out *proc.Child) {
	next := uint64(0)
	for c := range proc.Commands[restartCommand](out, os.Stdin) {
		reply := restartEvent{Ev: proc.EvReply, ID: c.ID}
		switch c.Op {
		case "publish":
			for i := 0; i < c.N; i++ {
				next++
				if err := ps.Broadcast(nil, "room:1", &testpb.Stamp{Publisher: spec.Name, Seq: next}); err != nil {
					reply.Err = err.Error()
					break
				}
			}
		case "joined":
			reply.Joined = restartChildJoined(ps, spec.Peers, system.Address())
		case "replay":
			rep, err := restartChildReplay(ps, system)
			reply.Replay = &rep
			if err != nil {
				reply.Err = err.Error()
			}
		default:
			reply.Err = fmt.Sprintf("unknown op %q", c.Op)
		}
		out.Send(reply)
	}
	log.Info().Msg("child: stdin closed")
}

func restartChildJoined(ps *echopubsub.PubSub, peers []string, self string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	groups, err := ps.Stats(ctx)
	if err != nil {
		return false
	}
	for _, g := range groups {
		for _, peer := range peers {
			found := peer == self
			for _, ns := range g.Nodes {
				found = found || (ns.Node == peer && ns.Registered)
			}
			if !found {
				return false
			}
		}
	}
	return true
}

// restartChildReplay replays room:1 into a new session and reports what its
// owner received, once it received every row the replay says it handed.
func restartChildReplay(ps *echopubsub.PubSub, system *actor.ActorSystem) (restartReplay, error) {
	var mu sync.Mutex
	rep := restartReplay{Pubs: map[string]*pubRecord{}}
	got := 0
	pid := system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		mu.Lock()
		defer mu.Unlock()
		switch m := ctx.Message().(type) {
		case *echopubsub.Envelope:
			got++
			if s, ok := m.Event.(*testpb.Stamp); ok {
				p := rep.Pubs[s.Publisher]
				if p == nil {
					p = &pubRecord{First: s.Seq, Last: s.Seq - 1, Ordered: true}
					rep.Pubs[s.Publisher] = p
				}
				p.Ordered = p.Ordered && s.Seq == p.Last+1
				p.N, p.Last = p.N+1, s.Seq
			}
		case *echopubsub.StreamGap:
			got++
			rep.Gaps = append(rep.Gaps, m.Node+": "+m.Reason)
		}
	}))
	defer system.Root.Stop(pid)
	s, err := ps.OpenSession(pid)
	if err != nil {
		return rep, err
	}
	defer func() { _ = ps.CloseSession(s.ID()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := ps.ReplaySession(ctx, s.ID(), "room:1", echopubsub.ReplayOptions{Limit: 1000})
	if err != nil {
		return rep, err
	}
	if st.Stopped {
		return rep, fmt.Errorf("replay stopped: %+v", st)
	}
	// Waits for the owner's own mailbox: the rows were handed to it.
	if !proc.Until(10*time.Second, 10*time.Millisecond, func() bool { mu.Lock(); defer mu.Unlock(); return got == st.Delivered+st.Gaps }) {
		return rep, fmt.Errorf("owner got %d of %d rows and %d gaps", got, st.Delivered, st.Gaps)
	}
	mu.Lock()
	defer mu.Unlock()
	rep.Delivered = st.Delivered
	return rep, nil
}

type restartChild struct {
	name, addr, log string
	p               *proc.Proc
}

// startRestartChild runs a store node (see runRestartChild) and returns once its
// pubsub's Start returned. It is killed when the test ends, if still there.
func startRestartChild(t *testing.T, spec restartChildSpec, log string) *restartChild {
	t.Helper()
	specJSON, _ := json.Marshal(spec)
	c := &restartChild{name: spec.Name, log: log}
	p, err := proc.Start(context.Background(), proc.Spec{Name: "store node " + spec.Name, Argv: []string{os.Args[0], "-test.run=^$"},
		Env: []string{restartChildEnv + "=" + string(specJSON)}, Log: log, ReadyTimeout: 15 * time.Second})
	if err != nil {
		t.Fatalf("store node %s did not start: %v\n%s", spec.Name, err, c.output())
	}
	c.p = p
	t.Cleanup(func() { _ = p.Kill() })
	var ready restartEvent
	if err := p.Ready(&ready); err != nil {
		t.Fatalf("store node %s's ready line: %v", spec.Name, err)
	}
	c.addr = ready.Addr
	return c
}

func (c *restartChild) call(t *testing.T, cmd restartCommand) restartEvent {
	t.Helper()
	var ev restartEvent
	if err := c.p.Call(&cmd, &ev, 30*time.Second); err != nil {
		t.Fatalf("store node %s: %v\n%s", c.name, err, c.output())
	}
	if ev.Err != "" {
		t.Fatalf("store node %s: %s: %s", c.name, cmd.Op, ev.Err)
	}
	return ev
}

// stop stops the node as an operator does (SIGTERM: Stop, then the remote)
// and waits for its exit, which must be clean.
func (c *restartChild) stop(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.p.Stop(ctx); err != nil {
		t.Fatalf("store node %s: %v\n%s", c.name, err, c.output())
	}
	if st := c.p.ExitState(); st == nil || st.ExitCode() != 0 {
		t.Fatalf("store node %s exited %v\n%s", c.name, st, c.output())
	}
	return time.Since(start)
}

func (c *restartChild) output() string {
	b, _ := os.ReadFile(c.log)
	return string(b)
}

// FullClusterRestart: three nodes, each its own process with its own
// store (open, at a path under t's temp dir), publish 60 durable messages each
// and receive the others'. Every node is then stopped in turn as an
// operator stops one (SIGTERM: Stop, then its remote is shut down), so the
// later ones drain towards peers that are gone, whose calls time out
// instead of failing fast. All three start again on their files, and once
// every producer joined every node (where a gap row would be written),
// each node's replay holds all 180 messages, each publisher's 1..60 in
// order, and no gap row: nothing was lost, so nothing is announced.
// The backend's test package calls RunRestartChild(open) from its init.
func FullClusterRestart(t *testing.T, open Opener) {
	const n, each = 3, 60
	ports, err := proc.FreePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var peers []string
	for _, p := range ports {
		peers = append(peers, fmt.Sprintf("127.0.0.1:%d", p))
	}
	runs := 0
	startAll := func() []*restartChild {
		runs++
		var nodes []*restartChild
		for i, p := range ports {
			nodes = append(nodes, startRestartChild(t, restartChildSpec{Name: fmt.Sprint("n", i), Port: p, Peers: peers,
				Store: filepath.Join(dir, fmt.Sprint("node", i, ".store"))}, filepath.Join(dir, fmt.Sprintf("node%d.run%d.log", i, runs))))
		}
		return nodes
	}
	joined := func(nodes []*restartChild) {
		for _, c := range nodes {
			if !proc.Until(20*time.Second, 50*time.Millisecond, func() bool { return c.call(t, restartCommand{Op: "joined"}).Joined }) {
				t.Fatalf("store node %s: not registered with every node\n%s", c.name, c.output())
			}
		}
	}
	complete := func(r *restartReplay) bool {
		if r.Delivered != n*each || len(r.Pubs) != n {
			return false
		}
		for _, p := range r.Pubs {
			if !p.Ordered || p.First != 1 || p.Last != each || p.N != each {
				return false
			}
		}
		return true
	}
	nodes := startAll()
	joined(nodes)
	for _, c := range nodes {
		c.call(t, restartCommand{Op: "publish", N: each})
	}
	for _, c := range nodes { // every node stored its own 60 and the others' 120
		var last *restartReplay
		if !proc.Until(20*time.Second, 100*time.Millisecond, func() bool {
			last = c.call(t, restartCommand{Op: "replay"}).Replay
			return complete(last) && len(last.Gaps) == 0
		}) {
			t.Fatalf("store node %s before the restart: %+v", c.name, last)
		}
	}
	for _, c := range nodes {
		took := c.stop(t)
		t.Logf("store node %s stopped in %v", c.name, took.Round(time.Millisecond))
	}
	nodes = startAll()
	joined(nodes)
	for _, c := range nodes {
		r := c.call(t, restartCommand{Op: "replay"}).Replay
		if len(r.Gaps) != 0 || !complete(r) {
			t.Errorf("store node %s after the restart replayed %d rows %s, gap rows %q; want %d rows, no gap", c.name, r.Delivered,
				describePubs(r.Pubs), r.Gaps, n*each)
		}
	}
}

func describePubs(pubs map[string]*pubRecord) string {
	s := ""
	for name, p := range pubs {
		s += fmt.Sprintf("%s: %d %d..%d ordered=%v; ", name, p.N, p.First, p.Last, p.Ordered)
	}
	return s
}

// pubRecord is what a replay handed of one publisher's stamps.
type pubRecord struct {
	N           int
	First, Last uint64
	Ordered     bool // each seq was the previous + 1
}

package test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/internal/faults"
	"github.com/echopubsub/echopubsub/messages"
)

// Node is one in-process EchoPubSub node on loopback.
type Node struct {
	System *actor.ActorSystem
	Remote *remote.Remote
	PS     *echopubsub.PubSub
	Addr   string
	Faults *Faults
	Log    zerolog.Logger
}

// StartRemote starts an actor system with a remote on a free loopback port.
func StartRemote(t testing.TB, log zerolog.Logger) (*actor.ActorSystem, *remote.Remote) {
	t.Helper()
	system := actor.NewActorSystem(echopubsub.ActorSystemLogger(log.Level(zerolog.ErrorLevel)))
	r := remote.NewRemote(system, echopubsub.RemoteConfig("127.0.0.1", 0, log))
	r.Start()
	return system, r
}

// StartCluster starts n nodes with cfg on static membership; the nodes stop
// when the test ends. opts apply to every node.
func StartCluster(t testing.TB, n int, cfg echopubsub.Config, opts ...echopubsub.Option) []*Node {
	t.Helper()
	log := Logger(t, zerolog.InfoLevel)
	nodes := make([]*Node, n)
	var addrs []string
	for i := range nodes {
		system, r := StartRemote(t, log)
		nodes[i] = &Node{System: system, Remote: r, Addr: system.Address(), Faults: NewFaults()}
		nodes[i].Log = log.With().Str("test_node", nodes[i].Addr).Logger()
		addrs = append(addrs, nodes[i].Addr)
	}
	for _, nd := range nodes {
		nd.Start(t, cfg, append([]echopubsub.Option{echopubsub.WithMembership(cluster.NewStatic(addrs...))}, opts...)...)
	}
	return nodes
}

// Start starts (or, after StopPubSub, restarts) the node's pubsub.
func (nd *Node) Start(t testing.TB, cfg echopubsub.Config, opts ...echopubsub.Option) {
	t.Helper()
	opts = append([]echopubsub.Option{echopubsub.WithLogger(nd.Log), WithFaultHook(nd.Faults)}, opts...)
	ps, err := echopubsub.Start(nd.System, cfg, opts...)
	if err != nil {
		t.Fatalf("start pubsub on %s: %v", nd.Addr, err)
	}
	nd.PS = ps
	t.Cleanup(func() { nd.Shutdown(t) })
}

// StopPubSub stops only the node's pubsub (its actor system keeps running).
func (nd *Node) StopPubSub(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := nd.PS.Stop(ctx); err != nil {
		t.Errorf("stop pubsub on %s: %v", nd.Addr, err)
	}
}

var shutdowns sync.Map // *Node -> struct{}: each node is shut down once

// Shutdown stops the pubsub and the remote. Idempotent.
func (nd *Node) Shutdown(t testing.TB) {
	if _, done := shutdowns.LoadOrStore(nd, struct{}{}); done {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := nd.PS.Stop(ctx); err != nil {
		t.Errorf("stop pubsub on %s: %v", nd.Addr, err)
	}
	nd.Remote.Shutdown(false)
	nd.System.Shutdown()
}

// Subscribe spawns a collector on the node subscribed to topic.
func (nd *Node) Subscribe(t testing.TB, topic string, opts ...echopubsub.SubscribeOption) *Collector {
	t.Helper()
	c := SpawnCollector(nd.System)
	if err := nd.PS.Subscribe(c.PID, topic, opts...); err != nil {
		t.Fatalf("subscribe on %s: %v", nd.Addr, err)
	}
	return c
}

// Broadcast broadcasts from the node's root context and fails the test on
// error.
func (nd *Node) Broadcast(t testing.TB, topic string, msg proto.Message) {
	t.Helper()
	if err := nd.PS.Broadcast(nil, topic, msg); err != nil {
		t.Fatalf("broadcast on %s: %v", nd.Addr, err)
	}
}

// Stats returns the node's group-0 producer view.
func (nd *Node) Stats(t testing.TB) messages.GroupStats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := nd.PS.Stats(ctx)
	if err != nil {
		t.Fatalf("stats on %s: %v", nd.Addr, err)
	}
	return st[0]
}

// NodeStats returns what nd's group-0 producer knows of node addr.
func (nd *Node) NodeStats(t testing.TB, addr string) messages.NodeStats {
	t.Helper()
	for _, ns := range nd.Stats(t).Nodes {
		if ns.Node == addr {
			return ns
		}
	}
	return messages.NodeStats{Node: addr}
}

// WaitJoined waits until every producer (every pool group) of every node
// registered with every other node. Delivery never needs it: a node is owed
// what was written after it started, joined or not. Tests about a joined
// node's cursor (lag, exact Missed counts) and benchmarks of a formed
// cluster use it.
func WaitJoined(t testing.TB, nodes []*Node) {
	t.Helper()
	joined := func(nd *Node) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		groups, err := nd.PS.Stats(ctx)
		if err != nil {
			return false
		}
		for _, g := range groups {
			for _, other := range nodes {
				found := false
				for _, ns := range g.Nodes {
					found = found || (ns.Node == other.Addr && ns.Registered)
				}
				if !found {
					return false
				}
			}
		}
		return true
	}
	for _, nd := range nodes {
		Eventually(t, 15*time.Second, func() bool { return joined(nd) }, Sprintf("%s registered with every node", nd.Addr))
	}
}

// Partition cuts node i off from every other node, in both directions, on
// the send and receive path (a fault hook, not the network).
func Partition(nodes []*Node, i int) {
	for j, nd := range nodes {
		if j == i {
			continue
		}
		nd.Faults.Cut(nodes[i].Addr)
		nodes[i].Faults.Cut(nd.Addr)
	}
}

// Heal undoes every cut.
func Heal(nodes []*Node) {
	for _, nd := range nodes {
		nd.Faults.HealAll()
	}
}

// ErrCut is the error a cut link gives a producer's send.
var ErrCut = errors.New("test: link cut")

// Faults is a faults.Hook with switchable faults.
type Faults struct {
	mu        sync.Mutex
	cut       map[string]bool
	dropRecv  int // drop the next n requests received
	panicSend bool
	batches   int
	onDeliver func(from string, cursor uint64)
	onAcked   func(from string, req proto.Message)
	onReceive func(from string, req proto.Message)
	onSend    func(node string, req proto.Message)
	version   uint32 // pinned protocol version (0: current); read at Start
	perBatch  bool   // workers answer as an earlier build (faults.PerBatch); read at Start
}

// AnswerPerBatch makes the node's next Start's workers answer as a build
// before cumulative answers: each batch through its own future, and no
// cumulative_answers in their registrations. Call it before Start.
func (f *Faults) AnswerPerBatch(on bool) {
	f.mu.Lock()
	f.perBatch = on
	f.mu.Unlock()
}

// PerBatchAnswers implements faults.PerBatch.
func (f *Faults) PerBatchAnswers() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.perBatch
}

// PinProtocolVersion makes the node's next Start a build of protocol
// version v (only messages.PreviousProtocolVersion can be pinned): a peer
// not upgraded yet, for rolling-upgrade tests. Call it before Start.
func (f *Faults) PinProtocolVersion(v uint32) {
	f.mu.Lock()
	f.version = v
	f.mu.Unlock()
}

// ProtocolVersion implements faults.Pinned.
func (f *Faults) ProtocolVersion() uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.version
}

// SetOnDeliver runs fn after each entry a worker on this node delivers (fn
// may panic to crash the worker).
func (f *Faults) SetOnDeliver(fn func(from string, cursor uint64)) {
	f.mu.Lock()
	f.onDeliver = fn
	f.mu.Unlock()
}

// SetOnAcked runs fn after a worker on this node answered a request.
func (f *Faults) SetOnAcked(fn func(from string, req proto.Message)) {
	f.mu.Lock()
	f.onAcked = fn
	f.mu.Unlock()
}

// SetOnReceive runs fn when a worker on this node gets a request, before it
// handles it (fn may block to stall the worker).
func (f *Faults) SetOnReceive(fn func(from string, req proto.Message)) {
	f.mu.Lock()
	f.onReceive = fn
	f.mu.Unlock()
}

// SetOnSend runs fn before a producer on this node sends req to node (fn
// may change req: what it leaves is what is sent, a peer of another build
// or a producer with a bug).
func (f *Faults) SetOnSend(fn func(node string, req proto.Message)) {
	f.mu.Lock()
	f.onSend = fn
	f.mu.Unlock()
}

// NewFaults returns a hook with no faults.
func NewFaults() *Faults { return &Faults{cut: map[string]bool{}} }

// Cut makes sends to, and requests from, node fail.
func (f *Faults) Cut(node string) { f.mu.Lock(); f.cut[node] = true; f.mu.Unlock() }

// HealAll removes every cut.
func (f *Faults) HealAll() { f.mu.Lock(); f.cut = map[string]bool{}; f.mu.Unlock() }

// DropReceived drops the next n requests this node's workers receive.
func (f *Faults) DropReceived(n int) { f.mu.Lock(); f.dropRecv = n; f.mu.Unlock() }

// PanicOnNextSend makes the next producer send on this node panic, which
// crashes the producer (the hook runs on its goroutine).
func (f *Faults) PanicOnNextSend() { f.mu.Lock(); f.panicSend = true; f.mu.Unlock() }

// CountBatches starts counting the batches this node's workers receive and
// returns the counter.
func (f *Faults) CountBatches() func() int {
	f.mu.Lock()
	f.batches = 0
	f.mu.Unlock()
	return func() int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.batches
	}
}

func (f *Faults) Send(node string, req proto.Message) error {
	f.mu.Lock()
	fn := f.onSend
	f.mu.Unlock()
	if fn != nil {
		fn(node, req)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.panicSend {
		f.panicSend = false
		panic("test: producer crash on send")
	}
	if f.cut[node] {
		return ErrCut
	}
	return nil
}

func (f *Faults) Receive(from string, req proto.Message) error {
	f.mu.Lock()
	fn := f.onReceive
	f.mu.Unlock()
	if fn != nil {
		fn(from, req)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := req.(*messages.Batch); ok {
		f.batches++
	}
	if f.cut[from] {
		return ErrCut
	}
	if f.dropRecv > 0 {
		f.dropRecv--
		return errors.New("test: dropped on receive")
	}
	return nil
}

func (f *Faults) Delivered(from string, cursor uint64) {
	f.mu.Lock()
	fn := f.onDeliver
	f.mu.Unlock()
	if fn != nil {
		fn(from, cursor)
	}
}

func (f *Faults) Acked(from string, req proto.Message) {
	f.mu.Lock()
	fn := f.onAcked
	f.mu.Unlock()
	if fn != nil {
		fn(from, req)
	}
}

// NewNodes starts n remotes on free loopback ports, with no pubsub yet (see
// Node.Start), and returns them with their addresses, in order.
func NewNodes(t testing.TB, n int, log zerolog.Logger) ([]*Node, []string) {
	t.Helper()
	var nodes []*Node
	var addrs []string
	for i := 0; i < n; i++ {
		system, r := StartRemote(t, log)
		nodes = append(nodes, &Node{System: system, Remote: r, Addr: system.Address(), Faults: NewFaults(), Log: log})
		addrs = append(addrs, system.Address())
	}
	return nodes, addrs
}

// WithFaultHook installs h between the pubsub's producers and workers. It
// goes through the module's internal seam (internal/faults): fault
// injection is not part of the public API.
func WithFaultHook(h faults.Hook) echopubsub.Option { return faults.Option(h).(echopubsub.Option) }

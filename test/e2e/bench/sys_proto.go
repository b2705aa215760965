package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/internal/faults"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test/testpb"
)

func nodeLog() zerolog.Logger {
	return zerolog.New(os.Stderr).Level(zerolog.WarnLevel).With().Timestamp().Logger()
}

func hostPort(addr string) (string, int, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	return h, port, err
}

// collectorProps is the collector actor: it counts payloads and notices.
func collectorProps(c *Collector, opts ...actor.PropsOption) *actor.Props {
	return actor.PropsFromFunc(func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case *testpb.Stamp:
			if m.Publisher == "ping" {
				if ctx.Sender() != nil {
					ctx.Respond(m)
				}
				return
			}
			c.Add(m.Seq, m.SentUnixNano)
		case *messages.Delivery: // EchoPubSub -encoded: the Stamp's bytes
			seq, sent, ok := stampNumbers(m.PayloadType, m.Payload)
			if !ok {
				c.Notice()
				fmt.Fprintf(os.Stderr, "collector: not a Stamp's encoding: %s %x\n", m.PayloadType, m.Payload)
				return
			}
			c.Add(seq, sent)
		case *messages.CursorExpired, *messages.BackPressure, *messages.Undecodable:
			c.Notice()
			fmt.Fprintf(os.Stderr, "collector notice: %v\n", m)
		}
	}, opts...)
}

// stampType is testpb.Stamp's full name.
var stampType = string((&testpb.Stamp{}).ProtoReflect().Descriptor().FullName())

// stampNumbers reads a Stamp's seq and sent_unix_nano from its encoding
// without decoding it (no allocation), as a subscriber that passes bytes
// on would read a key: what the -encoded collector costs instead of a
// decode.
func stampNumbers(typeName string, b []byte) (seq uint64, sent int64, ok bool) {
	if typeName != stampType {
		return 0, 0, false
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, 0, false
		}
		b = b[n:]
		if typ == protowire.VarintType && (num == 2 || num == 4) {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, 0, false
			}
			if num == 2 {
				seq = v
			} else {
				sent = int64(v)
			}
			b = b[n:]
			continue
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return 0, 0, false
		}
		b = b[n:]
	}
	return seq, sent, true
}

// ---- EchoPubSub ----

type ours struct {
	system *actor.ActorSystem
	remote *remote.Remote
	ps     *echopubsub.PubSub
	peers  int
}

// startOurs starts EchoPubSub; with a tracer (-trace-tail) it is the fault
// hook and records the producer's Flushed events.
func startOurs(cfg nodeConfig, coll *Collector, tr *tailTracer) (system, error) {
	log := nodeLog()
	host, port, err := hostPort(cfg.Addrs[cfg.Index])
	if err != nil {
		return nil, err
	}
	sys := actor.NewActorSystem(echopubsub.ActorSystemLogger(log))
	r := remote.NewRemote(sys, echopubsub.RemoteConfig(host, port, log))
	r.Start()
	c := echopubsub.DefaultConfig("bench")
	c.PoolSize = 1
	c.BufferSize = cfg.Buffer
	c.BatchInterval = cfg.BatchInterval
	c.MaxQueueLen = 1 << 30 // the collector is never dropped for
	if cfg.MaxBatchMessages > 0 {
		c.MaxBatchMessages = cfg.MaxBatchMessages
	}
	if cfg.MaxPendingWrites > 0 {
		c.MaxPendingWrites = cfg.MaxPendingWrites
	}
	if cfg.AckInterval != nil {
		c.AckInterval = *cfg.AckInterval
	}
	if cfg.MaxBatchesInFlight > 0 {
		c.MaxBatchesInFlight = cfg.MaxBatchesInFlight
	}
	opts := []echopubsub.Option{echopubsub.WithMembership(cluster.NewStatic(cfg.Addrs...)), echopubsub.WithLogger(log)}
	if tr != nil {
		opts = append(opts, faults.Option(tr).(echopubsub.Option))
		sys.EventStream.Subscribe(tr.flushed)
	}
	ps, err := echopubsub.Start(sys, c, opts...)
	if err != nil {
		r.Shutdown(false)
		return nil, err
	}
	pid := sys.Root.Spawn(collectorProps(coll, actor.WithMailbox(echopubsub.SubscriberMailbox())))
	subOpts := []echopubsub.SubscribeOption{echopubsub.WithMaxQueueLen(1 << 30)}
	if cfg.Encoded {
		subOpts = append(subOpts, echopubsub.WithFormat(echopubsub.FormatEncoded))
	}
	if err := ps.Subscribe(pid, topic, subOpts...); err != nil {
		return nil, err
	}
	return &ours{system: sys, remote: r, ps: ps, peers: len(cfg.Addrs)}, nil
}

func (o *ours) ready() (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	gs, err := o.ps.Stats(ctx)
	if err != nil {
		return false, err.Error()
	}
	for _, g := range gs {
		reg := 0
		for _, n := range g.Nodes {
			if n.Registered && !n.Absent {
				reg++
			}
		}
		if reg != o.peers {
			return false, fmt.Sprintf("group %d registered with %d of %d nodes", g.Group, reg, o.peers)
		}
	}
	return true, ""
}

func (o *ours) publish(_ int, m *testpb.Stamp) error { return o.ps.Broadcast(nil, topic, m) }

func (o *ours) flush() error { return nil }

func (o *ours) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = o.ps.Stop(ctx)
	o.remote.Shutdown(false)
}

// ---- raw protoactor remote: one message per payload, fire and forget ----

// rawNode is what the raw protoactor systems share: an actor system with
// EchoPubSub's RemoteConfig, this node's collector, and the actor on every
// node (this one's local) that publish reaches and ready pings.
type rawNode struct {
	system *actor.ActorSystem
	remote *remote.Remote
	local  *actor.PID   // this node's collector
	pids   []*actor.PID // every node's entry actor, this one's local
}

const rawCollector = "bench-collector"

func startRawNode(cfg nodeConfig, coll *Collector, opts ...remote.ConfigOption) (*rawNode, error) {
	log := nodeLog()
	host, port, err := hostPort(cfg.Addrs[cfg.Index])
	if err != nil {
		return nil, err
	}
	sys := actor.NewActorSystem(echopubsub.ActorSystemLogger(log))
	r := remote.NewRemote(sys, echopubsub.RemoteConfig(host, port, log, opts...))
	r.Start()
	local, err := sys.Root.SpawnNamed(collectorProps(coll), rawCollector)
	if err != nil {
		r.Shutdown(false)
		return nil, err
	}
	return &rawNode{system: sys, remote: r, local: local}, nil
}

// reach sets pids: every node's actor called name, this node's own.
func (n *rawNode) reach(cfg nodeConfig, own *actor.PID, name string) {
	for i, a := range cfg.Addrs {
		if i == cfg.Index {
			n.pids = append(n.pids, own)
		} else {
			n.pids = append(n.pids, actor.NewPID(a, name))
		}
	}
}

// ready pings every node's collector through its entry actor.
func (n *rawNode) ready() (bool, string) {
	for _, p := range n.pids {
		if _, err := n.system.Root.RequestFuture(p, &testpb.Stamp{Publisher: "ping"}, 2*time.Second).Result(); err != nil {
			return false, fmt.Sprintf("ping %s: %v", p.Address, err)
		}
	}
	return true, ""
}

func (n *rawNode) flush() error { return nil }

func (n *rawNode) close() { n.remote.Shutdown(false) }

// raw sends each message to every node's collector.
type raw struct{ *rawNode }

func startRaw(cfg nodeConfig, coll *Collector) (system, error) {
	n, err := startRawNode(cfg, coll)
	if err != nil {
		return nil, err
	}
	n.reach(cfg, n.local, rawCollector)
	return raw{n}, nil
}

func (r raw) publish(_ int, m *testpb.Stamp) error {
	for _, p := range r.pids {
		r.system.Root.Send(p, m)
	}
	return nil
}

// ---- raw protoactor remote with EchoPubSub's two actor hops ----

// relay is raw protoactor with one more actor on each side of the wire,
// where EchoPubSub has its producer (on the publishing node) and its worker
// (on the receiving node): publish → the node's out actor → the wire → the
// receiving node's in actor → its collector. Still one message per payload,
// fire and forget: no batching, no cursor, no acknowledgement. Against raw
// it measures what the two hops alone cost the tail; against EchoPubSub,
// what is left of EchoPubSub's own protocol.
type relay struct {
	*rawNode // pids: every node's in actor
	out      *actor.PID
}

const (
	relayOut = "bench-relay-out"
	relayIn  = "bench-relay-in"
)

func startRelay(cfg nodeConfig, coll *Collector) (system, error) {
	n, err := startRawNode(cfg, coll)
	if err != nil {
		return nil, err
	}
	rl := &relay{rawNode: n}
	in, err := n.system.Root.SpawnNamed(actor.PropsFromFunc(func(ctx actor.Context) {
		if _, ok := ctx.Message().(*testpb.Stamp); ok {
			ctx.Forward(n.local) // the sender travels: a ping is answered by the collector
		}
	}), relayIn)
	if err == nil {
		n.reach(cfg, in, relayIn)
		rl.out, err = n.system.Root.SpawnNamed(actor.PropsFromFunc(func(ctx actor.Context) {
			if m, ok := ctx.Message().(*testpb.Stamp); ok {
				for _, p := range n.pids {
					ctx.Send(p, m)
				}
			}
		}), relayOut)
	}
	if err != nil {
		n.close()
		return nil, err
	}
	return rl, nil
}

func (r *relay) publish(_ int, m *testpb.Stamp) error {
	r.system.Root.Send(r.out, m)
	return nil
}

// ---- protoactor cluster PubSub (BatchingProducer) ----

// staticProvider is a cluster provider with a fixed member list: every node
// is given every address (the automanaged provider needs an HTTP server
// per node and a dependency the module does not have).
type staticProvider struct{ addrs []string }

func (p *staticProvider) StartMember(c *pcluster.Cluster) error {
	var members pcluster.Members
	for _, a := range p.addrs {
		h, port, err := hostPort(a)
		if err != nil {
			return err
		}
		members = append(members, &pcluster.Member{Id: a, Host: h, Port: int32(port), Kinds: c.GetClusterKinds()})
	}
	c.MemberList.UpdateClusterTopology(members)
	return nil
}
func (p *staticProvider) StartClient(*pcluster.Cluster) error { return nil }
func (p *staticProvider) Shutdown(bool) error                 { return nil }

type clusterPS struct {
	c         *pcluster.Cluster
	producers []*pcluster.BatchingProducer
	last      []*pcluster.ProduceProcessInfo
	coll      *actor.PID
	n         int
	subbed    bool
}

func startCluster(cfg nodeConfig, coll *Collector) (system, error) {
	log := nodeLog()
	host, port, err := hostPort(cfg.Addrs[cfg.Index])
	if err != nil {
		return nil, err
	}
	sys := actor.NewActorSystem(echopubsub.ActorSystemLogger(log))
	rc := echopubsub.RemoteConfig(host, port, log)
	ccfg := pcluster.Configure("bench", &staticProvider{addrs: cfg.Addrs}, disthash.New(), rc,
		pcluster.WithRequestTimeout(5*time.Second))
	c := pcluster.New(sys, ccfg)
	c.StartMember()
	cp := &clusterPS{c: c, n: len(cfg.Addrs), coll: sys.Root.Spawn(collectorProps(coll))}
	for i := 0; i < max(cfg.Pubs, 1); i++ {
		cp.producers = append(cp.producers, c.BatchingProducer(topic, pcluster.WithBatchingProducerPublishTimeout(30*time.Second)))
	}
	cp.last = make([]*pcluster.ProduceProcessInfo, len(cp.producers))
	return cp, nil
}

func (cp *clusterPS) ready() (bool, string) {
	if n := cp.c.MemberList.Members().Len(); n != cp.n {
		return false, fmt.Sprintf("%d of %d members", n, cp.n)
	}
	if !cp.subbed {
		if _, err := cp.c.SubscribeByPid(topic, cp.coll); err != nil {
			return false, "subscribe: " + err.Error()
		}
		cp.subbed = true
	}
	return true, ""
}

func (cp *clusterPS) publish(pub int, m *testpb.Stamp) error {
	info, err := cp.producers[pub].Produce(context.Background(), m)
	if err != nil {
		return err
	}
	cp.last[pub] = info
	return nil
}

func (cp *clusterPS) flush() error {
	for _, info := range cp.last {
		if info == nil {
			continue
		}
		select {
		case <-info.Finished:
			if info.Err != nil {
				return info.Err
			}
		case <-time.After(60 * time.Second):
			return fmt.Errorf("batching producer did not finish in 60s")
		}
	}
	return nil
}

func (cp *clusterPS) close() {
	for _, p := range cp.producers {
		p.Dispose()
	}
	cp.c.Shutdown(false)
}

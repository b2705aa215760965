package main

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// ---- raw protoactor remote, batched: the floor of any batching design ----

// batcher is the least a batching pub/sub on protoactor remote does per
// message: the publishing node's out actor encodes each Stamp and gathers
// the encodings into one StampBatch per turn of its mailbox (it sends itself
// a flush behind the first Stamp of a batch, as EchoPubSub's producer does
// at BatchInterval 0), at most batchMax each; the receiving node's in actor
// decodes each Stamp and posts it to its collector. Fire and forget: no
// ring, no cursor, no acknowledgement, no topic, no dedupe. Its CPU per
// delivery is what is left when EchoPubSub's own protocol is taken away.
type batcher struct {
	system *actor.ActorSystem
	remote *remote.Remote
	out    *actor.PID
	ins    []*actor.PID // every node's in actor, this one's local
}

const (
	batchOut = "bench-batch-out"
	batchIn  = "bench-batch-in"
	batchMax = 10_000 // EchoPubSub's default MaxBatchMessages
)

type batchFlush struct{}

func startBatcher(cfg nodeConfig, coll *Collector) (system, error) {
	log := nodeLog()
	host, port, err := hostPort(cfg.Addrs[cfg.Index])
	if err != nil {
		return nil, err
	}
	sys := actor.NewActorSystem(echopubsub.ActorSystemLogger(log))
	r := remote.NewRemote(sys, echopubsub.RemoteConfig(host, port, log))
	r.Start()
	local, err := sys.Root.SpawnNamed(collectorProps(coll), rawCollector)
	if err != nil {
		return nil, err
	}
	in, err := sys.Root.SpawnNamed(actor.PropsFromFunc(func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case *testpb.Stamp: // a ping: the collector answers the sender
			ctx.Forward(local)
		case *testpb.StampBatch:
			for _, b := range m.Stamps {
				s := &testpb.Stamp{}
				if err := proto.Unmarshal(b, s); err != nil {
					coll.Notice()
					continue
				}
				ctx.Send(local, s)
			}
		}
	}), batchIn)
	if err != nil {
		return nil, err
	}
	bt := &batcher{system: sys, remote: r}
	var remotes []*actor.PID
	for i, a := range cfg.Addrs {
		if i == cfg.Index {
			bt.ins = append(bt.ins, in)
		} else {
			p := actor.NewPID(a, batchIn)
			bt.ins = append(bt.ins, p)
			remotes = append(remotes, p)
		}
	}
	var pending [][]byte
	send := func(ctx actor.Context) {
		if len(pending) == 0 {
			return
		}
		b := &testpb.StampBatch{Stamps: pending}
		for _, p := range remotes {
			ctx.Send(p, b)
		}
		pending = nil
	}
	bt.out, err = sys.Root.SpawnNamed(actor.PropsFromFunc(func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case *testpb.Stamp:
			ctx.Send(local, m) // this node's subscriber: no wire, as EchoPubSub
			b, err := proto.Marshal(m)
			if err != nil {
				coll.Notice()
				return
			}
			if len(pending) == 0 {
				ctx.Send(ctx.Self(), batchFlush{})
			}
			pending = append(pending, b)
			if len(pending) == batchMax {
				send(ctx)
			}
		case batchFlush:
			send(ctx)
		}
	}), batchOut)
	if err != nil {
		return nil, err
	}
	return bt, nil
}

// ready pings every node's collector through its in actor.
func (b *batcher) ready() (bool, string) {
	for _, p := range b.ins {
		if _, err := b.system.Root.RequestFuture(p, &testpb.Stamp{Publisher: "ping"}, 2*time.Second).Result(); err != nil {
			return false, fmt.Sprintf("ping %s: %v", p.Address, err)
		}
	}
	return true, ""
}

func (b *batcher) publish(_ int, m *testpb.Stamp) error {
	b.system.Root.Send(b.out, m)
	return nil
}

func (b *batcher) flush() error { return nil }

func (b *batcher) close() { b.remote.Shutdown(false) }

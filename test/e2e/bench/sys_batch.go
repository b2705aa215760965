package main

import (
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// ---- raw protoactor remote, batched: the floor of any batching design ----

// batcher is the least a batching pub/sub on protoactor remote does per
// message, arranged as EchoPubSub arranges it: the publishing goroutine
// encodes its Stamp and appends the encoding, after its length, to the
// node's pending batch (under a mutex, where EchoPubSub's Broadcast writes
// into its ring), a new one after batchMax Stamps or batchMaxBytes (as
// EchoPubSub's MaxBatchMessages and MaxBatchBytes); the first append after
// the out actor took what was pending wakes it again, and it sends every
// batch pending, in order, one StampBatch each (as EchoPubSub's producer
// does at BatchInterval 0);
// the receiving node's in actor decodes each Stamp from the batch's bytes
// and posts it to its collector. Fire and forget: no ring, no cursor, no
// acknowledgement, no topic, no dedupe. Its CPU per delivery is what is
// left when EchoPubSub's own protocol is taken away.
type batcher struct {
	system *actor.ActorSystem
	remote *remote.Remote
	local  *actor.PID // this node's collector
	out    *actor.PID
	ins    []*actor.PID // every node's in actor, this one's local

	mu      sync.Mutex
	full    [][]byte // batches of batchMax Stamps, oldest first
	pending []byte   // varint length, Stamp encoding, ...
	count   int      // Stamps in pending
	woken   bool     // a batchFlush is on its way to the out actor
}

const (
	batchOut      = "bench-batch-out"
	batchIn       = "bench-batch-in"
	batchMax      = 10_000  // EchoPubSub's default MaxBatchMessages
	batchMaxBytes = 1 << 20 // EchoPubSub's default MaxBatchBytes
	// batchFrame bounds the batches protoactor's endpoint writer packs
	// into one gRPC message: fire and forget has no window, and a backlog
	// of 1 MiB batches packed by the default 1,000 would pass gRPC's
	// limit, which tears the stream down (EchoPubSub's window of 4 keeps
	// its frames under it).
	batchFrame = 4
)

// batchFlush wakes the out actor: something is pending.
type batchFlush struct{}

func startBatcher(cfg nodeConfig, coll *Collector) (system, error) {
	log := nodeLog()
	host, port, err := hostPort(cfg.Addrs[cfg.Index])
	if err != nil {
		return nil, err
	}
	sys := actor.NewActorSystem(echopubsub.ActorSystemLogger(log))
	r := remote.NewRemote(sys, echopubsub.RemoteConfig(host, port, log, remote.WithEndpointWriterBatchSize(batchFrame)))
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
			for b := m.Stamps; len(b) > 0; {
				e, n := protowire.ConsumeBytes(b)
				if n < 0 {
					coll.Notice()
					return
				}
				b = b[n:]
				s := &testpb.Stamp{}
				if err := proto.Unmarshal(e, s); err != nil {
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
	bt := &batcher{system: sys, remote: r, local: local}
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
	bt.out, err = sys.Root.SpawnNamed(actor.PropsFromFunc(func(ctx actor.Context) {
		if _, ok := ctx.Message().(batchFlush); !ok {
			return
		}
		bt.mu.Lock()
		batches := append(bt.full, bt.pending)
		bt.full, bt.pending, bt.count, bt.woken = nil, nil, 0, false
		bt.mu.Unlock()
		for _, s := range batches {
			if len(s) == 0 {
				continue
			}
			b := &testpb.StampBatch{Stamps: s}
			for _, p := range remotes {
				ctx.Send(p, b)
			}
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
	e, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	b.system.Root.Send(b.local, m) // this node's subscriber: no wire, as EchoPubSub
	b.mu.Lock()
	b.pending = protowire.AppendBytes(b.pending, e)
	if b.count++; b.count == batchMax || len(b.pending) >= batchMaxBytes {
		b.full, b.pending, b.count = append(b.full, b.pending), nil, 0
	}
	wake := !b.woken
	b.woken = true
	b.mu.Unlock()
	if wake {
		b.system.Root.Send(b.out, batchFlush{})
	}
	return nil
}

func (b *batcher) flush() error { return nil }

func (b *batcher) close() { b.remote.Shutdown(false) }

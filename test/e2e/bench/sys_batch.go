package main

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

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
	*rawNode // pids: every node's in actor
	out      *actor.PID

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
	n, err := startRawNode(cfg, coll, remote.WithEndpointWriterBatchSize(batchFrame))
	if err != nil {
		return nil, err
	}
	bt := &batcher{rawNode: n}
	if err := bt.spawn(cfg, coll); err != nil {
		n.close()
		return nil, err
	}
	return bt, nil
}

// spawn starts the in and out actors.
func (bt *batcher) spawn(cfg nodeConfig, coll *Collector) error {
	local := bt.local
	in, err := bt.system.Root.SpawnNamed(actor.PropsFromFunc(func(ctx actor.Context) {
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
		return err
	}
	bt.reach(cfg, in, batchIn)
	var remotes []*actor.PID
	for i, p := range bt.pids {
		if i != cfg.Index {
			remotes = append(remotes, p)
		}
	}
	bt.out, err = bt.system.Root.SpawnNamed(actor.PropsFromFunc(func(ctx actor.Context) {
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
	return err
}

func (bt *batcher) publish(_ int, m *testpb.Stamp) error {
	e, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	bt.system.Root.Send(bt.local, m) // this node's subscriber: no wire, as EchoPubSub
	bt.mu.Lock()
	bt.pending = protowire.AppendBytes(bt.pending, e)
	if bt.count++; bt.count == batchMax || len(bt.pending) >= batchMaxBytes {
		bt.full, bt.pending, bt.count = append(bt.full, bt.pending), nil, 0
	}
	wake := !bt.woken
	bt.woken = true
	bt.mu.Unlock()
	if wake {
		bt.system.Root.Send(bt.out, batchFlush{})
	}
	return nil
}

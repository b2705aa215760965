package stream

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub/actors/delivery"
	"github.com/echopubsub/echopubsub/internal/core"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/messages"
)

// The worker fuzz targets drive a real worker (built by newWorker, with a
// real Dispatcher and one subscriber on topic "t") through Receive with any
// sequence of Register, Batch and Expire, and check on every step:
//
//   - it never panics and answers every request with the right ack type;
//     a rejection carries its reason;
//   - per producer node, the cursors it hands to subscribers increase by
//     exactly one within an incarnation, and any jump, and any change of
//     incarnation after a delivery, is preceded by a CursorExpired to the
//     subscribers. Never a silent gap, never a redelivery;
//   - a CursorExpired whose range is known (messages.CursorExpired.RangeKnown)
//     says exactly what the subscribers did not get: its From is the cursor
//     after the last one delivered of that incarnation (or the previous
//     notice's To), and the next cursor delivered of it is its To.

// fakeCtx is the part of actor.Context the worker uses; anything else
// panics (nil embedded interface), which the fuzzer would report.
type fakeCtx struct {
	actor.Context
	msg    interface{}
	sender *actor.PID
	res    interface{}
}

func (c *fakeCtx) Message() interface{}    { return c.msg }
func (c *fakeCtx) Sender() *actor.PID      { return c.sender }
func (c *fakeCtx) Respond(res interface{}) { c.res = res }

// model records what the worker did, through its hook and its log.
type model struct {
	mu        sync.Mutex
	inc       uint64 // incarnation of the request being handled
	last      map[string]uint64
	lastInc   map[string]uint64
	delivered map[string]bool
	expiredAt map[string]int // expiries per node since its last delivery
	// next is, per producer node, the incarnation and the cursor the
	// subscribers get next of it (after a delivery, or a CursorExpired of
	// known range); absent after a notice of unknown range.
	next map[string][2]uint64
	err  error
}

func (m *model) Send(string, proto.Message) error    { return nil }
func (m *model) Receive(string, proto.Message) error { return nil }
func (m *model) Acked(string, proto.Message)         {}

func (m *model) Delivered(from string, c uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	told := m.expiredAt[from] > 0
	switch {
	case !m.delivered[from]:
	case m.lastInc[from] != m.inc && !told:
		m.fail("producer %s: incarnation %d -> %d without CursorExpired", from, m.lastInc[from], m.inc)
	case m.lastInc[from] == m.inc && c <= m.last[from]:
		m.fail("producer %s: cursor %d delivered again after %d", from, c, m.last[from])
	case m.lastInc[from] == m.inc && c != m.last[from]+1 && !told:
		m.fail("producer %s: silent gap %d -> %d", from, m.last[from], c)
	}
	if n, ok := m.next[from]; ok && n[0] == m.inc && c != n[1] && (c > m.last[from] || m.lastInc[from] != m.inc) {
		m.fail("producer %s incarnation %d: delivered cursor %d where %d was next (the last delivery or notice's To)", from, m.inc, c, n[1])
	}
	m.delivered[from], m.last[from], m.lastInc[from], m.expiredAt[from] = true, c, m.inc, 0
	m.next[from] = [2]uint64{m.inc, c + 1}
}

func (m *model) fail(format string, args ...interface{}) {
	if m.err == nil {
		m.err = fmt.Errorf(format, args...)
	}
}

// Write receives the dispatcher's log: "cursor expired" lines name the
// producer node the subscribers were told about.
func (m *model) Write(p []byte) (int, error) {
	var line struct {
		Producer    string `json:"producer"`
		Message     string `json:"message"`
		Incarnation uint64 `json:"incarnation"`
		From        uint64 `json:"from"`
		To          uint64 `json:"to"`
	}
	if json.Unmarshal(p, &line) == nil && line.Message == "cursor expired: subscribers told to reload" {
		m.mu.Lock()
		m.expiredAt[line.Producer]++
		ce := &messages.CursorExpired{ProducerIncarnation: line.Incarnation, From: line.From, To: line.To}
		n, ok := m.next[line.Producer]
		switch {
		case !ce.RangeKnown():
			delete(m.next, line.Producer)
		case ok && n[0] == ce.ProducerIncarnation && ce.From != n[1]:
			m.fail("producer %s incarnation %d: notice range [%d, %d) where %d was next", line.Producer, ce.ProducerIncarnation, ce.From, ce.To, n[1])
		default:
			m.next[line.Producer] = [2]uint64{ce.ProducerIncarnation, ce.To}
		}
		m.mu.Unlock()
	}
	return len(p), nil
}

var fuzzSystem = sync.OnceValues(func() (*actor.ActorSystem, *actor.PID) {
	system := actor.NewActorSystem()
	pid := system.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {})) // a subscriber that discards
	return system, pid
})

type fuzzWorker struct {
	w     actor.Actor
	m     *model
	cfg   core.Config
	group uint32
}

func newFuzzWorker() *fuzzWorker {
	system, sink := fuzzSystem()
	m := &model{last: map[string]uint64{}, lastInc: map[string]uint64{}, delivered: map[string]bool{}, expiredAt: map[string]int{},
		next: map[string][2]uint64{}}
	log := zerolog.New(m)
	d := delivery.NewDispatcher(system, system.Address(), log)
	delivery.NewRegistry(d, 1<<30)() // the registry the Apply below makes its change in
	if _, err := d.Apply(actor.NewPID(system.Address(), "registry"), &delivery.Subscribe{PID: sink, Topic: "t",
		Opts: delivery.SubOptions{Unbounded: true}}); err != nil {
		panic(err)
	}
	cfg := testConfig("fz")
	return &fuzzWorker{w: newWorker(cfg, 1, "worker-node", 7, time.Now(), d, m, noopMetrics(cfg), log)(), m: m, cfg: cfg, group: 1}
}

// handle sends req through Receive and checks the answer.
func (f *fuzzWorker) handle(t *testing.T, req proto.Message, inc uint64) {
	f.m.mu.Lock()
	f.m.inc = inc
	f.m.mu.Unlock()
	ctx := &fakeCtx{msg: req, sender: actor.NewPID("producer", "p")}
	f.w.Receive(ctx)
	var status messages.AckStatus
	var errText string
	switch req.(type) {
	case *messages.Register:
		ack, ok := ctx.res.(*messages.RegisterAck)
		if !ok {
			t.Fatalf("%T answered with %T", req, ctx.res)
		}
		status, errText = ack.Status, ack.Error
	default:
		ack, ok := ctx.res.(*messages.BatchAck)
		if !ok {
			t.Fatalf("%T answered with %T", req, ctx.res)
		}
		status, errText = ack.Status, ack.Error
	}
	if status == messages.AckStatus_ACK_STATUS_UNSPECIFIED {
		t.Fatalf("%T answered with an unspecified status", req)
	}
	if status == messages.AckStatus_ACK_STATUS_REJECTED && errText == "" {
		t.Fatalf("%T rejected without a reason", req)
	}
	f.m.mu.Lock()
	err := f.m.err
	f.m.mu.Unlock()
	if err != nil {
		t.Fatalf("after %v: %v", req, err)
	}
}

// ops decodes data as a sequence of small requests, so the fuzzer explores
// orderings (registrations, restarts, holes, replays) rather than bytes.
func (f *fuzzWorker) ops(data []byte) []struct {
	req proto.Message
	inc uint64
} {
	var out []struct {
		req proto.Message
		inc uint64
	}
	for len(data) >= 6 {
		op, data0 := data[:6], data[6:]
		data = data0
		node := fmt.Sprintf("p%d", op[0]%3)
		inc := uint64(op[1]%3 + 1)
		cursor := uint64(binary.LittleEndian.Uint16(op[2:4]) % 64)
		n := int(op[4] % 6)
		flags := op[5]
		version, name, group := uint32(messages.ProtocolVersion), f.cfg.Name, f.group
		switch flags >> 5 {
		case 1:
			version = messages.ProtocolVersion + 1
		case 2:
			name = "other"
		case 3:
			group = 0
		case 4:
			node = ""
		case 5:
			cursor = math.MaxUint64 - 1 // overflow with 2+ entries
		case 6:
			version = messages.PreviousProtocolVersion // a node not upgraded yet: version 1's meaning
		}
		var req proto.Message
		switch op[0] / 3 % 3 {
		case 0:
			req = &messages.Register{ProtocolVersion: version, PubsubName: name, ProducerNode: node, ProducerIncarnation: inc,
				Group: group, NextCursor: cursor, MissedWrites: flags&1 == 1, Join: flags&8 == 0, WorkerIncarnation: 7 + uint64(flags>>4&1)}
		case 1:
			b := &messages.Batch{ProtocolVersion: version, PubsubName: name, ProducerNode: node, ProducerIncarnation: inc,
				Group: group, FirstCursor: cursor}
			for i := 0; i < n; i++ {
				e := &messages.Entry{Topic: "t", PayloadType: "echopubsub.v1.CursorExpired", Payload: []byte{0x08, byte(i)}}
				if flags&2 != 0 && i == 0 {
					e.PayloadType = "no.such.Type" // undecodable: still delivered (as Undecodable), never skipped
				}
				if flags&4 != 0 && i == 1 {
					e.OnlyNode = "another-node" // acknowledged, not delivered
				}
				b.AddEntry(e)
			}
			req = b
		default:
			req = &messages.Expire{ProtocolVersion: version, PubsubName: name, ProducerNode: node, ProducerIncarnation: inc,
				Group: group, Missed: uint64(n), NextCursor: cursor}
		}
		out = append(out, struct {
			req proto.Message
			inc uint64
		}{req, inc})
	}
	return out
}

func FuzzWorkerSequence(f *testing.F) {
	f.Add([]byte{0, 0, 5, 0, 0, 0, 3, 0, 5, 0, 3, 0, 3, 0, 9, 0, 2, 0})                               // register, batch, batch with a hole
	f.Add([]byte{0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 1, 0, 0, 0, 0, 3, 1, 0, 0, 4, 0})             // restart
	f.Add([]byte{0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 4, 0, 6, 0, 20, 0, 3, 0, 3, 0, 2, 0, 4, 0})            // expire, replay
	f.Add([]byte{0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 4, 0xa0})                                              // overflow
	f.Add([]byte{0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 4, 0, 6, 0, 20, 0, 3, 0, 3, 0, 20, 0, 2, 0})           // expire, then the batch at its To
	f.Add([]byte{0, 0, 0, 0, 0, 0xc0, 3, 0, 0, 0, 4, 0xc0, 0, 0, 9, 0, 0, 0xc0, 3, 0, 9, 0, 2, 0xc0}) // version 1: a skip, then its To
	f.Fuzz(func(t *testing.T, data []byte) {
		fw := newFuzzWorker()
		for _, op := range fw.ops(data) {
			fw.handle(t, op.req, op.inc)
		}
	})
}

// FuzzWorkerWire feeds the worker a registration and then whatever bytes
// decode as a Batch, Register or Expire: any field value a peer can send.
func FuzzWorkerWire(f *testing.F) {
	b := &messages.Batch{ProtocolVersion: messages.ProtocolVersion, PubsubName: "fz", ProducerNode: "p0", ProducerIncarnation: 1, Group: 1, FirstCursor: 3}
	b.AddEntry(&messages.Entry{Topic: "t", PayloadType: "x", Payload: []byte{1}})
	b.AddEntry(&messages.Entry{Topic: "t", PayloadType: "echopubsub.v1.CursorExpired", Payload: []byte{8, 1}, OnlyNode: "worker-node"})
	seed, _ := proto.Marshal(b)
	f.Add(byte(1), seed)
	seed, _ = proto.Marshal(&messages.Register{ProtocolVersion: messages.ProtocolVersion, PubsubName: "fz", ProducerNode: "p0", ProducerIncarnation: 2, Group: 1, NextCursor: 9})
	f.Add(byte(0), seed)
	seed, _ = proto.Marshal(&messages.Expire{ProtocolVersion: messages.ProtocolVersion, PubsubName: "fz", ProducerNode: "p0", ProducerIncarnation: 1, Group: 1, NextCursor: 99, Missed: 5})
	f.Add(byte(2), seed)
	f.Fuzz(func(t *testing.T, kind byte, data []byte) {
		fw := newFuzzWorker()
		fw.handle(t, &messages.Register{ProtocolVersion: messages.ProtocolVersion, PubsubName: "fz", ProducerNode: "p0", ProducerIncarnation: 1, Group: 1, Join: true, WorkerIncarnation: 7}, 1)
		var req interface {
			proto.Message
			GetProducerIncarnation() uint64
		}
		switch kind % 3 {
		case 0:
			req = &messages.Register{}
		case 1:
			req = &messages.Batch{}
		default:
			req = &messages.Expire{}
		}
		if err := proto.Unmarshal(data, req); err != nil {
			return // protoactor drops the stream before the worker sees it
		}
		fw.handle(t, req, req.GetProducerIncarnation())
	})
}

// testConfig is echopubsub.DefaultConfig's engine part (this package's
// tests cannot import the root package, which imports it).
func testConfig(name string) core.Config {
	return core.Config{Name: name, PoolSize: 1, BufferSize: 10_000, BatchInterval: 200 * time.Millisecond,
		CallTimeout: 5 * time.Second, RetryInterval: 200 * time.Millisecond, CapacityWarningThreshold: 0.4,
		CapacityWarningInterval: time.Minute, MaxBatchMessages: 10_000, MaxBatchesInFlight: 4, MaxBatchBytes: 1 << 20,
		MaxPendingWrites: 10_000, MaxQueueLen: 10_000, ForgetAfter: 5 * time.Minute}
}

func noopMetrics(cfg core.Config) *core.Metrics {
	m, err := core.NewMetrics(nil, cfg.Name, cfg.PoolSize)
	if err != nil {
		panic(err)
	}
	return m
}

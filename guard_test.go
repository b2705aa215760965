package echopubsub_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// hostileTarget is two honest nodes; the hostile peer attacks nodes[0].
// members are extra addresses in the static membership (a hostile peer that
// is a member).
type hostileTarget struct {
	nodes []*test.Node
	logs  *test.Captured
	cs    []*test.Collector
	seq   uint64
}

func startHostileTarget(t *testing.T, members ...string) *hostileTarget {
	return startHostileTargetOn(t, func(log zerolog.Logger) *remote.Config { return echopubsub.RemoteConfig("127.0.0.1", 0, log) }, members...)
}

// startHostileTargetOn is startHostileTarget with the nodes' remotes
// configured by rc.
func startHostileTargetOn(t *testing.T, rc func(zerolog.Logger) *remote.Config, members ...string) *hostileTarget {
	log, logs := test.CapturingLogger(t, zerolog.InfoLevel)
	h := &hostileTarget{logs: logs}
	addrs := append([]string(nil), members...)
	for i := 0; i < 2; i++ {
		system := actor.NewActorSystem(echopubsub.ActorSystemLogger(log.Level(zerolog.WarnLevel)))
		r := remote.NewRemote(system, rc(log))
		r.Start()
		nd := &test.Node{System: system, Remote: r, Addr: system.Address(), Faults: test.NewFaults(), Log: log}
		h.nodes = append(h.nodes, nd)
		addrs = append(addrs, nd.Addr)
	}
	for _, nd := range h.nodes {
		nd.Start(t, fastConfig(), echopubsub.WithMembership(cluster.NewStatic(addrs...)))
		h.cs = append(h.cs, nd.Subscribe(t, "match", echopubsub.WithMetadata()))
	}
	return h
}

// stillServes checks that the node keeps serving its honest peer: a
// broadcast each way arrives on the other node.
func (h *hostileTarget) stillServes(t *testing.T) {
	t.Helper()
	for from := range h.nodes {
		h.seq++
		seq := h.seq
		h.nodes[from].Broadcast(t, "match", &testpb.Stamp{Publisher: "honest", Seq: seq})
		to := h.cs[1-from]
		test.Eventually(t, 10*time.Second, func() bool {
			s := to.Stamps()
			return len(s) > 0 && s[len(s)-1] == seq
		}, func() string { return "honest broadcast did not arrive: " + to.Describe() })
	}
}

// rawStream opens protoactor's gRPC stream to addr as a hostile client
// would and completes the connect handshake.
func rawStream(t *testing.T, addr string) remote.Remoting_ReceiveClient {
	t.Helper()
	conn, err := grpc.Dial(addr, //nolint:staticcheck // grpc v1.60 has no NewClient
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(256<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	stream, err := remote.NewRemotingClient(conn).Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_ConnectRequest{
		ConnectRequest: &remote.ConnectRequest{ConnectionType: &remote.ConnectRequest_ServerConnection{
			ServerConnection: &remote.ServerConnection{SystemId: "hostile", Address: "127.0.0.1:1"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := stream.Recv()
	if err != nil {
		t.Fatalf("connect handshake: %v", err)
	}
	if res.GetConnectResponse() == nil {
		t.Fatalf("connect handshake answered %v", res)
	}
	return stream
}

// sendBatch sends one raw MessageBatch and returns how the node ended the
// stream (nil if it kept it open for 1 s).
func sendBatch(t *testing.T, addr string, b *remote.MessageBatch) error {
	t.Helper()
	stream := rawStream(t, addr)
	if err := stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: b}}); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { // ends at the stream's context deadline at the latest
		for {
			if _, err := stream.Recv(); err != nil {
				done <- err
				return
			}
		}
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Second):
		return nil
	}
}

func workerPID(addr string) *actor.PID { return actor.NewPID(addr, core.WorkerName("scores", 0)) }

func payload(t *testing.T, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHostilePeerWire: malformed traffic on a node's remote port closes
// that stream with a logged error; the node stays up and keeps serving.
func TestHostilePeerWire(t *testing.T) {
	h := startHostileTarget(t)
	addr := h.nodes[0].Addr
	target := workerPID(addr)
	batch := payload(t, &messages.Batch{ProtocolVersion: messages.ProtocolVersion, PubsubName: "scores", ProducerNode: "hostile", Group: 0})

	cases := []struct {
		name string
		b    *remote.MessageBatch
		// what the node must log, and the gRPC code it must end the stream with
		// (codes.OK: any error).
		log  string
		code codes.Code
	}{
		{"unknown type name", &remote.MessageBatch{TypeNames: []string{"no.such.Type"}, Targets: []*actor.PID{target},
			Envelopes: []*remote.MessageEnvelope{{TypeId: 0, MessageData: batch, Target: 0}}},
			"cannot decode", codes.InvalidArgument},
		{"type id out of range", &remote.MessageBatch{TypeNames: []string{"echopubsub.v1.Batch"}, Targets: []*actor.PID{target},
			Envelopes: []*remote.MessageEnvelope{{TypeId: 7, MessageData: batch, Target: 0}}},
			"cannot decode", codes.InvalidArgument},
		{"target index out of range", &remote.MessageBatch{TypeNames: []string{"echopubsub.v1.Batch"}, Targets: []*actor.PID{target},
			Envelopes: []*remote.MessageEnvelope{{TypeId: 0, MessageData: batch, Target: 9}}},
			"cannot decode", codes.InvalidArgument},
		{"sender index out of range", &remote.MessageBatch{TypeNames: []string{"echopubsub.v1.Batch"}, Targets: []*actor.PID{target},
			Envelopes: []*remote.MessageEnvelope{{TypeId: 0, MessageData: batch, Target: 0, Sender: 5}}},
			"cannot decode", codes.InvalidArgument},
		{"unknown serializer", &remote.MessageBatch{TypeNames: []string{"echopubsub.v1.Batch"}, Targets: []*actor.PID{target},
			Envelopes: []*remote.MessageEnvelope{{TypeId: 0, MessageData: batch, Target: 0, SerializerId: 99}}},
			"cannot decode", codes.InvalidArgument},
		{"malformed bytes", &remote.MessageBatch{TypeNames: []string{"echopubsub.v1.Batch"}, Targets: []*actor.PID{target},
			Envelopes: []*remote.MessageEnvelope{{TypeId: 0, MessageData: []byte{0xff, 0xff, 0xff, 0x0f, 0x01}, Target: 0}}},
			"failed to deserialize", codes.OK},
		{"frame over the 64 MiB limit", &remote.MessageBatch{TypeNames: []string{"echopubsub.v1.Batch"}, Targets: []*actor.PID{target},
			Envelopes: []*remote.MessageEnvelope{{TypeId: 0, MessageData: make([]byte, echopubsub.MaxFrameBytes+1), Target: 0}}},
			"", codes.ResourceExhausted},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := sendBatch(t, addr, tc.b)
			if err == nil {
				t.Fatalf("the node kept a stream open after %s", tc.name)
			}
			if tc.code != codes.OK && status.Code(err) != tc.code {
				t.Errorf("stream ended with %v, want code %v", err, tc.code)
			}
			if tc.log != "" {
				test.Eventually(t, 5*time.Second, func() bool { return h.logs.Contains(tc.log) },
					test.Sprintf("the node did not log %q", tc.log))
			}
			h.stillServes(t)
		})
	}
}

// TestHostilePeerProtocol: a member that speaks the wire format but lies in
// EchoPubSub's protocol gets negative acks, never moves a known producer's
// stream backwards, and cannot take the node down.
func TestHostilePeerProtocol(t *testing.T) {
	// The hostile peer is a protoactor node that is a member of the pubsub
	// (it runs no pubsub itself): the edge guard lets its requests through
	// to the worker (a non-member's: TestHostileNonMember).
	log := test.Logger(t, zerolog.WarnLevel)
	system, r := test.StartRemote(t, log)
	t.Cleanup(func() { r.Shutdown(false); system.Shutdown() })
	h := startHostileTarget(t, system.Address())
	worker := workerPID(h.nodes[0].Addr)
	ask := func(req proto.Message) interface{} {
		t.Helper()
		res, err := system.Root.RequestFuture(worker, req, 5*time.Second).Result()
		if err != nil {
			t.Fatalf("no answer to %T: %v", req, err)
		}
		return res
	}
	spy := h.nodes[0].Subscribe(t, "hostile", echopubsub.WithMetadata())
	entry := func(seq uint64) *messages.Entry {
		typ, b, _ := messages.Encode(&testpb.Stamp{Publisher: "hostile", Seq: seq})
		return &messages.Entry{Topic: "hostile", PayloadType: typ, Payload: b}
	}
	base := func() (uint32, string, string, uint64, uint32) {
		return messages.ProtocolVersion, "scores", system.Address(), 1, 0
	}
	// reg is a join at next, for the worker incarnation a probe reports.
	reg := func(inc, next uint64) *messages.Register {
		t.Helper()
		v, name, node, _, g := base()
		probe := &messages.Register{ProtocolVersion: v, PubsubName: name, ProducerNode: node, ProducerIncarnation: inc, Group: g}
		ack, ok := ask(probe).(*messages.RegisterAck)
		if !ok || ack.WorkerIncarnation == 0 {
			t.Fatalf("probe answered %v", ack)
		}
		return &messages.Register{ProtocolVersion: v, PubsubName: name, ProducerNode: node, ProducerIncarnation: inc, Group: g,
			NextCursor: next, Join: true, WorkerIncarnation: ack.WorkerIncarnation}
	}
	bat := func(inc, first uint64, entries ...*messages.Entry) *messages.Batch {
		v, name, node, _, g := base()
		b := &messages.Batch{ProtocolVersion: v, PubsubName: name, ProducerNode: node, ProducerIncarnation: inc, Group: g, FirstCursor: first}
		for _, e := range entries {
			b.AddEntry(e)
		}
		return b
	}
	wantAck := func(res interface{}, st messages.AckStatus, next uint64, errPart string) {
		t.Helper()
		var gotSt messages.AckStatus
		var gotNext uint64
		var gotErr string
		switch a := res.(type) {
		case *messages.BatchAck:
			gotSt, gotNext, gotErr = a.Status, a.NextCursor, a.Error
		case *messages.RegisterAck:
			gotSt, gotNext, gotErr = a.Status, a.NextCursor, a.Error
		default:
			t.Fatalf("answer %T", res)
		}
		if gotSt != st || (st == messages.AckStatus_ACK_STATUS_OK && gotNext != next) || !strings.Contains(gotErr, errPart) {
			t.Fatalf("ack %v next %d error %q, want %v next %d error containing %q", gotSt, gotNext, gotErr, st, next, errPart)
		}
	}

	t.Run("batch for an unknown incarnation", func(t *testing.T) {
		wantAck(ask(bat(42, 0, entry(1))), messages.AckStatus_ACK_STATUS_UNKNOWN_PRODUCER, 0, "")
		if spy.Len() != 0 {
			t.Fatalf("an unregistered producer's batch was delivered: %s", spy.Describe())
		}
	})
	t.Run("cursor going backwards", func(t *testing.T) {
		wantAck(ask(reg(1, 100)), messages.AckStatus_ACK_STATUS_OK, 100, "")
		wantAck(ask(bat(1, 100, entry(1), entry(2))), messages.AckStatus_ACK_STATUS_OK, 102, "")
		test.Eventually(t, 5*time.Second, func() bool { return spy.Len() == 2 }, func() string { return spy.Describe() })
		// Backwards: a replay of delivered cursors is skipped, not redelivered.
		wantAck(ask(bat(1, 50, entry(3), entry(4), entry(5))), messages.AckStatus_ACK_STATUS_OK, 102, "")
		wantAck(ask(reg(1, 10)), messages.AckStatus_ACK_STATUS_OK, 102, "")
		test.Never(t, 300*time.Millisecond, func() bool { return spy.Len() != 2 }, func() string { return spy.Describe() })
		// Forwards past a hole: refused, with where to resume; nothing of it
		// is delivered, so the delivered stream has no hole.
		wantAck(ask(bat(1, 110, entry(6))), messages.AckStatus_ACK_STATUS_OUT_OF_ORDER, 102, "")
		test.Never(t, 300*time.Millisecond, func() bool { return spy.Len() != 2 }, func() string { return spy.Describe() })
	})
	t.Run("rejected with a reason", func(t *testing.T) {
		b := bat(1, 111, entry(7))
		b.ProtocolVersion = 99
		wantAck(ask(b), messages.AckStatus_ACK_STATUS_REJECTED, 0, "protocol version 99")
		b = bat(1, 111, entry(7))
		b.PubsubName = "other"
		wantAck(ask(b), messages.AckStatus_ACK_STATUS_REJECTED, 0, `pubsub name "other"`)
		b = bat(1, 111, entry(7))
		b.Group = 3
		wantAck(ask(b), messages.AckStatus_ACK_STATUS_REJECTED, 0, "group 3")
		b = bat(1, 111, entry(7))
		b.ProducerNode = ""
		wantAck(ask(b), messages.AckStatus_ACK_STATUS_REJECTED, 0, `claims producer node ""`)
		wantAck(ask(bat(1, math.MaxUint64, entry(7), entry(8))), messages.AckStatus_ACK_STATUS_REJECTED, 0, "overflows")
		b = bat(1, 111, entry(7))
		b.PayloadSize[0] += 5 // columns that disagree: sizes beyond the payload bytes
		wantAck(ask(b), messages.AckStatus_ACK_STATUS_REJECTED, 0, "malformed batch")
		b = bat(1, 111, entry(7))
		b.TopicIndex[0] = 9 // a topic index out of range
		wantAck(ask(b), messages.AckStatus_ACK_STATUS_REJECTED, 0, "malformed batch")
		test.Eventually(t, 5*time.Second, func() bool { return h.logs.Contains("rejected batch") },
			test.Sprintf("rejections were not logged"))
	})
	t.Run("batch over the receiver's limits", func(t *testing.T) {
		// fastConfig: MaxBatchMessages 10,000, MaxBatchBytes 1 MiB.
		entries := make([]*messages.Entry, 0, 20_000)
		for i := 0; i < 20_000; i++ {
			e := entry(uint64(1000 + i))
			e.Topic = "nobody-listens"
			entries = append(entries, e)
		}
		wantAck(ask(bat(1, 102, entries...)), messages.AckStatus_ACK_STATUS_REJECTED, 0, "over this node's MaxBatchMessages 10000")
		big := entry(1)
		big.Topic = "nobody-listens"
		big.Payload = make([]byte, 2<<20)
		wantAck(ask(bat(1, 102, big)), messages.AckStatus_ACK_STATUS_REJECTED, 0, "over this node's MaxBatchBytes 1048576")
		// Rejected whole: nothing of either was taken, the stream goes on at 102.
		wantAck(ask(bat(1, 102, entries[:10_000]...)), messages.AckStatus_ACK_STATUS_OK, 102+10_000, "")
	})
	t.Run("flood of registrations", func(t *testing.T) {
		const n = 5000
		futures := make([]*actor.Future, 0, n)
		for i := 0; i < n; i++ {
			m := reg(uint64(i+1), 0)
			m.ProducerNode = "flood-" + strings.Repeat("x", i%50) + string(rune('a'+i%26)) + "-" + itoa(i)
			futures = append(futures, system.Root.RequestFuture(worker, m, 30*time.Second))
		}
		for i, f := range futures {
			if _, err := f.Result(); err != nil {
				t.Fatalf("registration %d unanswered: %v", i, err)
			}
		}
	})
	h.stillServes(t)
}

// TestHostilePeerPoisonPill: any protoactor peer can send the built-in
// PoisonPill to a worker's well-known PID. The worker stops (it is not a
// crash), its group supervisor escalates, and the group must come back.
//
// Before 6fc9c9a the group was stopped for good ("pubsub child stopped for
// good (restart intensity exceeded)") and the node no longer received from
// its peers.
func TestHostilePeerPoisonPill(t *testing.T) {
	h := startHostileTarget(t)
	system, r := test.StartRemote(t, test.Logger(t, zerolog.WarnLevel))
	t.Cleanup(func() { r.Shutdown(false); system.Shutdown() })
	system.Root.Send(workerPID(h.nodes[0].Addr), &actor.PoisonPill{})
	h.stillServes(t)
}

func itoa(i int) string {
	var b [20]byte
	n := len(b)
	for {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
		if i == 0 {
			return string(b[n:])
		}
	}
}

// Package tracing tests WithTracerProvider across processes: a message
// published in a trace on one node process is delivered on another, whose
// delivery span belongs to the publisher's trace. The OpenTelemetry SDK and
// its in-memory exporter (sdk/trace/tracetest) are test-only: they live in
// this module, never in the library's go.mod.
package tracing_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/internal/proc"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// Node processes: this test binary run as one traced EchoPubSub node (the
// shape of the root package's child nodes, childnode_helpers_test.go). The
// parent passes a nodeSpec in nodeEnv; the node starts its remote and its
// pubsub with a tracer provider that records into an in-memory exporter,
// subscribes one recorder (WithMetadata) to topic, writes its "ready"
// line, and answers internal/proc's JSON-line commands:
//
//	publish {seq} -> an "app" span, and BroadcastContext(Stamp{seq}) in it;
//	                 the reply names the app span
//	report        -> the spans recorded so far and what the recorder got
const (
	nodeEnv = "ECHOPUBSUB_TRACING_NODE"
	topic   = "traced"
)

type nodeSpec struct {
	Port  int
	Peers []string
}

type command struct {
	ID  int64  `json:"id"`
	Op  string `json:"op"`
	Seq uint64 `json:"seq,omitempty"`
}

func (c *command) SetID(id int64) { c.ID = id }

type event struct {
	Ev       string     `json:"ev"`
	ID       int64      `json:"id,omitempty"`
	Err      string     `json:"err,omitempty"`
	Addr     string     `json:"addr,omitempty"`
	App      *span      `json:"app,omitempty"`
	Spans    []span     `json:"spans,omitempty"`
	Received []received `json:"received,omitempty"`
}

// span is what the test reads of a recorded span.
type span struct {
	Name     string `json:"name"`
	Kind     string `json:"kind"`
	TraceID  string `json:"trace_id"`
	SpanID   string `json:"span_id"`
	ParentID string `json:"parent_id"`
	Remote   bool   `json:"parent_remote"`
	Topic    string `json:"topic"`
}

// received is one message the recorder got, with its metadata's trace
// context.
type received struct {
	Seq         uint64 `json:"seq"`
	Node        string `json:"node"`
	Traceparent string `json:"traceparent"`
}

func init() {
	if s := os.Getenv(nodeEnv); s != "" {
		os.Exit(runNode(s))
	}
}

func runNode(specJSON string) int {
	log := zerolog.New(os.Stderr).With().Timestamp().Str("child", "1").Logger()
	var spec nodeSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		log.Error().Err(err).Msg("node: spec")
		return 2
	}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	system := actor.NewActorSystem(echopubsub.ActorSystemLogger(log.Level(zerolog.ErrorLevel)))
	r := remote.NewRemote(system, echopubsub.RemoteConfig("127.0.0.1", spec.Port, log))
	r.Start()
	defer r.Shutdown(true)
	ps, err := echopubsub.Start(system, test.FastConfig(), echopubsub.WithMembership(cluster.NewStatic(spec.Peers...)),
		echopubsub.WithLogger(log), echopubsub.WithTracerProvider(tp))
	if err != nil {
		log.Error().Err(err).Msg("node: start")
		return 2
	}
	defer func() { _ = ps.Stop(context.Background()) }()
	rec := &recorder{}
	pid := system.Root.Spawn(actor.PropsFromFunc(rec.receive, actor.WithMailbox(echopubsub.SubscriberMailbox())))
	if err := ps.Subscribe(pid, topic, echopubsub.WithMetadata()); err != nil {
		log.Error().Err(err).Msg("node: subscribe")
		return 2
	}
	out := json.NewEncoder(os.Stdout)
	_ = out.Encode(event{Ev: "ready", Addr: system.Address()})
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var c command
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			_ = out.Encode(event{Ev: "reply", Err: fmt.Sprintf("bad command %q: %v", in.Text(), err)})
			continue
		}
		reply := event{Ev: "reply", ID: c.ID}
		switch c.Op {
		case "publish":
			// As an instrumented application publishes: inside its own span.
			ctx, app := tp.Tracer("app").Start(context.Background(), "app")
			if err := ps.BroadcastContext(ctx, nil, topic, &testpb.Stamp{Seq: c.Seq}); err != nil {
				reply.Err = err.Error()
			}
			app.End()
			s := spanOf(app.SpanContext(), trace.SpanContext{}, "app", "")
			reply.App = &s
		case "report":
			for _, st := range exp.GetSpans() {
				s := spanOf(st.SpanContext, st.Parent, st.Name, st.SpanKind.String())
				for _, a := range st.Attributes {
					if a.Key == "messaging.destination.name" {
						s.Topic = a.Value.AsString()
					}
				}
				reply.Spans = append(reply.Spans, s)
			}
			reply.Received = rec.report()
		default:
			reply.Err = fmt.Sprintf("unknown op %q", c.Op)
		}
		_ = out.Encode(reply)
	}
	return 0
}

func spanOf(sc, parent trace.SpanContext, name, kind string) span {
	s := span{Name: name, Kind: kind, TraceID: sc.TraceID().String(), SpanID: sc.SpanID().String(), Remote: parent.IsRemote()}
	if parent.IsValid() {
		s.ParentID = parent.SpanID().String()
	}
	return s
}

type recorder struct {
	mu  sync.Mutex
	got []received
}

func (r *recorder) receive(ctx actor.Context) {
	d, ok := ctx.Message().(*messages.Delivery)
	if !ok {
		return
	}
	st, ok := d.Message.(*testpb.Stamp)
	if !ok {
		return
	}
	r.mu.Lock()
	r.got = append(r.got, received{Seq: st.Seq, Node: d.Node, Traceparent: d.Traceparent})
	r.mu.Unlock()
}

func (r *recorder) report() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

// node is one node process.
type node struct {
	*proc.Proc
	addr string
}

func (n *node) report(t *testing.T) event {
	t.Helper()
	var ev event
	if err := n.Call(&command{Op: "report"}, &ev, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	return ev
}

// startNodes starts n node processes in a full mesh, each with its stderr
// in the test's temporary directory.
func startNodes(t *testing.T, n int) []*node {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ports, err := proc.FreePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	var peers []string
	for _, p := range ports {
		peers = append(peers, fmt.Sprintf("127.0.0.1:%d", p))
	}
	dir := t.TempDir()
	var nodes []*node
	for i, port := range ports {
		spec, _ := json.Marshal(nodeSpec{Port: port, Peers: peers})
		name := fmt.Sprintf("node%d", i)
		p, err := proc.Start(context.Background(), proc.Spec{Name: name, Argv: []string{self, "-test.run=^$"},
			Env: []string{nodeEnv + "=" + string(spec)}, Log: fmt.Sprintf("%s/%s.log", dir, name), Group: true})
		if err != nil {
			t.Fatal(err)
		}
		nd := &node{Proc: p}
		t.Cleanup(func() {
			if err := p.Quit(nil, 10*time.Second); err != nil {
				t.Error(err)
			}
			if t.Failed() {
				if b, err := os.ReadFile(fmt.Sprintf("%s/%s.log", dir, name)); err == nil {
					t.Logf("%s's log:\n%s", name, b)
				}
			}
		})
		var ready event
		if err := p.Ready(&ready); err != nil {
			t.Fatal(err)
		}
		nd.addr = ready.Addr
		nodes = append(nodes, nd)
	}
	return nodes
}

// TestTraceCrossesProcesses: a message published inside an application's
// span on node 0 (its own process) is delivered to a subscriber on node 1
// (another process); node 1 records the delivery as a "deliver" span in the
// publisher's trace, a child of node 0's "broadcast" span (itself a child of
// the application's span), and the subscriber's metadata carries the
// publish span's traceparent. That context crossed the process boundary
// only inside the batch: the two processes share nothing else.
func TestTraceCrossesProcesses(t *testing.T) {
	nodes := startNodes(t, 2)
	a, b := nodes[0], nodes[1]
	var pub event
	if err := a.Call(&command{Op: "publish", Seq: 1}, &pub, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	app := *pub.App
	// What a user observes: the message reaches node 1's subscriber, and
	// node 1's exporter holds the span of its delivery (ended once the
	// subscriber's mailbox had it, so possibly just after).
	var seen event
	if !proc.Until(20*time.Second, 20*time.Millisecond, func() bool {
		seen = b.report(t)
		return len(seen.Received) > 0 && find(seen.Spans, "deliver "+topic) != nil
	}) {
		t.Fatalf("node 1 did not report the delivery and its span within 20 s: received %+v, spans %+v", seen.Received, seen.Spans)
	}
	pubSpans := a.report(t).Spans
	publish := find(pubSpans, "broadcast "+topic)
	if publish == nil {
		t.Fatalf("node 0 recorded no publish span: %+v", pubSpans)
	}
	if publish.Kind != "producer" || publish.TraceID != app.TraceID || publish.ParentID != app.SpanID {
		t.Fatalf("publish span %+v: want kind producer, a child of the application's span %+v", *publish, app)
	}
	deliver := find(seen.Spans, "deliver "+topic)
	t.Logf("app %s/%s, publish %s/%s on node 0, deliver %s/%s (parent %s) on node 1",
		app.TraceID, app.SpanID, publish.TraceID, publish.SpanID, deliver.TraceID, deliver.SpanID, deliver.ParentID)
	if deliver.Kind != "consumer" || deliver.Topic != topic {
		t.Fatalf("deliver span %+v: want kind consumer on topic %q", *deliver, topic)
	}
	if deliver.TraceID != publish.TraceID || deliver.ParentID != publish.SpanID || !deliver.Remote {
		t.Fatalf("deliver span on node 1 %+v is not the child of node 0's publish span %+v", *deliver, *publish)
	}
	got := seen.Received[0]
	want := fmt.Sprintf("00-%s-%s-01", publish.TraceID, publish.SpanID)
	if got.Seq != 1 || got.Node != a.addr || got.Traceparent != want {
		t.Fatalf("node 1's subscriber got %+v, want seq 1 from %s with traceparent %s", got, a.addr, want)
	}
}

func find(spans []span, name string) *span {
	for i := range spans {
		if spans[i].Name == name {
			return &spans[i]
		}
	}
	return nil
}

// TestReplyContinuesRequestTrace: a session's reply to a request continues
// the request's trace: the reply's broadcast span is a child of the
// request's, and the requester's envelope of the reply names it. One node,
// in process, tracing into the SDK's in-memory exporter.
func TestReplyContinuesRequestTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	nd := test.StartCluster(t, 1, test.FastConfig(), echopubsub.WithTracerProvider(tp))[0]
	envs := make(chan *echopubsub.Envelope, 16)
	open := func() *echopubsub.Session {
		owner := nd.System.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
			if e, ok := c.Message().(*echopubsub.Envelope); ok {
				envs <- e
			}
		}))
		s, err := nd.PS.OpenSession(owner)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	asker, answerer := open(), open()
	next := func(what string) *echopubsub.Envelope {
		t.Helper()
		select {
		case e := <-envs:
			return e
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s within 10 s", what)
			return nil
		}
	}
	if _, err := nd.PS.RequestFromSession(asker.ID(), answerer.ID(), &testpb.Stamp{Seq: 1}); err != nil {
		t.Fatal(err)
	}
	req := next("request")
	if err := nd.PS.Reply(asker.ID(), req, &testpb.Stamp{Seq: 2}); err != nil {
		t.Fatal(err)
	}
	rep := next("reply")
	reqSC := trace.SpanContextFromContext(echopubsub.ContextWithTrace(context.Background(), req.Traceparent, ""))
	repSC := trace.SpanContextFromContext(echopubsub.ContextWithTrace(context.Background(), rep.Traceparent, ""))
	if !reqSC.IsValid() || !repSC.IsValid() {
		t.Fatalf("request traceparent %q, reply traceparent %q: want both", req.Traceparent, rep.Traceparent)
	}
	var replySpan *tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.SpanContext.SpanID() == repSC.SpanID() {
			replySpan = &s
		}
	}
	if replySpan == nil || !strings.HasPrefix(replySpan.Name, "broadcast ") || replySpan.Parent.SpanID() != reqSC.SpanID() ||
		repSC.TraceID() != reqSC.TraceID() {
		t.Fatalf("the reply's span %+v (traceparent %s) is not a child of the request's %s", replySpan, rep.Traceparent, req.Traceparent)
	}
}

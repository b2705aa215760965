package echopubsub_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// stampType is the full protobuf name of testpb.Stamp.
const stampType = "echopubsub.test.v1.Stamp"

// padded is stamp seq with a pad of its own, so that two payloads never
// share their bytes.
func padded(seq uint64) *testpb.Stamp {
	return &testpb.Stamp{Publisher: "t", Seq: seq, Pad: []byte(fmt.Sprintf("pad-%06d", seq))}
}

// wantEncoded checks that c received exactly the stamps 1..n, each as an
// encoded *messages.Delivery from producer node: no Message, the Stamp's
// type name, the topic, cursors one apart, and bytes that decode to what was
// sent. Checked once all arrived, so the bytes of the first were held while
// the later ones went through the same buffers.
func wantEncoded(t *testing.T, c *test.Collector, node, topic string, n uint64) {
	t.Helper()
	wantUpTo(t, c, n)
	all := c.All()
	var cursor uint64
	for i, m := range all {
		d, ok := m.(*messages.Delivery)
		if !ok {
			t.Fatalf("message %d is a %T, want an encoded *messages.Delivery: %s", i, m, c.Describe())
		}
		if d.Message != nil || d.PayloadType != stampType || d.Topic != topic || d.Node != node {
			t.Fatalf("message %d: Message %v, PayloadType %q, Topic %q, Node %q; want no Message, %q, %q, %q",
				i, d.Message, d.PayloadType, d.Topic, d.Node, stampType, topic, node)
		}
		if i > 0 && d.Cursor != cursor+1 {
			t.Fatalf("message %d: cursor %d after %d", i, d.Cursor, cursor)
		}
		cursor = d.Cursor
		got, err := messages.Decode(d.PayloadType, d.Payload)
		if err != nil {
			t.Fatalf("message %d: payload %x does not decode: %v", i, d.Payload, err)
		}
		if want := padded(uint64(i + 1)); !proto.Equal(got, want) {
			t.Fatalf("message %d: payload decodes to %v, want %v (bytes changed after they were handed over?)", i, got, want)
		}
	}
}

// A subscriber WithFormat(FormatEncoded) gets every message in order as the
// bytes its publisher encoded, on a remote node (from the batches) and on
// the publishing node (from Broadcast's own encoding); the bytes it keeps
// stay what was sent while later batches come and go.
func TestEncodedSubscriberGetsEveryMessageAsSent(t *testing.T) {
	cfg := fastConfig()
	cfg.MaxBatchMessages = 16 // many batches
	cfg.BufferSize = 64       // the producer's ring wraps several times
	nodes := test.StartCluster(t, 2, cfg)
	remote := nodes[1].Subscribe(t, "match", echopubsub.WithFormat(echopubsub.FormatEncoded))
	local := nodes[0].Subscribe(t, "match", echopubsub.WithFormat(echopubsub.FormatEncoded))
	const n = 300
	for i := uint64(1); i <= n; i++ {
		nodes[0].Broadcast(t, "match", padded(i))
		if i%50 == 0 { // keep the ring from overrunning the remote node
			wantUpTo(t, remote, i)
		}
	}
	wantEncoded(t, remote, nodes[0].Addr, "match", n)
	wantEncoded(t, local, nodes[0].Addr, "match", n)
}

// Subscribers of each format on one topic each get every message, in the
// form they asked for: the decoded ones a message, the encoded ones its
// bytes, FormatBoth both.
func TestEncodedAndDecodedSubscribersShareATopic(t *testing.T) {
	nodes := test.StartCluster(t, 2, fastConfig())
	type four struct{ plain, meta, enc, both *test.Collector }
	var subs []four
	for _, nd := range nodes {
		subs = append(subs, four{nd.Subscribe(t, "match"), nd.Subscribe(t, "match", echopubsub.WithMetadata()),
			nd.Subscribe(t, "match", echopubsub.WithFormat(echopubsub.FormatEncoded)),
			nd.Subscribe(t, "match", echopubsub.WithFormat(echopubsub.FormatBoth))})
	}
	const n = 100
	for i := uint64(1); i <= n; i++ {
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	for k, s := range subs {
		for _, c := range []*test.Collector{s.plain, s.meta, s.enc, s.both} {
			wantUpTo(t, c, n)
		}
		plain, meta, enc, both := s.plain.All(), s.meta.All(), s.enc.All(), s.both.All()
		for i := 0; i < n; i++ {
			if _, ok := plain[i].(*testpb.Stamp); !ok {
				t.Fatalf("node %d plain: message %d is a %T", k, i, plain[i])
			}
			md, ed, bd := meta[i].(*messages.Delivery), enc[i].(*messages.Delivery), both[i].(*messages.Delivery)
			if md.Message == nil || md.Payload != nil || md.PayloadType != "" {
				t.Fatalf("node %d WithMetadata: message %d has Message %v, PayloadType %q, Payload %x; want the message only", k, i, md.Message, md.PayloadType, md.Payload)
			}
			if ed.Message != nil || ed.PayloadType != stampType {
				t.Fatalf("node %d FormatEncoded: message %d has Message %v, PayloadType %q; want the encoding only", k, i, ed.Message, ed.PayloadType)
			}
			if bd.Message == nil || bd.PayloadType != stampType || !proto.Equal(bd.Message, stamp(uint64(i+1))) {
				t.Fatalf("node %d FormatBoth: message %d has Message %v, PayloadType %q; want both", k, i, bd.Message, bd.PayloadType)
			}
			if md.Cursor != ed.Cursor || ed.Cursor != bd.Cursor {
				t.Fatalf("node %d: message %d has cursors %d, %d, %d", k, i, md.Cursor, ed.Cursor, bd.Cursor)
			}
		}
	}
}

// A type this node does not link (here: one no binary links, published by
// an actor as its bytes) reaches an encoded subscriber as its bytes, where
// a decoded subscriber can only be told it was undecodable: the node hands
// the encoding over without decoding it.
func TestEncodedSubscriberGetsATypeThisNodeCannotDecode(t *testing.T) {
	nodes := test.StartCluster(t, 2, fastConfig())
	enc := nodes[1].Subscribe(t, "raw", echopubsub.WithFormat(echopubsub.FormatEncoded))
	dec := nodes[1].Subscribe(t, "raw")
	const typeName = "echopubsub.test.v1.NotLinked"
	payload := []byte("\x0a\x05bytes") // a field 1 of 5 bytes
	res, err := nodes[0].System.Root.RequestFuture(nodes[0].PS.PID(), &messages.Broadcast{Topic: "raw",
		Message: &anypb.Any{TypeUrl: "type.googleapis.com/" + typeName, Value: payload}}, 5*time.Second).Result()
	if err != nil || res.(*messages.BroadcastResult).Error != "" {
		t.Fatalf("actor broadcast: %v %v", res, err)
	}
	test.Eventually(t, 10*time.Second, func() bool { return enc.Len() == 1 && dec.Len() == 1 },
		func() string { return "encoded: " + enc.Describe() + "; decoded: " + dec.Describe() })
	if u, ok := dec.All()[0].(*messages.Undecodable); !ok || u.PayloadType != typeName {
		t.Fatalf("decoded subscriber got %v, want an Undecodable %s", dec.All()[0], typeName)
	}
	d, ok := enc.All()[0].(*messages.Delivery)
	if !ok || d.Message != nil || d.PayloadType != typeName || string(d.Payload) != string(payload) || d.Topic != "raw" {
		t.Fatalf("encoded subscriber got %#v, want a Delivery of %s with payload %x and no Message", enc.All()[0], typeName, payload)
	}
}

// eventsOf is what c received, as "s<seq>", "DROPPING", "RESUMED" or
// "expired <missed>".
func eventsOf(c *test.Collector) []string {
	var out []string
	for _, m := range c.All() {
		switch m := m.(type) {
		case *messages.BackPressure:
			out = append(out, strings.TrimPrefix(m.State.String(), "BACK_PRESSURE_STATE_"))
		case *messages.CursorExpired:
			out = append(out, fmt.Sprintf("expired %d", m.Missed))
		case *messages.Delivery, *testpb.Stamp:
			out = append(out, "s") // the seq follows
		default:
			out = append(out, fmt.Sprintf("%T", m))
		}
	}
	seqs, j := c.Stamps(), 0
	for i, e := range out {
		if e == "s" && j < len(seqs) {
			out[i] = fmt.Sprintf("s%d", seqs[j])
			j++
		}
	}
	return out
}

// noSilentGap fails unless every jump in evs' stamps comes right after a
// DROPPING notice, with exactly one DROPPING and one RESUMED.
func noSilentGap(t *testing.T, name string, evs []string) {
	t.Helper()
	var last uint64
	dropping, drops, resumes := false, 0, 0
	for _, e := range evs {
		switch e {
		case "DROPPING":
			dropping = true
			drops++
		case "RESUMED":
			resumes++
		default:
			var seq uint64
			if _, err := fmt.Sscanf(e, "s%d", &seq); err != nil {
				t.Fatalf("%s: unexpected %q in %v", name, e, evs)
			}
			if seq != last+1 && !dropping {
				t.Fatalf("%s: silent gap, s%d after s%d: %v", name, seq, last, evs)
			}
			last, dropping = seq, false
		}
	}
	if drops != 1 || resumes != 1 {
		t.Fatalf("%s: %d DROPPING and %d RESUMED, want 1 and 1: %v", name, drops, resumes, evs)
	}
}

// An encoded subscriber that falls behind its bound is told as a decoded
// one is: DROPPING before the first message it lost, RESUMED when it takes
// messages again, never a silent gap.
func TestEncodedSubscriberIsToldOfBackPressure(t *testing.T) {
	cfg := fastConfig()
	cfg.BufferSize = 1000
	nodes := test.StartCluster(t, 2, cfg)
	subs := map[string]*test.Collector{}
	for name, opts := range map[string][]echopubsub.SubscribeOption{
		"decoded": {echopubsub.WithMaxQueueLen(5)},
		"encoded": {echopubsub.WithMaxQueueLen(5), echopubsub.WithFormat(echopubsub.FormatEncoded)},
	} {
		c := test.SpawnStalledCollector(nodes[1].System)
		if err := nodes[1].PS.Subscribe(c.PID, "match", opts...); err != nil {
			t.Fatal(err)
		}
		subs[name] = c
	}
	test.Partition(nodes, 1)
	for i := uint64(1); i <= 50; i++ { // held for node 1, then handed over in one go
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	test.Heal(nodes)
	test.Eventually(t, 10*time.Second, func() bool { return nodes[0].NodeStats(t, nodes[1].Addr).Lag == 0 },
		test.Sprintf("node 1 took the held batch"))
	for _, c := range subs {
		c.Release()
	}
	// The DROPPING notice was queued behind everything a stalled subscriber
	// took: once it has it, its queue is empty, and the next message is
	// delivered rather than dropped against the bound.
	for _, c := range subs {
		test.Eventually(t, 10*time.Second, func() bool { return test.Count[*messages.BackPressure](c) == 1 }, c.Describe)
	}
	nodes[0].Broadcast(t, "match", stamp(51)) // after the drain: delivery resumes
	for name, c := range subs {
		test.Eventually(t, 10*time.Second, func() bool { s := c.Stamps(); return len(s) > 0 && s[len(s)-1] == 51 }, c.Describe)
		noSilentGap(t, name, eventsOf(c))
	}
}

// An encoded subscriber on a node that fell behind the buffer is told
// CursorExpired, with the same count, as a decoded one.
func TestEncodedSubscriberIsToldCursorExpired(t *testing.T) {
	cfg := fastConfig()
	cfg.BufferSize = 10
	nodes := test.StartCluster(t, 2, cfg)
	dec := nodes[1].Subscribe(t, "match")
	enc := nodes[1].Subscribe(t, "match", echopubsub.WithFormat(echopubsub.FormatEncoded))
	expireJoinedNode1(t, nodes, 11)
	subs := map[string]*test.Collector{"decoded": dec, "encoded": enc}
	for _, c := range subs {
		test.Eventually(t, 10*time.Second, func() bool { return len(eventsOf(c)) == 1 }, c.Describe)
	}
	nodes[0].Broadcast(t, "match", stamp(12)) // after the expiry: the stream resumes
	for name, c := range subs {
		test.Eventually(t, 10*time.Second, func() bool { return len(eventsOf(c)) == 2 }, c.Describe)
		if evs := eventsOf(c); evs[0] != "expired 11" || evs[1] != "s12" {
			t.Fatalf("%s subscriber got %v, want [expired 11 s12]", name, evs)
		}
	}
}

// WithFormat takes the three formats only, and says which value it refused.
func TestWithFormatRefusesAnUnknownFormat(t *testing.T) {
	nd := test.StartCluster(t, 1, fastConfig())[0]
	c := test.SpawnCollector(nd.System)
	err := nd.PS.Subscribe(c.PID, "match", echopubsub.WithFormat(echopubsub.DeliveryFormat(7)))
	if err == nil || !strings.Contains(err.Error(), "got 7") {
		t.Fatalf("Subscribe WithFormat(7) = %v, want an error naming 7", err)
	}
}

// LocalBroadcast hands an encoded subscriber the bytes Broadcast encoded,
// marked Local, with no cursor.
func TestEncodedSubscriberGetsALocalBroadcast(t *testing.T) {
	nd := test.StartCluster(t, 1, fastConfig())[0]
	enc := nd.Subscribe(t, "match", echopubsub.WithFormat(echopubsub.FormatEncoded))
	if err := nd.PS.LocalBroadcast("match", padded(1)); err != nil {
		t.Fatal(err)
	}
	wantUpTo(t, enc, 1)
	d := enc.All()[0].(*messages.Delivery)
	got, err := messages.Decode(d.PayloadType, d.Payload)
	if err != nil || !d.Local || d.Cursor != 0 || d.Message != nil || !proto.Equal(got, padded(1)) {
		t.Fatalf("got %+v (payload decodes to %v, %v), want a Local Delivery of the encoding only", d, got, err)
	}
}

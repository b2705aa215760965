package echopubsub_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// TestInputTheWireCannotCarryIsRefused (issue 37): a topic that is not
// UTF-8 (a peer cannot decode it: protobuf strings are UTF-8) or longer
// than MaxTopicBytes is refused by every call that takes one, with an error
// that names the rule and the value, escaped; so is a ...From sender PID
// that is not UTF-8. Before, Broadcast(nil, "room:\xff", m) returned nil and
// wedged the producer's stream to every peer: the peer got nothing after
// it. Here the peer gets every later message, in order, and no notice.
func TestInputTheWireCannotCarryIsRefused(t *testing.T) {
	nodes := test.StartCluster(t, 2, fastConfig())
	ps, peer := nodes[0].PS, nodes[1]
	later := peer.Subscribe(t, "room:ok")
	own := nodes[0].Subscribe(t, "room:ok")
	o := spawnOwner(t, nodes[0], nil)
	sid := openSession(t, nodes[0], o, nil)
	m := stamp(0)

	odd, long := "room:\xff", strings.Repeat("r", fastConfig().MaxTopicBytes+1)
	for _, topic := range []string{odd, long} {
		calls := map[string]func() error{
			"Broadcast":           func() error { return ps.Broadcast(nil, topic, m) },
			"BroadcastContext":    func() error { return ps.BroadcastContext(t.Context(), nil, topic, m) },
			"BroadcastFrom":       func() error { return ps.BroadcastFrom(own.PID, topic, m) },
			"LocalBroadcast":      func() error { return ps.LocalBroadcast(topic, m) },
			"LocalBroadcastFrom":  func() error { return ps.LocalBroadcastFrom(own.PID, topic, m) },
			"DirectBroadcast":     func() error { return ps.DirectBroadcast(peer.Addr, topic, m) },
			"DirectBroadcastFrom": func() error { return ps.DirectBroadcastFrom(own.PID, peer.Addr, topic, m) },
			"Subscribe":           func() error { return ps.Subscribe(own.PID, topic) },
			"SubscribeNamed":      func() error { return ps.SubscribeNamed("n", topic) },
			"SessionSubscribe":    func() error { return ps.SessionSubscribe(sid, topic) },
			"ReplaySession": func() error {
				_, err := ps.ReplaySession(context.Background(), sid, topic, echopubsub.ReplayOptions{Limit: 1})
				return err
			},
			"Broadcast message to PID()": func() error { return askBroadcast(t, nodes[0], topic) },
		}
		for name, f := range calls {
			err := call(f)
			if !errors.Is(err, echopubsub.ErrInvalidTopic) && name != "Broadcast message to PID()" {
				t.Errorf("%s(%.20q...): %v, want ErrInvalidTopic", name, topic, err)
			}
			if topic == odd {
				wantErr(t, name+" of a topic that is not UTF-8", err, "invalid topic", "UTF-8", `"room:\xff"`)
			} else {
				wantErr(t, name+" of a topic over MaxTopicBytes", err, "invalid topic", "at most 1024 bytes", "got 1025")
			}
		}
	}
	bad := actor.NewPID(nodes[0].Addr, "sender\xfe")
	err := ps.BroadcastFrom(bad, "room:ok", m)
	if !errors.Is(err, echopubsub.ErrInvalidPID) {
		t.Errorf("BroadcastFrom a PID that is not UTF-8: %v, want ErrInvalidPID", err)
	}
	wantErr(t, "BroadcastFrom a PID that is not UTF-8", err, "UTF-8", `sender\xfe`)
	if _, err := ps.RequestFromSession(sid, "bm9kZQ.\xff"+strings.Repeat("A", 20), m); !errors.Is(err, echopubsub.ErrUnknownSession) {
		t.Errorf("RequestFromSession to an id that is not one: %v, want ErrUnknownSession", err)
	}

	// The peer gets every later message, in order, and nothing else (no
	// notice: nothing was lost).
	const n = 50
	want := make([]uint64, n)
	for i := range want {
		want[i] = uint64(i + 1)
		nodes[0].Broadcast(t, "room:ok", stamp(want[i]))
	}
	wantStamps(t, later, want...)
	wantStamps(t, own, want...)
	if later.Len() != n {
		t.Fatalf("the peer got %s, want only the %d stamps", later.Describe(), n)
	}
}

// askBroadcast sends a *messages.Broadcast on topic to nd's pubsub PID, as
// an actor does, and returns its result's error.
func askBroadcast(t *testing.T, nd *test.Node, topic string) error {
	t.Helper()
	payload, _ := anypb.New(&testpb.Stamp{Publisher: "actor", Seq: 1})
	res, err := nd.System.Root.RequestFuture(nd.PS.PID(), &messages.Broadcast{Topic: topic, Message: payload}, 5*time.Second).Result()
	if err != nil {
		return err
	}
	if e := res.(*messages.BroadcastResult).Error; e != "" {
		return errors.New(e)
	}
	return nil
}

// TestAnEntryWithABadTopicDoesNotWedgeThePeersStream (issue 37, in depth):
// should a topic that is not UTF-8 get past Broadcast (a bug, a peer of an
// older build), the peer still decodes the batch (the names travel as
// bytes), passes over that one entry (no subscriber can hold such a topic,
// so nobody lost anything, and nobody is told a false CursorExpired),
// counts exactly it, and takes everything after it. The bad topic is made
// on the wire: node 0's fault hook rewrites "room:BAD" to "room:\xffAD" in
// the encoded batch (same length) before it is sent, bypassing the check
// at Broadcast without a seam in the library.
func TestAnEntryWithABadTopicDoesNotWedgeThePeersStream(t *testing.T) {
	log := test.Logger(t, zerolog.InfoLevel)
	m1 := newMeter(t)
	nodes, addrs := test.NewNodes(t, 2, log)
	nodes[0].Start(t, fastConfig(), staticOf(addrs))
	store := test.NewMemStore() // the peer stores room:* (a real store may refuse a stream name that is not UTF-8)
	nodes[1].Start(t, fastConfig(), staticOf(addrs), echopubsub.WithMeterProvider(m1.mp),
		echopubsub.WithStore(store), echopubsub.WithDurableTopics("room:*"))
	good, bad := []byte("room:BAD"), []byte("room:\xffAD")
	nodes[0].Faults.SetOnSend(func(_ string, req proto.Message) {
		if b, ok := req.(*messages.Batch); ok { // messages.Encoded: its bytes are its unknown fields
			if u := b.ProtoReflect().GetUnknown(); bytes.Contains(u, good) {
				b.ProtoReflect().SetUnknown(bytes.ReplaceAll(u, good, bad))
			}
		}
	})
	later := nodes[1].Subscribe(t, "room:ok")

	const n = 50
	var want []uint64
	for i := uint64(1); i <= n; i++ {
		if i == n/2 {
			nodes[0].Broadcast(t, "room:BAD", stamp(0))
		}
		nodes[0].Broadcast(t, "room:ok", stamp(i))
		want = append(want, i)
	}
	wantStamps(t, later, want...)
	m1.eventually(t, "echopubsub.worker.entries_passed_over", func(v int64) bool { return v == 1 }, "1 (the one bad entry)")
	if later.Len() != n {
		t.Fatalf("the peer's subscriber got %s, want the %d stamps and no notice (nothing it could hold was lost)", later.Describe(), n)
	}
	if v := m1.value(t, "echopubsub.cursor_expired.received"); v != 0 {
		t.Errorf("the peer told its subscribers CursorExpired %d times, want 0 (a false alarm)", v)
	}
	// Nor was it stored: the peer's store holds room:ok's 50 rows, nothing else.
	for stream, want := range map[string]int{"room:ok": n, "room:\xffAD": 0} {
		rows, _, err := store.Read(context.Background(), stream, 1, 2*n)
		if err != nil || len(rows) != want {
			t.Errorf("the peer's store holds %d rows of %q (%v), want %d", len(rows), stream, err, want)
		}
	}
}

package echopubsub_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// owner is a session owner actor (any mailbox: the default one) that
// records what it receives. onEnvelope, when set, runs on the actor's
// goroutine for each envelope (to ack from the owner, as applications do).
type owner struct {
	PID *actor.PID

	mu         sync.Mutex
	got        []interface{}
	onEnvelope func(*echopubsub.Envelope)
}

func spawnOwner(t testing.TB, nd *test.Node, onEnvelope func(*echopubsub.Envelope)) *owner {
	t.Helper()
	o := &owner{onEnvelope: onEnvelope}
	o.PID = nd.System.Root.Spawn(actor.PropsFromFunc(o.receive))
	return o
}

func (o *owner) receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case actor.SystemMessage, actor.AutoReceiveMessage, *actor.Started, *actor.Stopping, *actor.Stopped, *actor.Restarting:
		return
	default:
		o.mu.Lock()
		o.got = append(o.got, m)
		fn := o.onEnvelope
		o.mu.Unlock()
		if env, ok := m.(*echopubsub.Envelope); ok && fn != nil {
			fn(env)
		}
	}
}

func (o *owner) all() []interface{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]interface{}(nil), o.got...)
}

func (o *owner) envelopes() []*echopubsub.Envelope {
	var out []*echopubsub.Envelope
	for _, m := range o.all() {
		if e, ok := m.(*echopubsub.Envelope); ok {
			out = append(out, e)
		}
	}
	return out
}

// ids returns the delivery ids received, in order.
func (o *owner) ids() []uint64 {
	var out []uint64
	for _, e := range o.envelopes() {
		out = append(out, e.DeliveryID)
	}
	return out
}

// seqs returns the Stamp sequence numbers received, in order.
func (o *owner) seqs() []uint64 {
	var out []uint64
	for _, e := range o.envelopes() {
		if s, ok := e.Event.(*testpb.Stamp); ok {
			out = append(out, s.Seq)
		}
	}
	return out
}

// describe lists what the owner got, one word each, for failure messages.
func (o *owner) describe() string {
	s := ""
	for i, m := range o.all() {
		if i == 60 {
			return s + "..."
		}
		s += word(m) + " "
	}
	return s
}

func word(m interface{}) string {
	switch m := m.(type) {
	case *echopubsub.Envelope:
		if st, ok := m.Event.(*testpb.Stamp); ok {
			return fmt.Sprintf("d%d(%s#%d)", m.DeliveryID, st.Publisher, st.Seq)
		}
		return fmt.Sprintf("d%d", m.DeliveryID)
	case *messages.SessionPressure:
		return m.State.String()
	case *messages.SessionClosed:
		return m.Reason.String()
	case *echopubsub.CaughtUp:
		return fmt.Sprintf("caughtup%d", m.Cursor)
	case proto.Message:
		return string(m.ProtoReflect().Descriptor().Name())
	}
	return fmt.Sprintf("%T", m)
}

// words is describe's words in order (notices and "d" for envelopes).
func (o *owner) notices() []string {
	var out []string
	for _, m := range o.all() {
		if _, ok := m.(*echopubsub.Envelope); !ok {
			out = append(out, word(m))
		}
	}
	return out
}

func countOf[T any](o *owner) int {
	n := 0
	for _, m := range o.all() {
		if _, ok := m.(T); ok {
			n++
		}
	}
	return n
}

// openSession opens a session for o on nd and subscribes it to topics.
func openSession(t testing.TB, nd *test.Node, o *owner, topics []string, opts ...echopubsub.SessionOption) string {
	t.Helper()
	s, err := nd.PS.OpenSession(o.PID, opts...)
	if err != nil {
		t.Fatalf("OpenSession on %s: %v", nd.Addr, err)
	}
	for _, tp := range topics {
		if err := nd.PS.SessionSubscribe(s.ID(), tp); err != nil {
			t.Fatalf("SessionSubscribe(%s): %v", tp, err)
		}
	}
	return s.ID()
}

func waitEnvelopes(t testing.TB, o *owner, n int) {
	t.Helper()
	test.Eventually(t, 10*time.Second, func() bool { return len(o.envelopes()) >= n },
		func() string { return fmt.Sprintf("want %d envelopes, owner got: %s", n, o.describe()) })
}

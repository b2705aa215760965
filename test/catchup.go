package test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// SharedMemStore is a MemStore that says it is shared by the cluster: give
// every node the same one, as a cluster shares a PostgreSQL store. The
// publishing node appends each row once and its cursor travels with the
// message (no gap rows: they belong to node-local stores).
type SharedMemStore struct{ *MemStore }

// NewSharedMemStore returns an empty shared store.
func NewSharedMemStore() SharedMemStore { return SharedMemStore{NewMemStore()} }

// Shared is true.
func (SharedMemStore) Shared() bool { return true }

// FollowOwner is a session owner that acks each envelope once it recorded
// it, as an application acks after its work, and records the notices
// (each *echopubsub.CaughtUp apart, with where it came among the
// envelopes).
type FollowOwner struct {
	PID   *actor.PID
	ps    *echopubsub.PubSub
	delay time.Duration // each ack this long after the envelope arrived (0: at once)

	mu       sync.Mutex
	envs     []*echopubsub.Envelope
	notices  []interface{}
	caughtUp []CaughtUpAt
}

// CaughtUpAt is a *echopubsub.CaughtUp a FollowOwner got, and After, how
// many envelopes it had got before it.
type CaughtUpAt struct {
	*echopubsub.CaughtUp
	After int
}

// SpawnFollowOwner spawns one on nd.
func SpawnFollowOwner(nd *Node) *FollowOwner { return SpawnFollowOwnerAckingAfter(nd, 0) }

// SpawnFollowOwnerAckingAfter spawns one on nd that acks each envelope
// delay after it arrived (its work done elsewhere meanwhile), so that more
// of its envelopes are pending at a time than with one that acks at once.
func SpawnFollowOwnerAckingAfter(nd *Node, delay time.Duration) *FollowOwner {
	o := &FollowOwner{ps: nd.PS, delay: delay}
	o.PID = nd.System.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case actor.SystemMessage, actor.AutoReceiveMessage, *actor.Started, *actor.Stopping, *actor.Stopped, *actor.Restarting:
		case *echopubsub.Envelope:
			o.mu.Lock()
			o.envs = append(o.envs, m)
			o.mu.Unlock()
			switch {
			case m.DeliveryID == 0:
			case o.delay > 0:
				time.AfterFunc(o.delay, func() { o.ack(m) })
			default:
				o.ack(m)
			}
		case *messages.SessionPressure, *echopubsub.SessionStalled, *echopubsub.SessionResumed: // pressure, a stall: not a loss
		case *echopubsub.CaughtUp:
			o.mu.Lock()
			o.caughtUp = append(o.caughtUp, CaughtUpAt{m, len(o.envs)})
			o.mu.Unlock()
		default:
			o.mu.Lock()
			o.notices = append(o.notices, m)
			o.mu.Unlock()
		}
	}))
	return o
}

func (o *FollowOwner) ack(m *echopubsub.Envelope) {
	if _, err := o.ps.Ack(m.SessionID, m.DeliveryID); err != nil {
		o.mu.Lock()
		o.notices = append(o.notices, fmt.Errorf("ack %d: %w", m.DeliveryID, err))
		o.mu.Unlock()
	}
}

// Envelopes returns what the owner got so far.
func (o *FollowOwner) Envelopes() []*echopubsub.Envelope {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]*echopubsub.Envelope(nil), o.envs...)
}

// Notices returns the notices (not SessionPressure, SessionStalled,
// SessionResumed or CaughtUp) and ack errors so far.
func (o *FollowOwner) Notices() []interface{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]interface{}(nil), o.notices...)
}

// CaughtUps returns the *echopubsub.CaughtUp notices so far.
func (o *FollowOwner) CaughtUps() []CaughtUpAt {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]CaughtUpAt(nil), o.caughtUp...)
}

// CheckCaughtUp fails t unless the owner of one WithFrom subscription to
// stream got exactly one *echopubsub.CaughtUp, for that stream, at the
// handover: after every envelope read from the store up to it, the last
// of them at its Cursor, and before every live one; the envelope after it
// (if any) at Cursor + 1. envs are the envelopes the owner got with the
// notice among them, and start at the subscription's first row.
func CheckCaughtUp(t testing.TB, cus []CaughtUpAt, envs []*echopubsub.Envelope, stream string) {
	t.Helper()
	if len(cus) != 1 {
		t.Fatalf("%s: %d CaughtUp notices, want 1 (at the one handover): %s", stream, len(cus), caughtUpString(cus))
	}
	cu := cus[0]
	if cu.Stream != stream {
		t.Fatalf("CaughtUp for stream %q, want %q", cu.Stream, stream)
	}
	if cu.After == 0 || cu.After > len(envs) {
		t.Fatalf("%s: CaughtUp{Cursor %d} after %d of %d envelopes: want it after the rows read from the store: %s",
			stream, cu.Cursor, cu.After, len(envs), cursors(envs))
	}
	for _, e := range envs[:cu.After] {
		if !e.Replayed {
			t.Fatalf("%s: live envelope at cursor %d before CaughtUp{Cursor %d} (after %d envelopes): %s",
				stream, e.Cursor, cu.Cursor, cu.After, cursors(envs))
		}
	}
	if last := envs[cu.After-1].Cursor; last != cu.Cursor {
		t.Fatalf("%s: CaughtUp{Cursor %d} right after the stored row at cursor %d: want the cursor of the last stored row",
			stream, cu.Cursor, last)
	}
	if cu.After < len(envs) && envs[cu.After].Cursor != cu.Cursor+1 {
		t.Fatalf("%s: CaughtUp{Cursor %d}, then an envelope at cursor %d", stream, cu.Cursor, envs[cu.After].Cursor)
	}
}

func caughtUpString(cus []CaughtUpAt) string {
	s := ""
	for _, c := range cus {
		s += fmt.Sprintf("{Stream %s Cursor %d after %d envelopes} ", c.Stream, c.Cursor, c.After)
	}
	return s
}

// CheckFollowed fails t unless env are exactly store's rows of stream from
// cursor from through last, in cursor order, each carrying its row's
// message: no gap, no duplicate, nothing out of order.
func CheckFollowed(t testing.TB, envs []*echopubsub.Envelope, store echopubsub.Store, stream string, from, last uint64) {
	t.Helper()
	if want := int(last - from + 1); len(envs) != want {
		t.Fatalf("%s from %d: got %d envelopes, want %d (cursors %d..%d): %s", stream, from, len(envs), want, from, last, cursors(envs))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, _, err := store.Read(ctx, stream, from, len(envs))
	if err != nil || len(rows) != len(envs) {
		t.Fatalf("read %s from %d: %d rows, %v", stream, from, len(rows), err)
	}
	for i, e := range envs {
		if e.Cursor != from+uint64(i) {
			t.Fatalf("%s: envelope %d has cursor %d, want %d: %s", stream, i, e.Cursor, from+uint64(i), cursors(envs))
		}
		msg, err := messages.Decode(rows[i].PayloadType, rows[i].Payload)
		if err != nil || !proto.Equal(msg, e.Event) {
			t.Fatalf("%s: envelope at cursor %d holds %v, the row holds %v (%v)", stream, e.Cursor, e.Event, msg, err)
		}
	}
}

func cursors(envs []*echopubsub.Envelope) string {
	s := ""
	for i, e := range envs {
		if i == 40 {
			return s + "..."
		}
		r := ""
		if e.Replayed {
			r = "r"
		}
		s += fmt.Sprintf("%d%s ", e.Cursor, r)
	}
	return s
}

// lastCursor is the cursor of stream's last row in store (0: empty).
func lastCursor(t testing.TB, store echopubsub.Store, stream string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	from := uint64(1)
	for {
		rows, next, err := store.Read(ctx, stream, from, 1000)
		if err != nil {
			t.Fatalf("read %s: %v", stream, err)
		}
		if len(rows) == 0 {
			return next - 1
		}
		from = next
	}
}

// CatchUpHandover is the WithFrom check every store runs (the root's
// MemStore on each node and its shared form; store/postgres): two nodes
// publish a durable stream, 300 messages each before any session, then 400
// more each at a steady pace while a session on each node subscribes
// WithFrom (node 0 from the stream's start, node 1 from its cursor 151) and
// acks as it goes. Each session must receive exactly the rows of its
// node's store from its cursor to the end, in cursor order, the first
// ones read from the store and the rest live, with no notice but one
// *echopubsub.CaughtUp between the last row read and the first live one
// (CheckCaughtUp): no gap, no duplicate at the handover, no false alarm.
// store(i) is node i's store (the same one for a shared store).
func CatchUpHandover(t *testing.T, store func(i int) echopubsub.Store) {
	const stream, before, during = "room:handover", 300, 400
	cfg := FastConfig()
	cfg.BufferSize = 10000 // no node falls behind: nothing is lost, so no notice is due
	cfg.SoftQueue, cfg.HardQueue = 100, 1000
	nodes, addrs := NewNodes(t, 2, Logger(t, zerolog.InfoLevel))
	for i, nd := range nodes {
		nd.Start(t, cfg, echopubsub.WithMembership(cluster.NewStatic(addrs...)), echopubsub.WithStore(store(i)),
			echopubsub.WithDurableTopics("room:*"))
	}
	publish := func(nd *Node, p string, from, to uint64, pace time.Duration) error {
		for s := from; s <= to; s++ {
			if err := nd.PS.Broadcast(nil, stream, &testpb.Stamp{Publisher: p, Seq: s}); err != nil {
				return fmt.Errorf("broadcast %s#%d: %w", p, s, err)
			}
			if pace > 0 {
				time.Sleep(pace) // a publishing rate, not a wait for state
			}
		}
		return nil
	}
	names := []string{"a", "b"}
	for i, nd := range nodes {
		if err := publish(nd, names[i], 1, before, 0); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(nodes))
	for i, nd := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- publish(nd, names[i], before+1, before+during, time.Millisecond)
		}()
	}
	froms := []uint64{1, 151}
	owners := make([]*FollowOwner, len(nodes))
	for i, nd := range nodes {
		owners[i] = SpawnFollowOwner(nd)
		s, err := nd.PS.OpenSession(owners[i].PID)
		if err != nil {
			t.Fatalf("OpenSession: %v", err)
		}
		if err := nd.PS.SessionSubscribe(s.ID(), stream, echopubsub.WithFrom(froms[i])); err != nil {
			t.Fatalf("SessionSubscribe WithFrom(%d): %v", froms[i], err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	total := uint64(len(nodes) * (before + during))
	for i, o := range owners {
		// Every node's store holds every message once (a node-local store
		// appends what its node published and received): wait until the
		// last one arrived.
		last := lastCursor(t, store(i), stream)
		if last != total {
			Eventually(t, 10*time.Second, func() bool { return lastCursor(t, store(i), stream) == total },
				Sprintf("node %d's store holds %d rows", i, total))
			last = total
		}
		// Wait for the last row's envelope: a duplicate or a row out of
		// order arrives before it, and fails the check below.
		Eventually(t, 20*time.Second, func() bool {
			envs := o.Envelopes()
			return len(envs) > 0 && envs[len(envs)-1].Cursor >= last
		}, func() string {
			return fmt.Sprintf("node %d: envelopes up to cursor %d: %s", i, last, cursors(o.Envelopes()))
		})
		envs := o.Envelopes()
		CheckFollowed(t, envs, store(i), stream, froms[i], last)
		if n := o.Notices(); len(n) > 0 {
			t.Fatalf("node %d: notices where nothing was lost: %v", i, n)
		}
		CheckCaughtUp(t, o.CaughtUps(), envs, stream)
		replayed := 0
		for _, e := range envs {
			if e.Replayed {
				replayed++
			}
		}
		t.Logf("node %d: %d envelopes from cursor %d, %d read from the store, %d live; CaughtUp at cursor %d", i, len(envs), froms[i],
			replayed, len(envs)-replayed, o.CaughtUps()[0].Cursor)
		if replayed == 0 || replayed == len(envs) {
			t.Fatalf("node %d: %d of %d envelopes read from the store: the handover under publishing did not happen", i, replayed, len(envs))
		}
	}
}

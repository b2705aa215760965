package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// recorder is a session owner that records its envelopes.
type recorder struct {
	mu   sync.Mutex
	envs []*echopubsub.Envelope
	pid  *actor.PID
}

func newRecorder(nd *test.Node) *recorder {
	r := &recorder{}
	r.pid = nd.System.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if e, ok := ctx.Message().(*echopubsub.Envelope); ok {
			r.mu.Lock()
			r.envs = append(r.envs, e)
			r.mu.Unlock()
		}
	}))
	return r
}

func (r *recorder) stamps() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.envs {
		s := e.Event.(*testpb.Stamp)
		out = append(out, fmt.Sprintf("%d:%s#%d", e.Cursor, s.Publisher, s.Seq))
	}
	return out
}

func fastConfig() echopubsub.Config {
	cfg := echopubsub.DefaultConfig("scores")
	cfg.BatchInterval = 10 * time.Millisecond
	cfg.CallTimeout = 500 * time.Millisecond
	cfg.RetryInterval = 20 * time.Millisecond
	cfg.SoftQueue, cfg.HardQueue = 50, 100
	return cfg
}

// TestReplayAfterFullClusterRestartPostgres: two nodes publish durable
// messages (each appends its own, once, to the shared store); every node
// stops and the database crashes (immediate shutdown: WAL recovery); all
// come back; a session on either node replays every row, and a cursor
// names the same row on both nodes.
func TestReplayAfterFullClusterRestartPostgres(t *testing.T) {
	prefix := newPrefix()
	nodes := test.StartCluster(t, 2, fastConfig())
	addrs := []string{nodes[0].Addr, nodes[1].Addr}
	start := func() {
		for _, nd := range nodes {
			s := open(t, prefix)
			t.Cleanup(func() { _ = s.Close() })
			nd.Start(t, fastConfig(), echopubsub.WithMembership(cluster.NewStatic(addrs...)),
				echopubsub.WithStore(s), echopubsub.WithDurableTopics("room:*"))
		}
	}
	for _, nd := range nodes {
		nd.StopPubSub(t)
	}
	start()
	for seq := uint64(1); seq <= 10; seq++ {
		for i, nd := range nodes {
			if err := nd.PS.Broadcast(nil, "room:1", &testpb.Stamp{Publisher: fmt.Sprint("n", i), Seq: seq}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, nd := range nodes {
		nd.StopPubSub(t)
	}
	if err := server.Crash(); err != nil {
		t.Fatal(err)
	}
	if err := server.Restart(); err != nil {
		t.Fatal(err)
	}
	start()

	var replayed [2][]string
	for i, nd := range nodes {
		r := newRecorder(nd)
		sess, err := nd.PS.OpenSession(r.pid)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := nd.PS.ReplaySession(ctx, sess.ID(), "room:1", echopubsub.ReplayOptions{Limit: 50})
		if err != nil || st.Delivered != 20 || st.ResumeCursor != 21 || st.Stopped {
			t.Fatalf("node %d: %+v, %v; want 20 rows", i, st, err)
		}
		test.Eventually(t, 10*time.Second, func() bool { return len(r.stamps()) == 20 },
			func() string { return fmt.Sprint(r.stamps()) })
		replayed[i] = r.stamps()
		last := map[string]uint64{}
		r.mu.Lock()
		for _, e := range r.envs {
			s := e.Event.(*testpb.Stamp)
			if s.Seq != last[s.Publisher]+1 {
				t.Fatalf("node %d: %s#%d after #%d", i, s.Publisher, s.Seq, last[s.Publisher])
			}
			last[s.Publisher] = s.Seq
		}
		r.mu.Unlock()
	}
	if fmt.Sprint(replayed[0]) != fmt.Sprint(replayed[1]) {
		t.Fatalf("the nodes replayed different rows:\n%v\n%v", replayed[0], replayed[1])
	}
}

package delivery_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

func oneNode(t testing.TB, mutate func(*echopubsub.Config)) *test.Node {
	t.Helper()
	cfg := echopubsub.DefaultConfig("bp")
	cfg.BatchInterval = 5 * time.Millisecond
	cfg.MaxPendingWrites = 100_000
	if mutate != nil {
		mutate(&cfg)
	}
	return test.StartCluster(t, 1, cfg)[0]
}

func notices(c *test.Collector) (dropping, resumed []*messages.BackPressure) {
	for _, m := range c.All() {
		if n, ok := m.(*messages.BackPressure); ok {
			switch n.State {
			case messages.BackPressureState_BACK_PRESSURE_STATE_DROPPING:
				dropping = append(dropping, n)
			case messages.BackPressureState_BACK_PRESSURE_STATE_RESUMED:
				resumed = append(resumed, n)
			}
		}
	}
	return
}

// A stalled subscriber's queue never grows past its bound; it gets exactly
// one dropping notice and, once it drains, one resumed notice; the other
// subscribers of the topic get everything.
func TestStalledSubscriberIsBoundedWithOneNoticePerTransition(t *testing.T) {
	for _, bound := range []int{10, 1} {
		t.Run(map[int]string{10: "bound=10", 1: "bound=1"}[bound], func(t *testing.T) {
			nd := oneNode(t, func(c *echopubsub.Config) { c.MaxQueueLen = bound })
			healthy := nd.Subscribe(t, "feed", echopubsub.WithMaxQueueLen(1_000_000)) // keeps up
			stalled := test.SpawnStalledCollector(nd.System)
			if err := nd.PS.Subscribe(stalled.PID, "feed"); err != nil {
				t.Fatal(err)
			}
			watcher := test.SpawnCollector(nd.System)
			if err := nd.PS.SetNoticeSubscriber(watcher.PID); err != nil {
				t.Fatal(err)
			}
			const n = 10_000
			for i := uint64(1); i <= n; i++ {
				nd.Broadcast(t, "feed", &testpb.Stamp{Seq: i})
			}
			test.Eventually(t, 20*time.Second, func() bool { return healthy.Len() == n }, healthy.Describe)
			stalled.Release()
			// One message was being handled when the stall began; at most
			// `bound` more were queued behind it.
			test.Eventually(t, 5*time.Second, func() bool { d, _ := notices(stalled); return len(d) == 1 }, stalled.Describe)
			if got := len(stalled.Stamps()); got > bound+1 || got == 0 {
				t.Fatalf("stalled subscriber received %d messages, want 1..%d", got, bound+1)
			}
			nd.Broadcast(t, "feed", &testpb.Stamp{Seq: n + 1})
			test.Eventually(t, 5*time.Second, func() bool {
				s := stalled.Stamps()
				return len(s) > 0 && s[len(s)-1] == n+1
			}, stalled.Describe)
			dropping, resumed := notices(stalled)
			if len(dropping) != 1 || len(resumed) != 1 {
				t.Fatalf("notices: %d dropping, %d resumed; want 1 and 1", len(dropping), len(resumed))
			}
			if d := dropping[0]; d.Bound != uint32(bound) || d.QueueLen < uint64(bound) ||
				d.Severity != messages.Severity_SEVERITY_WARNING {
				t.Fatalf("dropping notice %v", d)
			}
			if resumed[0].Severity != messages.Severity_SEVERITY_INFO {
				t.Fatalf("resumed notice %v", resumed[0])
			}
			// The notice brackets the gap in mailbox order: resumed comes
			// right before the first message after the gap.
			all := stalled.All()
			if _, ok := all[len(all)-2].(*messages.BackPressure); !ok {
				t.Fatalf("resumed notice is not just before the next message: %s", stalled.Describe())
			}
			// The watcher's copy of RESUMED was sent after the stalled
			// subscriber's, by the same send, but the watcher is another
			// actor: wait until it has it, then count both transitions.
			test.Eventually(t, 5*time.Second, func() bool { _, r := notices(watcher); return len(r) > 0 }, watcher.Describe)
			wd, wr := notices(watcher)
			if len(wd) != 1 || len(wr) != 1 {
				t.Fatalf("notice subscriber got %d dropping, %d resumed", len(wd), len(wr))
			}
			test.Eventually(t, 5*time.Second, func() bool { return healthy.Len() == n+1 }, healthy.Describe)
			if _, r := notices(healthy); len(r) != 0 {
				t.Fatal("the healthy subscriber got notices")
			}
		})
	}
}

func TestInvalidBoundsAreRejected(t *testing.T) {
	for _, v := range []int{0, -5} {
		cfg := echopubsub.DefaultConfig("bp")
		cfg.MaxQueueLen = v
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "MaxQueueLen") {
			t.Fatalf("MaxQueueLen %d: %v", v, err)
		}
	}
	nd := oneNode(t, nil)
	c := test.SpawnCollector(nd.System)
	for _, v := range []int{0, -1} {
		if err := nd.PS.Subscribe(c.PID, "feed", echopubsub.WithMaxQueueLen(v)); err == nil || !strings.Contains(err.Error(), "MaxQueueLen") {
			t.Fatalf("WithMaxQueueLen(%d): %v", v, err)
		}
	}
}

func TestUnmeasurableSubscriberMustOptIn(t *testing.T) {
	nd := oneNode(t, nil)
	got := make(chan interface{}, 1)
	plain := nd.System.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if s, ok := ctx.Message().(*testpb.Stamp); ok {
			got <- s
		}
	}))
	if err := nd.PS.Subscribe(plain, "feed"); err == nil || !strings.Contains(err.Error(), "SubscriberMailbox") {
		t.Fatalf("subscribing an unmeasurable mailbox: %v", err)
	}
	if err := nd.PS.Subscribe(plain, "feed", echopubsub.WithUnboundedQueue()); err != nil {
		t.Fatal(err)
	}
	nd.Broadcast(t, "feed", &testpb.Stamp{Seq: 1})
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("unbounded opt-in subscriber got nothing")
	}
}

func TestRestartingNamedSubscriberKeepsItsSubscription(t *testing.T) {
	nd := oneNode(t, nil)
	first, err := test.SpawnNamedCollector(nd.System, "scorer")
	if err != nil {
		t.Fatal(err)
	}
	if err := nd.PS.SubscribeNamed("scorer", "feed"); err != nil {
		t.Fatal(err)
	}
	nd.Broadcast(t, "feed", &testpb.Stamp{Seq: 1})
	test.Eventually(t, 5*time.Second, func() bool { return len(first.Stamps()) == 1 }, first.Describe)
	if err := nd.System.Root.StopFuture(first.PID).Wait(); err != nil {
		t.Fatal(err)
	}
	nd.Broadcast(t, "feed", &testpb.Stamp{Seq: 2}) // nobody answers the name: skipped
	nd.Stats(t)                                    // answered after the producer handled seq 2
	second, err := test.SpawnNamedCollector(nd.System, "scorer")
	if err != nil {
		t.Fatal(err)
	}
	nd.Broadcast(t, "feed", &testpb.Stamp{Seq: 3})
	test.Eventually(t, 5*time.Second, func() bool { s := second.Stamps(); return len(s) == 1 && s[0] == 3 }, second.Describe)
	if n := nd.PS.SubscriberCount("feed"); n != 1 {
		t.Fatalf("named subscription count %d, want 1", n)
	}
}

func TestDeadSubscribersArePruned(t *testing.T) {
	nd := oneNode(t, nil)
	var dead []*test.Collector
	for i := 0; i < 1000; i++ {
		c := test.SpawnCollector(nd.System)
		if err := nd.PS.Subscribe(c.PID, "feed"); err != nil {
			t.Fatal(err)
		}
		dead = append(dead, c)
	}
	live := nd.Subscribe(t, "feed")
	for _, c := range dead {
		nd.System.Root.Stop(c.PID)
	}
	test.Eventually(t, 10*time.Second, func() bool { return nd.PS.SubscriberCount("feed") == 1 },
		func() string { return "subscriptions left: " + itoa(nd.PS.SubscriberCount("feed")) })
	nd.Broadcast(t, "feed", &testpb.Stamp{Seq: 1})
	test.Eventually(t, 5*time.Second, func() bool { return live.Len() == 1 }, live.Describe)
}

func itoa(n int) string { return strconv.Itoa(n) }

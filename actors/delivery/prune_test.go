package delivery_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// stampLog is a subscriber spawned without SubscriberMailbox (so subscribed
// WithUnboundedQueue, and watched by the registry) that records the stamps
// it gets.
type stampLog struct {
	pid *actor.PID
	mu  sync.Mutex
	got []uint64
}

func spawnUnmeasured(system *actor.ActorSystem) *stampLog {
	l := &stampLog{}
	l.pid = system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if s, ok := ctx.Message().(*testpb.Stamp); ok {
			l.mu.Lock()
			l.got = append(l.got, s.Seq)
			l.mu.Unlock()
		}
	}))
	return l
}

func (l *stampLog) stamps() []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]uint64(nil), l.got...)
}

// inOrderFrom1 describes what is wrong with got as the stamps 1..n, "" if
// nothing.
func inOrderFrom1(got []uint64, n uint64) string {
	if uint64(len(got)) < n {
		return fmt.Sprintf("got %d stamps, want at least %d (first %v)", len(got), n, head(got))
	}
	for i, s := range got {
		if s != uint64(i)+1 {
			return fmt.Sprintf("stamp %d is %d (after %v)", i+1, s, got[max(0, i-3):i])
		}
	}
	return ""
}

// Many subscribers stopped at once, while their topic is broadcast: each
// stopped subscriber spawned with SubscriberMailbox is pruned by the time
// Stop returns (its mailbox drops its subscriptions before the Stop is
// posted), a watched one (WithUnboundedQueue) once it has terminated, and
// the live subscribers of the same topics, of both kinds, get every
// message, in order.
func TestStoppingManySubscribersPrunesThemAndKeepsTheLiveOnes(t *testing.T) {
	const measured, watched, topics = 2_000, 200, 50
	nd := oneNode(t, func(c *echopubsub.Config) { c.MaxQueueLen = 10_000_000 })
	live := nd.Subscribe(t, "feed")
	liveWatched := spawnUnmeasured(nd.System)
	if err := nd.PS.Subscribe(liveWatched.pid, "feed", echopubsub.WithUnboundedQueue()); err != nil {
		t.Fatal(err)
	}
	var doomed []*actor.PID
	watchedOnFeed := 0
	for i := 0; i < measured+watched; i++ {
		var pid *actor.PID
		var opts []echopubsub.SubscribeOption
		if i < measured {
			pid = test.SpawnCounter(nd.System).PID
		} else {
			pid = spawnUnmeasured(nd.System).pid
			opts = append(opts, echopubsub.WithUnboundedQueue())
		}
		subTo := []string{fmt.Sprintf("t%d", i%topics)}
		if i%20 == 0 { // some on the broadcast topic (all of them would make it a fan-out benchmark under -race)
			subTo = append(subTo, "feed")
			if i >= measured {
				watchedOnFeed++
			}
		}
		for _, topic := range subTo {
			if err := nd.PS.Subscribe(pid, topic, opts...); err != nil {
				t.Fatal(err)
			}
		}
		doomed = append(doomed, pid)
	}
	pub := startPublisher(nd, "feed", 1_000)
	// Until the doomed subscribers got some of it: they are stopped while
	// the topic is being delivered to them.
	test.Eventually(t, 10*time.Second, func() bool { return len(live.Stamps()) >= 20 }, live.Describe)
	for i, pid := range doomed {
		nd.System.Root.Stop(pid)
		if i == measured-1 {
			if n := nd.PS.SubscriberCount("feed"); n != 2+watchedOnFeed {
				t.Errorf("%d measured subscribers stopped: %d subscriptions to feed, want %d (the live ones and the watched doomed ones)", measured, n, 2+watchedOnFeed)
			}
		}
	}
	test.Eventually(t, 10*time.Second, func() bool {
		for i := 0; i < topics; i++ {
			if nd.PS.SubscriberCount(fmt.Sprintf("t%d", i)) != 0 {
				return false
			}
		}
		return nd.PS.SubscriberCount("feed") == 2
	}, func() string {
		return fmt.Sprintf("not pruned: %d subscriptions to feed (want 2), %d to t0", nd.PS.SubscriberCount("feed"), nd.PS.SubscriberCount("t0"))
	})
	// Some more after the pruning, then everything must have arrived.
	after := pub.started.Load() + 200
	test.Eventually(t, 10*time.Second, func() bool { return pub.started.Load() >= after }, func() string { return "publisher stalled" })
	pub.Stop(t)
	last := pub.started.Load()
	test.Eventually(t, 10*time.Second, func() bool {
		return uint64(len(live.Stamps())) >= last && uint64(len(liveWatched.stamps())) >= last
	}, func() string {
		return fmt.Sprintf("published %d: live got %d, live watched got %d", last, len(live.Stamps()), len(liveWatched.stamps()))
	})
	if e := inOrderFrom1(live.Stamps(), last); e != "" {
		t.Errorf("live subscriber: %s", e)
	}
	if e := inOrderFrom1(liveWatched.stamps(), last); e != "" {
		t.Errorf("live watched subscriber: %s", e)
	}
}

package delivery_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/actors/delivery"
	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// A Terminated for a subscriber that is still running (protoactor hands
// such messages from the wire to local actors) does not drop its
// subscription; a real termination still does.
//
// Both kinds: a subscriber spawned with SubscriberMailbox (pruned by its
// mailbox when told to stop, not watched) and one subscribed
// WithUnboundedQueue (watched: pruned on a Terminated the process registry
// confirms).
func TestForgedTerminatedDoesNotDropALiveSubscription(t *testing.T) {
	nd := oneNode(t, nil)
	live := nd.Subscribe(t, "feed")
	watched := spawnUnmeasured(nd.System)
	if err := nd.PS.Subscribe(watched.pid, "wfeed", echopubsub.WithUnboundedQueue()); err != nil {
		t.Fatal(err)
	}
	registry := actor.NewPID(nd.System.Address(), core.RootName("bp")+"/registry")
	proc, ok := nd.System.ProcessRegistry.GetLocal(registry.Id)
	if !ok {
		t.Fatal("registry not found")
	}
	for _, pid := range []*actor.PID{live.PID, watched.pid} {
		forged := &actor.Terminated{Who: pid}
		nd.System.Root.Send(registry, forged)    // as a user message
		proc.SendSystemMessage(registry, forged) // as protoactor's remote hands a wire system message over
	}
	// A registry round trip: it answers after handling what was sent
	// before (system messages first, then user messages in order).
	if res, err := nd.System.Root.RequestFuture(registry, &delivery.Subscribe{Name: "round-trip", Topic: "rt"}, 5*time.Second).Result(); err != nil || res.(*delivery.Reply).Err != nil {
		t.Fatalf("registry round trip: %v %v", err, res)
	}
	other := nd.Subscribe(t, "other")
	if n := nd.PS.SubscriberCount("feed"); n != 1 {
		t.Fatalf("after a forged Terminated: %d subscriptions to feed, want 1", n)
	}
	if n := nd.PS.SubscriberCount("wfeed"); n != 1 {
		t.Fatalf("after a forged Terminated: %d subscriptions to wfeed (a watched subscriber), want 1", n)
	}
	nd.Broadcast(t, "feed", &testpb.Stamp{Seq: 1})
	nd.Broadcast(t, "wfeed", &testpb.Stamp{Seq: 1})
	test.Eventually(t, 5*time.Second, func() bool { return len(live.Stamps()) == 1 }, live.Describe)
	test.Eventually(t, 5*time.Second, func() bool { return len(watched.stamps()) == 1 },
		func() string { return fmt.Sprintf("watched subscriber got %v", watched.stamps()) })
	if err := nd.System.Root.StopFuture(watched.pid).Wait(); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 5*time.Second, func() bool { return nd.PS.SubscriberCount("wfeed") == 0 },
		func() string { return "a stopped watched subscriber was not pruned" })

	if err := nd.System.Root.StopFuture(live.PID).Wait(); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 5*time.Second, func() bool { return nd.PS.SubscriberCount("feed") == 0 },
		func() string { return "a stopped subscriber was not pruned" })
	if n := nd.PS.SubscriberCount("other"); n != 1 {
		t.Fatalf("other: %d subscriptions, want 1", n)
	}
	_ = other
}

func TestNoticeSubscriberMustBeLocalAndMeasurable(t *testing.T) {
	nd := oneNode(t, nil)
	remote := actor.NewPID("elsewhere:1234", "watcher")
	if err := nd.PS.SetNoticeSubscriber(remote); !errors.Is(err, echopubsub.ErrNotLocal) {
		t.Fatalf("remote notice subscriber: %v, want ErrNotLocal", err)
	}
	plain := nd.System.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	if err := nd.PS.SetNoticeSubscriber(plain); !errors.Is(err, echopubsub.ErrUnmeasurable) {
		t.Fatalf("unmeasurable notice subscriber: %v, want ErrUnmeasurable", err)
	}
	if err := nd.PS.SetNoticeSubscriber(test.SpawnCollector(nd.System).PID); err != nil {
		t.Fatal(err)
	}
	if err := nd.PS.SetNoticeSubscriber(nil); err != nil {
		t.Fatal(err)
	}
}

// The notice subscriber is bounded like any subscriber: a stalled one gets
// at most its bound of copies (plus the one it is handling), then one
// DROPPING notice about itself, and once it drains, RESUMED before the next
// copy.
func TestNoticeSubscriberIsBounded(t *testing.T) {
	const bound, stalledSubs = 5, 50
	nd := oneNode(t, func(c *echopubsub.Config) { c.MaxQueueLen = bound })
	watcher := test.SpawnStalledCollector(nd.System)
	if err := nd.PS.SetNoticeSubscriber(watcher.PID); err != nil {
		t.Fatal(err)
	}
	self := watcher.PID.Address + "/" + watcher.PID.Id
	var stalled []*test.Collector
	for i := 0; i < stalledSubs; i++ {
		c := test.SpawnStalledCollector(nd.System)
		if err := nd.PS.Subscribe(c.PID, "feed", echopubsub.WithMaxQueueLen(1)); err != nil {
			t.Fatal(err)
		}
		stalled = append(stalled, c)
	}
	// Each stalled subscriber holds seq 1, queues seq 2 and is dropped for
	// from seq 3: one DROPPING notice each, 50 copies for the watcher.
	for seq := uint64(1); seq <= 3; seq++ {
		nd.Broadcast(t, "feed", &testpb.Stamp{Seq: seq})
	}
	nd.Stats(t) // answered after the producer handled (and delivered) seq 1..3
	watcher.Release()
	about := func(subscriber string, state messages.BackPressureState) (n int) {
		for _, m := range watcher.All() {
			if bp, ok := m.(*messages.BackPressure); ok && (bp.Subscriber == self) == (subscriber == self) && bp.State == state {
				n++
			}
		}
		return n
	}
	test.Eventually(t, 5*time.Second, func() bool {
		return about(self, messages.BackPressureState_BACK_PRESSURE_STATE_DROPPING) == 1
	}, watcher.Describe)
	if n := about("others", messages.BackPressureState_BACK_PRESSURE_STATE_DROPPING); n == 0 || n > bound+1 {
		t.Fatalf("the stalled notice subscriber got %d copies, want 1..%d: %s", n, bound+1, watcher.Describe())
	}
	// Drained: the next copies come after a RESUMED notice about itself.
	for _, c := range stalled {
		c.Release()
	}
	test.Eventually(t, 10*time.Second, func() bool { // each has drained its queue (the notice came last)
		for _, c := range stalled {
			if d, _ := notices(c); len(d) != 1 {
				return false
			}
		}
		return true
	}, func() string { return "stalled subscribers did not drain" })
	nd.Broadcast(t, "feed", &testpb.Stamp{Seq: 4}) // each stalled subscriber resumes: 50 RESUMED notices
	test.Eventually(t, 5*time.Second, func() bool {
		return about("others", messages.BackPressureState_BACK_PRESSURE_STATE_RESUMED) > 0
	}, watcher.Describe)
	all := watcher.All()
	for i, m := range all {
		if bp, ok := m.(*messages.BackPressure); ok && bp.Subscriber != self && bp.State == messages.BackPressureState_BACK_PRESSURE_STATE_RESUMED {
			prev, _ := all[i-1].(*messages.BackPressure)
			if prev == nil || prev.Subscriber != self || prev.State != messages.BackPressureState_BACK_PRESSURE_STATE_RESUMED {
				t.Fatalf("first copy after the gap is not preceded by the notice subscriber's own RESUMED: %v", prev)
			}
			break
		}
	}
}

// A named subscriber that was not running while messages for its topic were
// delivered is told, when it is next resolved, what it missed (topic and
// count), and then gets everything after.
func TestNamedSubscriberIsToldWhatItMissed(t *testing.T) {
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
	for seq := uint64(2); seq <= 51; seq++ { // 50 messages while nothing answers to the name
		nd.Broadcast(t, "feed", &testpb.Stamp{Seq: seq})
	}
	nd.Stats(t) // answered after the producer handled (and delivered) seq 2..51
	second, err := test.SpawnNamedCollector(nd.System, "scorer")
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(52); seq <= 60; seq++ {
		nd.Broadcast(t, "feed", &testpb.Stamp{Seq: seq})
	}
	test.Eventually(t, 5*time.Second, func() bool { return len(second.Stamps()) == 9 }, second.Describe)
	all := second.All()
	missed, ok := all[0].(*messages.Missed)
	if !ok {
		t.Fatalf("first message after the restart is %T, want *messages.Missed: %s", all[0], second.Describe())
	}
	if missed.Topic != "feed" || missed.Count != 50 || missed.Subscriber != "scorer" {
		t.Fatalf("missed notice %v, want topic feed, count 50, subscriber scorer", missed)
	}
	s := second.Stamps()
	for i, seq := range s {
		if seq != uint64(52+i) {
			t.Fatalf("after the notice: stamps %v, want 52..60", s)
		}
	}
	if len(all) != 10 {
		t.Fatalf("%d messages, want the notice and 9 stamps: %s", len(all), second.Describe())
	}
}

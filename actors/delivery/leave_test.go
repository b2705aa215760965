package delivery_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// Leaving many topics (issue 37 item 8): one subscriber of manyTopics
// topics leaves them all, by Unsubscribe or by dying. Each topic left must
// cost O(1), not O(the topics it still holds): a scan of the subscriber's
// subscriptions per Unsubscribe took 38 s to leave 100,000 topics.
const (
	manyTopics = 100_000
	// sharedEvery: every sharedEvery-th topic also has another subscriber,
	// which must keep it.
	sharedEvery = 1000
)

// leaveWithin bounds leaving manyTopics topics, given how long subscribing
// to them took: at most 1 s, or 3 times the subscribing when that took
// longer (-race, a loaded machine). Leaving a topic does what joining it
// did, undone: here it takes about 0.1 s (2.5 s under -race, where
// subscribing took 2 s). A scan per Unsubscribe takes tens of seconds.
func leaveWithin(subscribing time.Duration) time.Duration { return max(time.Second, 3*subscribing) }

func manyTopic(i int) string { return fmt.Sprintf("t%d", i) }

// subscribeMany subscribes pid to manyTopics topics, and other to every
// sharedEvery-th of them.
// It returns how long it took.
func subscribeMany(t *testing.T, nd *test.Node, pid, other *actor.PID, opts ...echopubsub.SubscribeOption) time.Duration {
	t.Helper()
	start := time.Now()
	for i := 0; i < manyTopics; i++ {
		if err := nd.PS.Subscribe(pid, manyTopic(i), opts...); err != nil {
			t.Fatal(err)
		}
		if i%sharedEvery == 0 {
			if err := nd.PS.Subscribe(other, manyTopic(i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	took := time.Since(start)
	t.Logf("subscribed to %d topics in %v", manyTopics, took)
	return took
}

// pruned describes a topic whose subscriptions are not only other's ("" if
// none): the subscriber that left holds none of them.
func pruned(nd *test.Node) string {
	for i := 0; i < manyTopics; i++ {
		want := 0
		if i%sharedEvery == 0 {
			want = 1
		}
		if n := nd.PS.SubscriberCount(manyTopic(i)); n != want {
			return fmt.Sprintf("%s has %d subscriptions, want %d", manyTopic(i), n, want)
		}
	}
	return ""
}

// stillDelivered checks that other still gets a shared topic's messages,
// and that leaver, still subscribed to "keep" (when not nil), gets its
// messages and nothing of the topics it left.
func stillDelivered(t *testing.T, nd *test.Node, leaver, other *test.Collector) {
	t.Helper()
	nd.Broadcast(t, manyTopic(sharedEvery), &testpb.Stamp{Seq: 1}) // left by leaver, kept by other
	nd.Broadcast(t, "keep", &testpb.Stamp{Seq: 2})
	test.Eventually(t, 10*time.Second, func() bool { return len(other.Stamps()) == 1 }, other.Describe)
	if got := other.Stamps(); got[0] != 1 {
		t.Fatalf("other subscriber got %v, want [1]", got)
	}
	if leaver == nil {
		return
	}
	// Delivered in order: once 2 arrived, 1 would have arrived before it.
	test.Eventually(t, 10*time.Second, func() bool { return len(leaver.Stamps()) >= 1 }, leaver.Describe)
	if got := leaver.Stamps(); len(got) != 1 || got[0] != 2 {
		t.Fatalf("the subscriber that left %d topics got %v, want only [2] from the topic it kept", manyTopics, got)
	}
}

// TestUnsubscribeFromManyTopicsCostsO1Each: a subscriber of 100,000 topics
// (and of "keep") unsubscribes from all of them within leaveWithin (1 s
// unless subscribing took longer); the topics it left lose only its
// subscription (another subscriber of some of them keeps its own and still
// gets their messages), and it still gets "keep"'s messages and nothing
// else.
func TestUnsubscribeFromManyTopicsCostsO1Each(t *testing.T) {
	nd := oneNode(t, nil)
	leaver := nd.Subscribe(t, "keep")
	other := test.SpawnCollector(nd.System)
	limit := leaveWithin(subscribeMany(t, nd, leaver.PID, other.PID))
	start := time.Now()
	for i := 0; i < manyTopics; i++ {
		if err := nd.PS.Unsubscribe(leaver.PID, manyTopic(i)); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 999 {
			if took := time.Since(start); took > limit {
				t.Fatalf("left %d of %d topics in %v (limit %v for all): each Unsubscribe costs more the more topics the subscriber holds",
					i+1, manyTopics, took, limit)
			}
		}
	}
	t.Logf("unsubscribed from %d topics in %v", manyTopics, time.Since(start))
	if e := pruned(nd); e != "" {
		t.Fatal(e)
	}
	if n := nd.PS.SubscriberCount("keep"); n != 1 {
		t.Fatalf("keep has %d subscriptions, want 1", n)
	}
	stillDelivered(t, nd, leaver, other)
}

// TestStoppingASubscriberOfManyTopicsPrunesIt: a subscriber of 100,000
// topics is stopped; its subscriptions are all dropped within leaveWithin
// (1 s unless subscribing took longer), and another subscriber of some of the same topics keeps its own and
// still gets their messages. Both kinds: spawned with SubscriberMailbox
// (pruned by its mailbox when told to stop) and subscribed
// WithUnboundedQueue (watched: pruned on its Terminated).
func TestStoppingASubscriberOfManyTopicsPrunesIt(t *testing.T) {
	for _, watched := range []bool{false, true} {
		t.Run(fmt.Sprintf("watched=%v", watched), func(t *testing.T) {
			nd := oneNode(t, nil)
			other := test.SpawnCollector(nd.System)
			var pid *actor.PID
			var opts []echopubsub.SubscribeOption
			if watched {
				pid = spawnUnmeasured(nd.System).pid
				opts = append(opts, echopubsub.WithUnboundedQueue())
			} else {
				pid = test.SpawnCounter(nd.System).PID
			}
			limit := leaveWithin(subscribeMany(t, nd, pid, other.PID, opts...))
			start := time.Now()
			nd.System.Root.Stop(pid)
			test.Eventually(t, limit, func() bool { return pruned(nd) == "" }, func() string {
				return fmt.Sprintf("a stopped subscriber of %d topics not pruned within %v: %s", manyTopics, limit, pruned(nd))
			})
			// A subscriber spawned with SubscriberMailbox is pruned inside Stop.
			if took := time.Since(start); took > limit {
				t.Fatalf("a stopped subscriber of %d topics pruned in %v (limit %v)", manyTopics, took, limit)
			}
			t.Logf("pruned %d topics in %v", manyTopics, time.Since(start))
			stillDelivered(t, nd, nil, other)
		})
	}
}

// TestSubscribedTwiceLeavesBothAtOnce: a subscriber subscribed twice to a
// topic gets its messages twice, and one Unsubscribe leaves both
// subscriptions; its other topics keep theirs, and when it stops nothing is
// left. With a few topics (a subscriber's plain list) and with more than
// the list holds (its index by topic).
func TestSubscribedTwiceLeavesBothAtOnce(t *testing.T) {
	for _, topics := range []int{2, 20} {
		t.Run(fmt.Sprintf("topics=%d", topics), func(t *testing.T) {
			nd := oneNode(t, nil)
			c := test.SpawnCollector(nd.System)
			first, last := manyTopic(0), manyTopic(topics-1)
			for i := 0; i < topics; i++ {
				if err := nd.PS.Subscribe(c.PID, manyTopic(i)); err != nil {
					t.Fatal(err)
				}
			}
			for _, topic := range []string{first, last} {
				if err := nd.PS.Subscribe(c.PID, topic); err != nil {
					t.Fatal(err)
				}
				if n := nd.PS.SubscriberCount(topic); n != 2 {
					t.Fatalf("%s: %d subscriptions, want 2", topic, n)
				}
			}
			nd.Broadcast(t, first, &testpb.Stamp{Seq: 1})
			test.Eventually(t, 10*time.Second, func() bool { return len(c.Stamps()) == 2 }, c.Describe)
			if err := nd.PS.Unsubscribe(c.PID, first); err != nil {
				t.Fatal(err)
			}
			if n := nd.PS.SubscriberCount(first); n != 0 {
				t.Fatalf("after one Unsubscribe, %s has %d subscriptions, want 0", first, n)
			}
			if n := nd.PS.SubscriberCount(last); n != 2 {
				t.Fatalf("%s: %d subscriptions, want 2", last, n)
			}
			nd.Broadcast(t, first, &testpb.Stamp{Seq: 2}) // no longer its topic
			nd.Broadcast(t, last, &testpb.Stamp{Seq: 3})
			test.Eventually(t, 10*time.Second, func() bool { return len(c.Stamps()) >= 4 }, c.Describe)
			if got := fmt.Sprint(c.Stamps()); got != "[1 1 3 3]" {
				t.Fatalf("got stamps %s, want [1 1 3 3]", got)
			}
			if err := nd.System.Root.StopFuture(c.PID).Wait(); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < topics; i++ {
				if n := nd.PS.SubscriberCount(manyTopic(i)); n != 0 {
					t.Fatalf("stopped: %s still has %d subscriptions", manyTopic(i), n)
				}
			}
		})
	}
}

package delivery

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Subscriptions at scale (issue 19).
//
// The node holds `held` subscriptions, 10 per topic. They are named
// subscriptions: a name costs the registry what a PID costs it (one
// subscriber entry, one subscription) but needs no actor, which is what
// makes a million of them fit in a benchmark. The timed Subscribes are of
// real actors spawned with SubscriberMailbox (watched, mailbox measured),
// made as ps.Subscribe makes them (Dispatcher.Apply, in the caller's
// goroutine) and, "via-actor", as a request to the registry actor, reply
// included.

const subsPerTopic = 10

// fill subscribes held names, subsPerTopic per topic, pipelining the
// requests (the registry answers them in order).
func (n *benchNode) fill(b *testing.B, held int) {
	const window = 10_000
	futures := make([]*actor.Future, 0, window)
	wait := func() {
		for _, f := range futures {
			res, err := f.Result()
			if err != nil || res.(*Reply).Err != nil {
				b.Fatalf("fill: %v %v", err, res)
			}
		}
		futures = futures[:0]
	}
	for i := 0; i < held; i++ {
		futures = append(futures, n.system.Root.RequestFuture(n.registry,
			&Subscribe{Name: fmt.Sprintf("n%d", i), Topic: fmt.Sprintf("t%d", i/subsPerTopic)}, time.Minute))
		if len(futures) == window {
			wait()
		}
	}
	wait()
}

// warmFutures grows protoactor's process registry to hold fill's window
// of futures in flight before the heap is measured: its buckets do not
// shrink, and they are not the subscriptions' memory.
func (n *benchNode) warmFutures(b *testing.B) {
	n.fill(b, 10_000)
	futures := make([]*actor.Future, 0, 10_000)
	for i := 0; i < 10_000; i++ {
		futures = append(futures, n.system.Root.RequestFuture(n.registry,
			&Unsubscribe{Name: fmt.Sprintf("n%d", i), Topic: fmt.Sprintf("t%d", i/subsPerTopic)}, time.Minute))
	}
	for _, f := range futures {
		if _, err := f.Result(); err != nil {
			b.Fatal(err)
		}
	}
}

func (n *benchNode) apply(b *testing.B, req interface{}) {
	if ok, err := n.d.Apply(n.registry, req); !ok || err != nil {
		b.Fatalf("%T: %v %v", req, ok, err)
	}
}

func (n *benchNode) ask(b *testing.B, req interface{}) {
	res, err := n.system.Root.RequestFuture(n.registry, req, 10*time.Second).Result()
	if err != nil || res.(*Reply).Err != nil {
		b.Fatalf("%T: %v %v", req, err, res)
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkSubscribe is the cost of one Subscribe and one Unsubscribe of an
// actor while the node holds `held` subscriptions (the table of issue 19),
// and the registry's memory per held subscription.
func BenchmarkSubscribe(b *testing.B) {
	for _, held := range []int{1_000, 10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("held=%d", held), func(b *testing.B) {
			n := newBenchNode(b)
			sinks := make([]*actor.PID, 1000)
			for i := range sinks {
				sinks[i] = n.sink()
			}
			n.warmFutures(b)
			before := heapInUse()
			start := time.Now()
			n.fill(b, held)
			fillTook := time.Since(start)
			after := heapInUse()
			topics := held / subsPerTopic
			var sub, unsub, subActor, unsubActor time.Duration
			i := 0
			b.ResetTimer()
			for b.Loop() {
				pid := sinks[i%len(sinks)]
				topic := fmt.Sprintf("t%d", (i*7919)%topics)
				i++
				// As PubSub.Subscribe does: in the caller's goroutine.
				t0 := time.Now()
				n.apply(b, &Subscribe{PID: pid, Topic: topic})
				t1 := time.Now()
				n.apply(b, &Unsubscribe{PID: pid, Topic: topic})
				t2 := time.Now()
				// As a request to the registry actor.
				n.ask(b, &Subscribe{PID: pid, Topic: topic})
				t3 := time.Now()
				n.ask(b, &Unsubscribe{PID: pid, Topic: topic})
				unsubActor += time.Since(t3)
				subActor += t3.Sub(t2)
				unsub += t2.Sub(t1)
				sub += t1.Sub(t0)
			}
			b.ReportMetric(float64(sub.Nanoseconds())/float64(b.N)/1000, "us/subscribe")
			b.ReportMetric(float64(unsub.Nanoseconds())/float64(b.N)/1000, "us/unsubscribe")
			b.ReportMetric(float64(subActor.Nanoseconds())/float64(b.N)/1000, "us/subscribe-via-actor")
			b.ReportMetric(float64(unsubActor.Nanoseconds())/float64(b.N)/1000, "us/unsubscribe-via-actor")
			b.ReportMetric(float64(fillTook.Nanoseconds())/float64(held)/1000, "us/fill-subscribe")
			b.ReportMetric(float64(int64(after)-int64(before))/float64(held), "B/held-sub")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkUnsubscribeManyTopics is the cost of one Unsubscribe, and of
// the Subscribe that puts the topic back, of a subscriber that holds
// `topics` topics, each a random one of them: O(1), whatever it holds
// (issue 37: a scan of the subscriber's list made an Unsubscribe 2 us at
// 1,000 topics and 378 us at 100,000). What still grows from 1,000 to
// 100,000 is the memory's: the tables no longer fit in the CPU's caches,
// and Unsubscribe grows as Subscribe does.
func BenchmarkUnsubscribeManyTopics(b *testing.B) {
	for _, topics := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("topics=%d", topics), func(b *testing.B) {
			n := newBenchNode(b)
			pid := n.sink()
			names := make([]string, topics)
			for i := range names {
				names[i] = fmt.Sprintf("t%d", i)
				n.apply(b, &Subscribe{PID: pid, Topic: names[i]})
			}
			var unsub, sub time.Duration
			i := 0
			b.ResetTimer()
			for b.Loop() {
				topic := names[(i*7919)%topics]
				i++
				t0 := time.Now()
				n.apply(b, &Unsubscribe{PID: pid, Topic: topic})
				t1 := time.Now()
				n.apply(b, &Subscribe{PID: pid, Topic: topic})
				sub += time.Since(t1)
				unsub += t1.Sub(t0)
			}
			b.ReportMetric(float64(unsub.Nanoseconds())/float64(b.N)/1000, "us/unsubscribe")
			b.ReportMetric(float64(sub.Nanoseconds())/float64(b.N)/1000, "us/subscribe")
		})
	}
}

// BenchmarkSubscriptionMemory is the heap one subscription of an actor adds
// (registry entries; an actor spawned with SubscriberMailbox is not
// watched, so nothing is added to the actor itself): 100,000 sink actors,
// spawned first, then subscribed subsPerTopic per topic. B/watch-in-actor
// is what a watch costs a watched actor (its context extras and watcher
// set): what every subscribed actor carried when the registry watched
// them all, and what a subscriber subscribed WithUnboundedQueue still does.
func BenchmarkSubscriptionMemory(b *testing.B) {
	const count = 100_000
	{ // once, whatever b.N: it takes longer than -benchtime
		n := newBenchNode(b)
		sinks := make([]*actor.PID, count)
		for i := range sinks {
			sinks[i] = n.sink()
		}
		n.warmFutures(b)
		before := heapInUse()
		const window = 10_000
		futures := make([]*actor.Future, 0, window)
		for i, pid := range sinks {
			futures = append(futures, n.system.Root.RequestFuture(n.registry,
				&Subscribe{PID: pid, Topic: fmt.Sprintf("t%d", i/subsPerTopic)}, time.Minute))
			if len(futures) == window || i == len(sinks)-1 {
				for _, f := range futures {
					if res, err := f.Result(); err != nil || res.(*Reply).Err != nil {
						b.Fatalf("subscribe: %v %v", err, res)
					}
				}
				futures = futures[:0]
			}
		}
		after := heapInUse()
		// What a watch costs a watched actor (protoactor allocates the
		// actor's extras and a watcher set): as many other sinks, watched
		// by an actor that does nothing else.
		others := make([]*actor.PID, count)
		for i := range others { // sinks that answer a ping
			others[i] = n.system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
				if _, ok := ctx.Message().(*wrapperspb.BoolValue); ok {
					ctx.Respond(&wrapperspb.BoolValue{})
				}
			}, actor.WithMailbox(SubscriberMailbox())))
		}
		done := make(chan struct{})
		watcher := n.system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
			if pids, ok := ctx.Message().([]*actor.PID); ok {
				for _, pid := range pids {
					ctx.Watch(pid)
				}
				close(done)
			}
		}))
		unwatched := heapInUse()
		n.system.Root.Send(watcher, others)
		<-done
		// Each Watch is a system message to the sink, handled before its
		// user messages: a ping answered means its Watch was handled.
		for _, pid := range others {
			if _, err := n.system.Root.RequestFuture(pid, &wrapperspb.BoolValue{}, time.Minute).Result(); err != nil {
				b.Fatal(err)
			}
		}
		watched := heapInUse()
		b.ReportMetric(float64(int64(after)-int64(before))/count, "B/sub")
		b.ReportMetric(float64(int64(watched)-int64(unwatched))/count, "B/watch-in-actor")
		b.ReportMetric(0, "ns/op")
		runtime.KeepAlive(sinks)
		runtime.KeepAlive(others)
	}
}

// BenchmarkDeliverOneSubscriber broadcasts to a topic with one subscriber
// while `held` subscriptions to other topics sit on the node: the cost must
// not grow with them.
func BenchmarkDeliverOneSubscriber(b *testing.B) {
	for _, held := range []int{0, 1_000_000} {
		b.Run(fmt.Sprintf("held=%d", held), func(b *testing.B) {
			n := newBenchNode(b)
			n.fill(b, held)
			n.subscribe(b, n.sink(), "solo")
			it := &Item{Topic: "solo", Message: &wrapperspb.UInt64Value{Value: 1}}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				n.d.Deliver(it)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "us/deliver")
		})
	}
}

// BenchmarkFanOutWide delivers to a topic with 10,000 subscribers;
// us/subscriber is the cost per subscriber of one Deliver. "sinks" are
// actors that discard what they get, so most sends also wake an idle actor
// (a goroutine each); "busy" subscribers are held inside their first
// message, so a send only enqueues: that is the dispatcher's own cost.
func BenchmarkFanOutWide(b *testing.B) {
	const width = 10_000
	for _, kind := range []string{"sinks", "busy"} {
		b.Run(kind, func(b *testing.B) {
			n := newBenchNode(b)
			gate := make(chan struct{})
			for i := 0; i < width; i++ {
				pid := n.sink()
				if kind == "busy" {
					pid = n.system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
						if _, ok := ctx.Message().(*wrapperspb.BoolValue); ok {
							<-gate
						}
					}, actor.WithMailbox(SubscriberMailbox())))
					n.system.Root.Send(pid, &wrapperspb.BoolValue{})
				}
				n.subscribe(b, pid, "wide")
			}
			b.Cleanup(func() { close(gate) })
			it := &Item{Topic: "wide", Message: &wrapperspb.UInt64Value{Value: 1}}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				n.d.Deliver(it)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/width/1000, "us/subscriber")
		})
	}
}

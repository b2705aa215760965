package delivery_test

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/internal/proc"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// publisher broadcasts numbered stamps on topic at about rate a second, in
// bursts each millisecond. started is the last seq whose Broadcast began:
// a seq above a value read after Subscribe returned was published after it.
type publisher struct {
	nd      *test.Node
	topic   string
	rate    int
	started atomic.Uint64
	err     atomic.Value
	stop    chan struct{}
	done    chan struct{}
}

func startPublisher(nd *test.Node, topic string, rate int) *publisher {
	p := &publisher{nd: nd, topic: topic, rate: rate, stop: make(chan struct{}), done: make(chan struct{})}
	go p.run()
	return p
}

func (p *publisher) run() {
	defer close(p.done)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	begin := time.Now()
	for {
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
		// Catches up after a late tick, by at most 10 ticks' worth: a
		// slow machine (or -race) gets a lower rate, not a flood.
		due := uint64(time.Since(begin).Seconds() * float64(p.rate))
		due = min(due, p.started.Load()+uint64(p.rate/100))
		for seq := p.started.Load() + 1; seq <= due; seq++ {
			p.started.Store(seq)
			if err := p.nd.PS.Broadcast(nil, p.topic, &testpb.Stamp{Seq: seq, SentUnixNano: time.Now().UnixNano()}); err != nil {
				p.err.Store(err)
				return
			}
		}
	}
}

func (p *publisher) Stop(t testing.TB) {
	close(p.stop)
	<-p.done
	if err, _ := p.err.Load().(error); err != nil {
		t.Fatalf("broadcast: %v", err)
	}
}

// churn subscribes and unsubscribes pairs a second (spread over topics,
// one in two on hot, unless hot is "") until stop is closed, and counts
// them. hot "echo" makes each pair two requests to an actor that only
// answers instead: the cost of the request traffic alone.
func churn(t testing.TB, nd *test.Node, hot string, pairs int, stop chan struct{}) (wait func() int) {
	subs := make([]*test.Collector, 64)
	for i := range subs {
		subs[i] = test.SpawnCounter(nd.System)
	}
	echo := nd.System.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if _, ok := ctx.Message().(*testpb.Stamp); ok {
			ctx.Respond(ctx.Message())
		}
	}))
	var n atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		begin := time.Now()
		for i := 0; ; {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			due := min(int(time.Since(begin).Seconds()*float64(pairs)), i+pairs/100) // as the publisher
			for ; i < due; i++ {
				c, topic := subs[i%len(subs)], hot
				if hot == "echo" { // the control: two plain requests to an actor, no registry
					for k := 0; k < 2; k++ {
						if _, err := nd.System.Root.RequestFuture(echo, &testpb.Stamp{}, 5*time.Second).Result(); err != nil {
							failed.Store(err)
							return
						}
					}
					n.Add(1)
					continue
				}
				if i%2 == 1 || hot == "" {
					topic = fmt.Sprintf("churn-%d", i%1000)
				}
				if err := nd.PS.Subscribe(c.PID, topic); err != nil {
					failed.Store(err)
					return
				}
				if err := nd.PS.Unsubscribe(c.PID, topic); err != nil {
					failed.Store(err)
					return
				}
				n.Add(1)
			}
		}
	}()
	return func() int {
		wg.Wait()
		if err, _ := failed.Load().(error); err != nil {
			t.Fatalf("churn: %v", err)
		}
		return int(n.Load())
	}
}

// The guarantee under churn: a subscriber gets every message published
// after its Subscribe returned, in order, while 10,000 subscribe and
// unsubscribe pairs a second change the same topic's list (and others) and
// 50,000 messages a second are broadcast on it.
func TestSubscriberGetsEverythingPublishedAfterSubscribeUnderChurn(t *testing.T) {
	nd := oneNode(t, func(c *echopubsub.Config) {
		c.MaxQueueLen = 10_000_000
		// A machine that cannot deliver 50,000 a second (-race, load)
		// slows the publisher down instead of queueing seconds of writes.
		c.MaxPendingWrites = 2_000
	})
	pub := startPublisher(nd, "feed", 50_000)
	stop := make(chan struct{})
	churned := churn(t, nd, "feed", 10_000, stop)
	deadline := time.Now().Add(3 * time.Second)
	var rounds atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan string, 16)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				c := test.SpawnCollector(nd.System)
				if err := nd.PS.Subscribe(c.PID, "feed"); err != nil {
					errs <- err.Error()
					return
				}
				after := pub.started.Load() // seqs above it were published after Subscribe returned
				ok := proc.Until(20*time.Second, time.Millisecond, func() bool {
					s := c.Stamps()
					return len(s) > 0 && s[len(s)-1] > after+50
				})
				if err := nd.PS.Unsubscribe(c.PID, "feed"); err != nil {
					errs <- err.Error()
					return
				}
				_ = nd.System.Root.StopFuture(c.PID).Wait()
				s := c.Stamps()
				if !ok {
					errs <- fmt.Sprintf("subscribed after seq %d: nothing past %d within 20s: %s", after, after+50, c.Describe())
					return
				}
				i := slices.Index(s, after+1)
				if i < 0 {
					errs <- fmt.Sprintf("subscribed after seq %d: seq %d never arrived (got %v...)", after, after+1, head(s))
					return
				}
				for j := i + 1; j < len(s); j++ {
					if s[j] != s[j-1]+1 {
						errs <- fmt.Sprintf("subscribed after seq %d: %d followed by %d", after, s[j-1], s[j])
						return
					}
				}
				rounds.Add(1)
			}
		}()
	}
	wg.Wait()
	close(stop)
	pairs := churned()
	pub.Stop(t)
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	t.Logf("%d checked subscriptions, %d churn pairs, %d messages published", rounds.Load(), pairs, pub.started.Load())
	if rounds.Load() < 5 {
		t.Fatalf("only %d subscriptions checked", rounds.Load())
	}
}

func head(s []uint64) []uint64 {
	if len(s) > 10 {
		return s[:10]
	}
	return s
}

// latencies is a subscriber that records publish-to-receipt times.
type latencies struct {
	pid  *actor.PID
	mu   sync.Mutex
	lat  []time.Duration
	last atomic.Uint64
}

func spawnLatencies(system *actor.ActorSystem) *latencies {
	l := &latencies{}
	l.pid = system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if s, ok := ctx.Message().(*testpb.Stamp); ok {
			d := time.Since(time.Unix(0, s.SentUnixNano))
			l.mu.Lock()
			l.lat = append(l.lat, d)
			l.mu.Unlock()
			l.last.Store(s.Seq)
		}
	}, actor.WithMailbox(echopubsub.SubscriberMailbox())))
	return l
}

// take returns and forgets the latencies recorded so far.
func (l *latencies) take() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.lat
	l.lat = nil
	return out
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p)]
}

func reportLatency(b *testing.B, prefix string, d []time.Duration) {
	b.ReportMetric(float64(percentile(d, 0.5).Microseconds()), prefix+"p50-us")
	b.ReportMetric(float64(percentile(d, 0.99).Microseconds()), prefix+"p99-us")
	b.ReportMetric(float64(percentile(d, 1).Microseconds()), prefix+"max-us")
}

// BenchmarkChurn is publish-to-subscriber latency on a topic broadcast at
// 50,000 messages a second, without and with 10,000 subscribe/unsubscribe
// pairs a second: half of them on that topic (on=feed), or none (on=other:
// what the requests cost the 2 cores, whatever they change), and the same
// number of requests to an actor that only answers (on=echo: no registry).
// Each run lasts 3 s whatever b.N.
func BenchmarkChurn(b *testing.B) {
	for _, run := range []struct {
		pairs int
		hot   string
	}{{0, ""}, {10_000, "feed"}, {10_000, ""}, {10_000, "echo"}} {
		pairs := run.pairs
		name := fmt.Sprintf("pairs=%d", pairs)
		if pairs > 0 {
			name += map[string]string{"feed": "/on=feed", "": "/on=other", "echo": "/on=echo"}[run.hot]
		}
		b.Run(name, func(b *testing.B) {
			nd := oneNode(b, func(c *echopubsub.Config) { c.MaxQueueLen = 10_000_000 })
			l := spawnLatencies(nd.System)
			if err := nd.PS.Subscribe(l.pid, "feed"); err != nil {
				b.Fatal(err)
			}
			pub := startPublisher(nd, "feed", 50_000)
			stop := make(chan struct{})
			var churned func() int
			if pairs > 0 {
				churned = churn(b, nd, run.hot, pairs, stop)
			}
			time.Sleep(500 * time.Millisecond) // warm-up, not measured
			l.take()
			time.Sleep(3 * time.Second) // the measured run
			lat := l.take()
			close(stop)
			pub.Stop(b)
			n := 0
			if churned != nil {
				n = churned()
			}
			reportLatency(b, "", lat)
			b.ReportMetric(float64(len(lat))/3, "msgs/s")
			b.ReportMetric(float64(n)/3.5, "pairs/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkPrune stops 100,000 subscribers (10 per topic) at once while a
// topic is broadcast at 50,000 messages a second: latency on that topic
// before (base-) and while they stop and are pruned (prune-), prune-ms
// from the first Stop until every one of them is gone from the process
// registry and from its topic, and p99-ratio, prune-p99 over base-p99.
// subscribed=false stops as many actors that are not subscribed: the cost
// of stopping 100,000 actors on 2 cores, without the registry's share.
//
// To see where delivery waits, add -trace and read the scheduler latency
// of the producer's and the subscriber's mailbox goroutines (go tool trace
// -pprof=sched): before the fix, most of it was runtime.Gosched in
// protoactor's mailbox loop (see DrainingDispatcher).
func BenchmarkPrune(b *testing.B) {
	const count, perTopic = 100_000, 10
	for _, subscribed := range []bool{false, true} {
		b.Run(fmt.Sprintf("subscribed=%v", subscribed), func(b *testing.B) {
			nd := oneNode(b, func(c *echopubsub.Config) { c.MaxQueueLen = 10_000_000 })
			doomed := make([]*actor.PID, count)
			for i := range doomed {
				doomed[i] = test.SpawnCounter(nd.System).PID
				if !subscribed {
					continue
				}
				if err := nd.PS.Subscribe(doomed[i], fmt.Sprintf("t%d", i/perTopic)); err != nil {
					b.Fatal(err)
				}
			}
			l := spawnLatencies(nd.System)
			if err := nd.PS.Subscribe(l.pid, "feed"); err != nil {
				b.Fatal(err)
			}
			pub := startPublisher(nd, "feed", 50_000)
			time.Sleep(500 * time.Millisecond) // warm-up, not measured
			l.take()
			time.Sleep(time.Second) // the baseline
			base := l.take()
			start := time.Now()
			for _, pid := range doomed {
				nd.System.Root.Stop(pid)
			}
			deadline := time.Now().Add(time.Minute)
			for i := count - 1; i >= 0; i-- { // about the order they stop in
				for {
					_, alive := nd.System.ProcessRegistry.GetLocal(doomed[i].Id)
					if !alive && (!subscribed || nd.PS.SubscriberCount(fmt.Sprintf("t%d", i/perTopic)) == 0) {
						break
					}
					if time.Now().After(deadline) {
						b.Fatalf("subscriber %d not pruned within a minute", i)
					}
					time.Sleep(time.Millisecond)
				}
			}
			took := time.Since(start)
			during := l.take()
			pub.Stop(b)
			reportLatency(b, "base-", base)
			reportLatency(b, "prune-", during)
			b.ReportMetric(float64(took.Milliseconds()), "prune-ms")
			b.ReportMetric(float64(percentile(during, 0.99))/float64(max(1, percentile(base, 0.99))), "p99-ratio")
			b.ReportMetric(0, "ns/op")
		})
	}
}

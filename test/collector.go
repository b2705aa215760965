package test

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// Collector is a subscriber actor that records everything it receives. Its
// record is read by the test goroutine, hence the lock (test code only).
type Collector struct {
	PID *actor.PID

	mu       sync.Mutex
	received []interface{}
	gate     chan struct{} // non-nil: each message waits for the gate (a stalled subscriber)

	countOnly bool
	count     atomic.Int64
}

// SpawnCollector spawns a Collector with the counting SubscriberMailbox.
func SpawnCollector(system *actor.ActorSystem) *Collector {
	c := &Collector{}
	c.PID = system.Root.Spawn(actor.PropsFromFunc(c.receive, actor.WithMailbox(echopubsub.SubscriberMailbox())))
	return c
}

// SpawnNamedCollector spawns a Collector registered under name.
func SpawnNamedCollector(system *actor.ActorSystem, name string) (*Collector, error) {
	c := &Collector{}
	pid, err := system.Root.SpawnNamed(actor.PropsFromFunc(c.receive, actor.WithMailbox(echopubsub.SubscriberMailbox())), name)
	c.PID = pid
	return c, err
}

// SpawnStalledCollector spawns a Collector that handles nothing until
// Release is called: its mailbox fills as a stalled consumer's would.
func SpawnStalledCollector(system *actor.ActorSystem) *Collector {
	c := &Collector{gate: make(chan struct{})}
	c.PID = system.Root.Spawn(actor.PropsFromFunc(c.receive, actor.WithMailbox(echopubsub.SubscriberMailbox())))
	return c
}

// SpawnCounter spawns a Collector that only counts what it receives
// (benchmarks): Count is exact, All stays empty.
func SpawnCounter(system *actor.ActorSystem) *Collector {
	c := &Collector{countOnly: true}
	c.PID = system.Root.Spawn(actor.PropsFromFunc(c.receive, actor.WithMailbox(echopubsub.SubscriberMailbox())))
	return c
}

// Count is the number of messages received by a counter.
func (c *Collector) Count() int64 { return c.count.Load() }

// Release lets a stalled collector run.
func (c *Collector) Release() { close(c.gate) }

func (c *Collector) receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case actor.SystemMessage, actor.AutoReceiveMessage, *actor.Started, *actor.Stopping, *actor.Stopped, *actor.Restarting:
		return
	default:
		if c.countOnly {
			c.count.Add(1)
			return
		}
		if c.gate != nil {
			<-c.gate
		}
		c.mu.Lock()
		c.received = append(c.received, m)
		c.mu.Unlock()
	}
}

// All returns a copy of everything received, in order.
func (c *Collector) All() []interface{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]interface{}(nil), c.received...)
}

// Len is the number of messages received.
func (c *Collector) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.received)
}

// Stamps returns the sequence numbers of the Stamps received (bare, in a
// Delivery, or encoded in a Delivery: echopubsub.WithFormat), in order.
func (c *Collector) Stamps() []uint64 {
	var out []uint64
	for _, m := range c.All() {
		if d, ok := m.(*messages.Delivery); ok {
			m = d.Message
			if m == nil && d.PayloadType != "" {
				m, _ = messages.Decode(d.PayloadType, d.Payload)
			}
		}
		if s, ok := m.(*testpb.Stamp); ok {
			out = append(out, s.Seq)
		}
	}
	return out
}

// Count returns how many received messages are of type T.
func Count[T any](c *Collector) int {
	n := 0
	for _, m := range c.All() {
		if _, ok := m.(T); ok {
			n++
		}
	}
	return n
}

// Describe summarises what c received, for failure messages.
func (c *Collector) Describe() string {
	if c.countOnly {
		return fmt.Sprintf("counted %d", c.Count())
	}
	all := c.All()
	kinds := map[string]int{}
	for _, m := range all {
		name := fmt.Sprintf("%T", m)
		if pm, ok := m.(proto.Message); ok {
			name = string(pm.ProtoReflect().Descriptor().Name())
		}
		kinds[name]++
	}
	return fmt.Sprintf("%d messages %v, stamps %v", len(all), kinds, clip(c.Stamps()))
}

func clip(s []uint64) []uint64 {
	if len(s) > 40 {
		return append(append([]uint64{}, s[:20]...), s[len(s)-20:]...)
	}
	return s
}

package echopubsub_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/messages"
)

// node starts an actor system with its remote on a free loopback port.
func node(log zerolog.Logger) (*actor.ActorSystem, *remote.Remote) {
	system := actor.NewActorSystem(echopubsub.ActorSystemLogger(log))
	r := remote.NewRemote(system, echopubsub.RemoteConfig("127.0.0.1", 0, log))
	r.Start()
	return system, r
}

// Two nodes in one process: a subscriber on node B receives what node A
// broadcasts, in order, or is told what it lost (the README's Use section
// is the same program as a main.go).
func Example() {
	log := zerolog.New(os.Stderr).Level(zerolog.WarnLevel)
	sysA, remA := node(log)
	sysB, remB := node(log)
	defer func() { remA.Shutdown(false); sysA.Shutdown(); remB.Shutdown(false); sysB.Shutdown() }()
	members := cluster.NewStatic(sysA.Address(), sysB.Address())

	cfg := echopubsub.DefaultConfig("scores")
	cfg.BatchInterval = 10 * time.Millisecond
	a, err := echopubsub.Start(sysA, cfg, echopubsub.WithMembership(members), echopubsub.WithLogger(log))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = a.Stop(context.Background()) }()
	b, err := echopubsub.Start(sysB, cfg, echopubsub.WithMembership(members), echopubsub.WithLogger(log))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = b.Stop(context.Background()) }()

	// A subscriber is an actor spawned with the counting mailbox, so that
	// back-pressure can measure its queue.
	got := make(chan string, 16)
	receive := func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case *wrapperspb.StringValue: // a broadcast message, as published
			got <- m.Value
		case *messages.CursorExpired: // this node fell behind a producer: reload state
			got <- fmt.Sprintf("lost %d messages from %s: %s", m.Missed, m.Node, m.Reason)
		case *messages.BackPressure: // this subscriber's queue was full: newer messages were dropped
			got <- fmt.Sprintf("back-pressure %v at %d queued", m.State, m.QueueLen)
		}
	}
	sub := sysB.Root.Spawn(actor.PropsFromFunc(receive, actor.WithMailbox(echopubsub.SubscriberMailbox())))
	if err := b.Subscribe(sub, "match:42"); err != nil {
		fmt.Println(err)
		return
	}

	for _, goal := range []string{"1-0", "2-0", "2-1"} {
		if err := a.Broadcast(nil, "match:42", wrapperspb.String(goal)); err != nil {
			fmt.Println(err)
			return
		}
	}
	for i := 0; i < 3; i++ {
		select {
		case s := <-got:
			fmt.Println(s)
		case <-time.After(10 * time.Second):
			fmt.Println("timed out")
			return
		}
	}
	// Output:
	// 1-0
	// 2-0
	// 2-1
}

// WithMetadata delivers a *messages.Delivery: the message with the node,
// pool group, producer incarnation and cursor it came from, so a subscriber
// can check its own stream.
func ExamplePubSub_Subscribe() {
	log := zerolog.Nop()
	system, r := node(log)
	defer func() { r.Shutdown(false); system.Shutdown() }()
	ps, err := echopubsub.Start(system, echopubsub.DefaultConfig("meta"), echopubsub.WithLogger(log))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = ps.Stop(context.Background()) }()

	got := make(chan *messages.Delivery, 1)
	sub := system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if d, ok := ctx.Message().(*messages.Delivery); ok {
			got <- d
		}
	}, actor.WithMailbox(echopubsub.SubscriberMailbox())))
	_ = ps.Subscribe(sub, "room:1", echopubsub.WithMetadata())
	_ = ps.Broadcast(nil, "room:1", wrapperspb.String("hello"))

	d := <-got
	fmt.Println(d.Topic, d.Cursor, d.Node == ps.NodeName(), d.Message.(*wrapperspb.StringValue).Value)
	// Output: room:1 0 true hello
}

// An actor broadcasts by sending messages.Broadcast to the pubsub's PID: it
// is routed as Broadcast with the sender's PID (so one sender's messages
// stay in order). Request it to learn whether it was accepted.
func ExamplePubSub_PID() {
	log := zerolog.Nop()
	system, r := node(log)
	defer func() { r.Shutdown(false); system.Shutdown() }()
	ps, err := echopubsub.Start(system, echopubsub.DefaultConfig("from-actor"), echopubsub.WithLogger(log))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = ps.Stop(context.Background()) }()

	got := make(chan string, 1)
	sub := system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if s, ok := ctx.Message().(*wrapperspb.StringValue); ok {
			got <- s.Value
		}
	}, actor.WithMailbox(echopubsub.SubscriberMailbox())))
	_ = ps.Subscribe(sub, "scores")

	results := make(chan string, 1)
	publisher := system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case string:
			payload, _ := anypb.New(wrapperspb.String(m))
			ctx.Request(ps.PID(), &messages.Broadcast{Topic: "scores", Message: payload})
		case *messages.BroadcastResult:
			results <- "accepted, error: " + fmt.Sprintf("%q", m.Error)
		}
	}))
	system.Root.Send(publisher, "goal")
	fmt.Println(<-results)
	fmt.Println(<-got)
	// Output:
	// accepted, error: ""
	// goal
}

// A named subscriber is resolved at every send: a supervisor may restart it
// under the same name and it keeps its subscription. What it misses while
// nothing answers to the name is counted and told (*messages.Missed) when it
// is back.
func ExamplePubSub_SubscribeNamed() {
	log := zerolog.Nop()
	system, r := node(log)
	defer func() { r.Shutdown(false); system.Shutdown() }()
	ps, err := echopubsub.Start(system, echopubsub.DefaultConfig("named"), echopubsub.WithLogger(log))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = ps.Stop(context.Background()) }()

	_ = ps.SubscribeNamed("scoreboard", "scores")
	// Nothing answers to the name yet. (LocalBroadcast hands a message to
	// this node's subscribers before it returns.)
	_ = ps.LocalBroadcast("scores", wrapperspb.String("missed while away"))

	got := make(chan string, 4)
	_, err = system.Root.SpawnNamed(actor.PropsFromFunc(func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case *messages.Missed:
			got <- fmt.Sprintf("missed %d on %s", m.Count, m.Topic)
		case *wrapperspb.StringValue:
			got <- m.Value
		}
	}, actor.WithMailbox(echopubsub.SubscriberMailbox())), "scoreboard")
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = ps.Broadcast(nil, "scores", wrapperspb.String("2-1"))
	fmt.Println(<-got)
	fmt.Println(<-got)
	// Output:
	// missed 1 on scores
	// 2-1
}

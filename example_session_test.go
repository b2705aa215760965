package echopubsub_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
)

// A session delivers envelopes to an owner actor; the application acks each
// delivery once its work committed, and the library counts what is pending.
func Example_sessions() {
	log := zerolog.Nop()
	system := actor.NewActorSystem(echopubsub.ActorSystemLogger(log))
	r := remote.NewRemote(system, echopubsub.RemoteConfig("127.0.0.1", 0, log))
	r.Start()
	defer system.Shutdown()
	defer r.Shutdown(false)
	ps, err := echopubsub.Start(system, echopubsub.DefaultConfig("chat"), echopubsub.WithLogger(log))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = ps.Stop(context.Background()) }()

	// The owner: any local actor, any mailbox. It hands what it gets to
	// this example's goroutine.
	inbox := make(chan interface{}, 16)
	owner := system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case *echopubsub.Envelope, *messages.SessionClosed:
			inbox <- m
		}
	}))
	sess, err := ps.OpenSession(owner)
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = ps.SessionSubscribe(sess.ID(), "room:1", echopubsub.WithEnvelopeContext(map[string]string{"room": "1"}))
	_ = ps.Broadcast(nil, "room:1", wrapperspb.String("hello"))
	_ = ps.Broadcast(nil, "room:1", wrapperspb.String("world"))

	next := func() interface{} {
		select {
		case m := <-inbox:
			return m
		case <-time.After(5 * time.Second):
			return "timeout"
		}
	}
	var envs []*echopubsub.Envelope
	for i := 0; i < 2; i++ {
		env := next().(*echopubsub.Envelope)
		fmt.Println(env.DeliveryID, env.Topic, env.Context["room"], env.Event.(*wrapperspb.StringValue).Value)
		envs = append(envs, env)
	}
	fmt.Println("pending:", ps.Pending(sess.ID()))
	for _, env := range envs {
		// ... commit the work, then:
		pending, _ := ps.Ack(sess.ID(), env.DeliveryID)
		fmt.Println("acked", env.DeliveryID, "pending:", pending)
	}
	_, err = ps.Ack(sess.ID(), envs[0].DeliveryID)
	fmt.Println("again:", errors.Is(err, echopubsub.ErrUnknownDelivery))

	_ = ps.CloseSession(sess.ID())
	fmt.Println(next().(*messages.SessionClosed).Reason)
	// Output:
	// 1 room:1 1 hello
	// 2 room:1 1 world
	// pending: 2
	// acked 1 pending: 1
	// acked 2 pending: 0
	// again: true
	// SESSION_CLOSE_REASON_CLOSED
}

// Request and reply are durable deliveries with a context: the callee reads
// who asked with RequestContextOf and answers with Reply; both sides ack as
// usual. The sessions may live on different nodes.
func ExamplePubSub_RequestFromSession() {
	log := zerolog.Nop()
	system := actor.NewActorSystem(echopubsub.ActorSystemLogger(log))
	r := remote.NewRemote(system, echopubsub.RemoteConfig("127.0.0.1", 0, log))
	r.Start()
	defer system.Shutdown()
	defer r.Shutdown(false)
	ps, err := echopubsub.Start(system, echopubsub.DefaultConfig("rpc"), echopubsub.WithLogger(log))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = ps.Stop(context.Background()) }()

	// The callee answers every request, then acks it.
	callee := system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if env, ok := ctx.Message().(*echopubsub.Envelope); ok {
			if rc, ok := echopubsub.RequestContextOf(env); ok && !rc.Reply {
				name := env.Event.(*wrapperspb.StringValue).Value
				_ = ps.Reply(rc.From, env, wrapperspb.String("hello, "+name))
				_, _ = ps.Ack(env.SessionID, env.DeliveryID)
			}
		}
	}))
	replies := make(chan *echopubsub.Envelope, 1)
	caller := system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if env, ok := ctx.Message().(*echopubsub.Envelope); ok {
			replies <- env
		}
	}))
	calleeSess, _ := ps.OpenSession(callee)
	callerSess, _ := ps.OpenSession(caller)

	id, err := ps.RequestFromSession(callerSess.ID(), calleeSess.ID(), wrapperspb.String("ada"))
	if err != nil {
		fmt.Println(err)
		return
	}
	select {
	case env := <-replies:
		rc, _ := echopubsub.RequestContextOf(env)
		fmt.Println(env.Event.(*wrapperspb.StringValue).Value, rc.Reply, rc.RequestID == id, rc.From == calleeSess.ID())
		pending, _ := ps.Ack(env.SessionID, env.DeliveryID)
		fmt.Println("pending:", pending)
	case <-time.After(5 * time.Second):
		fmt.Println("timeout")
	}
	// Output:
	// hello, ada true true true
	// pending: 0
}

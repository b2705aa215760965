package presence_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/presence"
)

// Example: alice on two devices and bob in one room, as a subscriber sees
// them (one node here; on several, every node lists every node's).
func Example() {
	log := zerolog.Nop()
	system := actor.NewActorSystem(echopubsub.ActorSystemLogger(log))
	r := remote.NewRemote(system, echopubsub.RemoteConfig("127.0.0.1", 0, log))
	r.Start()
	defer func() { r.Shutdown(false); system.Shutdown() }()
	ps, err := echopubsub.Start(system, echopubsub.DefaultConfig("chat"),
		echopubsub.WithMembership(cluster.NewStatic(system.Address())), echopubsub.WithLogger(log))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ps.Stop(context.Background())
	tr, err := presence.New(ps, presence.DefaultConfig())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Stop(context.Background()) // before ps.Stop: deferred calls run last first

	diffs := make(chan *presence.Diff, 8)
	watcher := system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if d, ok := ctx.Message().(*presence.Diff); ok {
			diffs <- d
		}
	}))
	if err := tr.Subscribe(watcher, "room:1"); err != nil {
		fmt.Println(err)
		return
	}
	phone, laptop := system.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {})), system.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	bob := system.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	_ = tr.Track(phone, "room:1", "alice", map[string]string{"device": "phone"})
	_ = tr.Track(laptop, "room:1", "alice", map[string]string{"device": "laptop"})
	_ = tr.Track(bob, "room:1", "bob", map[string]string{"device": "phone"})
	system.Root.Stop(laptop) // a tracked process that stops leaves

	for i := 0; i < 4; i++ {
		select {
		case d := <-diffs:
			fmt.Println(describe(d))
		case <-time.After(5 * time.Second):
			fmt.Println("no diff")
			return
		}
	}
	for _, key := range []string{"alice", "bob"} {
		for _, m := range tr.List("room:1")[key] {
			fmt.Printf("%s on %s\n", key, m.Meta["device"])
		}
	}
	// Output:
	// join alice (phone)
	// join alice (laptop)
	// join bob (phone)
	// leave alice (laptop)
	// alice on phone
	// bob on phone
}

func describe(d *presence.Diff) string {
	var out []string
	for key, metas := range d.Joins {
		for _, m := range metas {
			out = append(out, fmt.Sprintf("join %s (%s)", key, m.Meta["device"]))
		}
	}
	for key, metas := range d.Leaves {
		for _, m := range metas {
			out = append(out, fmt.Sprintf("leave %s (%s)", key, m.Meta["device"]))
		}
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

package echopubsub_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/internal/proc"
	"github.com/echopubsub/echopubsub/test"
)

// Start-up as two or three processes with a static member list and the
// default settings, as a user runs them: the first broadcast is prompt in
// either start order, and what was broadcast before a node's Start is
// history to it ("Joined" in the package doc).

// firstDeliveryBound is the target: with both nodes up, the first
// broadcast reaches the other node within it. The default BatchInterval
// (200 ms) is part of it.
const firstDeliveryBound = time.Second

// Two node processes, default settings, started one after the other in
// both orders; the sender broadcasts once both Starts returned. The message
// reaches the receiver in under a second: a call whose answer is lost while
// the peer's transport is still failing over from its first dial must not
// cost a CallTimeout (5 s).
func TestFirstDeliveryIsPromptInEitherStartOrder(t *testing.T) {
	for _, receiverFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("receiver_first=%v", receiverFirst), func(t *testing.T) {
			ports := test.FreePorts(t, 2)
			peers := []string{fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])}
			spec := func(i int) childSpec { return childSpec{Port: ports[i], Peers: peers, Defaults: true} }
			var sender, receiver *childNode
			if receiverFirst {
				receiver = startChild(t, spec(1))
				sender = startChild(t, spec(0))
			} else {
				sender = startChild(t, spec(0))
				receiver = startChild(t, spec(1))
			}
			start := time.Now()
			sender.publish(t, "p", 1)
			var last childReport
			if !proc.Until(10*time.Second, 5*time.Millisecond, func() bool {
				last = receiver.report(t)
				return last.Pubs["p"] != nil
			}) {
				t.Fatalf("the first broadcast never arrived: %s\nsender:\n%s", describe(last), sender.output())
			}
			took := time.Since(start)
			t.Logf("first broadcast arrived after %v", took)
			if took > firstDeliveryBound {
				t.Fatalf("the first broadcast took %v to arrive, want < %v\nsender:\n%s\nreceiver:\n%s",
					took, firstDeliveryBound, sender.output(), receiver.output())
			}
			wantReceived(t, receiver, map[string][2]uint64{"p": {1, 1}})
		})
	}
}

// Node A broadcasts 50 messages while the listed node B is not running,
// fails to reach B for 3 s, broadcasts 10 more, and B's actor system and
// pubsub are started as soon as the last of them returned, with no pause: B
// gets none of the 60 (their Broadcast returned before B's Start was called)
// and no notice, then everything broadcast after its Start returned.
func TestLateNodeGetsNothingBroadcastBeforeItsStart(t *testing.T) {
	for _, timeout := range callTimeouts {
		t.Run(fmt.Sprintf("call_timeout=%v", timeout), func(t *testing.T) {
			cfg := fastConfig()
			cfg.CallTimeout = timeout
			log := test.Logger(t, zerolog.InfoLevel)
			nodes, addrs := test.NewNodes(t, 1, log)
			a := nodes[0]
			port := test.FreePort(t)
			addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", port))
			a.Start(t, cfg, staticOf(addrs))
			for i := uint64(1); i <= 50; i++ {
				a.Broadcast(t, "match", stamp(i))
			}
			// The scenario, not a settling wait: A's producer fails to reach
			// B for 3 s, retrying.
			time.Sleep(3 * time.Second)
			for i := uint64(51); i <= 60; i++ {
				a.Broadcast(t, "match", stamp(i))
			}
			system := actor.NewActorSystem(echopubsub.ActorSystemLogger(log.Level(zerolog.ErrorLevel)))
			r := remote.NewRemote(system, echopubsub.RemoteConfig("127.0.0.1", port, log))
			r.Start()
			b := &test.Node{System: system, Remote: r, Addr: system.Address(), Faults: test.NewFaults(), Log: log}
			b.Start(t, cfg, staticOf(addrs))
			c := b.Subscribe(t, "match")
			for i := uint64(61); i <= 100; i++ {
				a.Broadcast(t, "match", stamp(i))
			}
			wantStamps(t, c, seqs(61, 100)...)
			noExpiry(t, c)
		})
	}
}

func seqs(from, to uint64) []uint64 {
	var out []uint64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

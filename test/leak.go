package test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/echopubsub/echopubsub/internal/proc"
)

// ProtoactorTimerFuncs are the functions of protoactor's own timed
// goroutines, which the actor system (owned by the caller, not by the
// pubsub) starts and which end by themselves:
//
//   - the dead-letter throttle (actor/throttler.go, NewThrottle): the first
//     dead letter of a period starts a goroutine that waits one
//     DeadLetterThrottleInterval (1 s by default) on a ticker and then ends.
//     Any test that stops a node while messages are still addressed to it
//     makes dead letters, so a leak check right after Stop can find it.
//
// The closure's name depends on inlining, hence the variants;
// TestProtoactorTimerNamesMatch proves the list still names the goroutine.
var ProtoactorTimerFuncs = []string{
	"github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1",
	"github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1",
	"github.com/asynkron/protoactor-go/actor.NewThrottle.func1",
}

// IgnoreProtoactorTimers returns goleak options that ignore
// ProtoactorTimerFuncs.
func IgnoreProtoactorTimers() []goleak.Option {
	out := make([]goleak.Option, 0, len(ProtoactorTimerFuncs))
	for _, f := range ProtoactorTimerFuncs {
		out = append(out, goleak.IgnoreAnyFunction(f))
	}
	return out
}

// ProtoactorTimerLife bounds how long any of protoactor's timed goroutines
// lives (the default DeadLetterThrottleInterval is 1 s), with margin.
const ProtoactorTimerLife = 3 * time.Second

// VerifyNoLeaks is goleak.VerifyNone with protoactor's timed goroutines
// ignored by name (IgnoreProtoactorTimers). Should a protoactor upgrade
// rename one, the check still does not flake: it polls, for at most
// ProtoactorTimerLife, until the leftover goroutines are gone (a timed
// goroutine ends by itself; a real leak is still there at the deadline and
// fails the test).
func VerifyNoLeaks(t testing.TB, opts ...goleak.Option) {
	t.Helper()
	opts = append(append([]goleak.Option(nil), opts...), IgnoreProtoactorTimers()...)
	var err error
	if !proc.Until(ProtoactorTimerLife, 50*time.Millisecond, func() bool { err = goleak.Find(opts...); return err == nil }) {
		t.Fatalf("goroutines left behind (waited %v for protoactor's timed ones to end): %v", ProtoactorTimerLife, err)
	}
}

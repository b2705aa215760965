package test

import (
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub"
	"go.uber.org/goleak"
)

// TestProtoactorTimerNamesMatch makes protoactor start its dead-letter
// throttle goroutine and shows that IgnoreProtoactorTimers names it: the
// leak check must ignore it by name, not by luck of timing.
func TestProtoactorTimerNamesMatch(t *testing.T) {
	system := actor.NewActorSystem(echopubsub.ActorSystemLogger(Logger(t, zerolog.WarnLevel)))
	defer system.Shutdown()
	before := goleak.IgnoreCurrent()
	// A message to a PID that does not exist is a dead letter; the first of
	// a period starts the throttle's 1 s timer goroutine.
	system.Root.Send(actor.NewPID(system.Address(), "nobody-here"), "hello")
	var found error
	Eventually(t, 5*time.Second, func() bool {
		found = goleak.Find(before)
		return found != nil && strings.Contains(found.Error(), "NewThrottle")
	}, Sprintf("the dead-letter throttle goroutine never appeared"))
	if err := goleak.Find(append([]goleak.Option{before}, IgnoreProtoactorTimers()...)...); err != nil {
		t.Logf("seen: %v", found)
		t.Fatalf("IgnoreProtoactorTimers does not name the throttle goroutine (protoactor renamed it?):\n%v\n(seen without the option:\n%v)", err, found)
	}
}

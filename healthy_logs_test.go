package echopubsub_test

import (
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
)

// A healthy start and a normal stop log no warning and no error (what the
// README's main.go does): node A starts before B's pubsub runs, so its first
// calls find nothing there (logged at Info: B is starting); then B stops
// first and A's drain finds B gone, owing it nothing (Info: B was stopped
// on purpose); then both remotes shut down (protoactor's lost connections
// are Info: both nodes were stopped on purpose).
func TestHealthyStartAndNormalStopLogNoWarning(t *testing.T) {
	cfg := fastConfig()
	cfg.CallTimeout = 2 * time.Second // the start-up grace (StallAfter) is ~4 s: a loaded machine is not a failure
	log, logs := test.CapturingLogger(t, zerolog.InfoLevel)
	nodes, addrs := test.NewNodes(t, 2, log)
	a, b := nodes[0], nodes[1]

	failed := make(chan struct{}, 1)
	sub := a.System.EventStream.Subscribe(func(ev interface{}) {
		if _, ok := ev.(*messages.SyncFailed); ok {
			select {
			case failed <- struct{}{}:
			default:
			}
		}
	})
	defer a.System.EventStream.Unsubscribe(sub)
	a.Start(t, cfg, staticOf(addrs))
	select { // the scenario: A has called B before B's pubsub runs
	case <-failed:
	case <-time.After(10 * time.Second):
		t.Fatal("node A never failed a call to B, whose pubsub does not run")
	}
	b.Start(t, cfg, staticOf(addrs))
	c := b.Subscribe(t, "match")
	a.Broadcast(t, "match", stamp(1))
	wantStamps(t, c, 1)

	b.Shutdown(t)
	a.Shutdown(t)
	if !logs.Contains("node not answering yet") {
		t.Errorf("A's first failed call to a B that is starting was not logged at Info:\n%s", logs)
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, " WRN ") || strings.Contains(line, " ERR ") {
			t.Errorf("a healthy start and a normal stop logged: %s", line)
		}
	}
}

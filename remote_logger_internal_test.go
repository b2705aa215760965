package echopubsub

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub/internal/core"
)

// protoactor's errors about the connection to a node are Info when a pubsub
// was stopped on purpose at either end, and stay errors otherwise. The
// table is the process's (pubsubs), under addresses no other test uses.
func TestActorSystemLoggerDowngradesLossOfANodeStoppedOnPurpose(t *testing.T) {
	var logs bytes.Buffer // one JSON line per call, written before the call returns
	system := actor.NewActorSystem(ActorSystemLogger(zerolog.New(&logs).Level(zerolog.InfoLevel)))
	self, retired, crashed := "stop-aware-self:1", "stop-aware-retired:1", "stop-aware-crashed:1"
	system.ProcessRegistry.Address = self
	rt := &core.Runtime{Node: self, Cfg: core.Config{Name: "stop-aware"}}
	pubsubs.add(rt)
	defer pubsubs.remove(rt)
	rt.SetDeparted(retired, true) // a producer of node retired retired here

	last := func() string {
		lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
		return lines[len(lines)-1]
	}
	lost := func(peer string) string {
		system.Logger().Error("EndpointWriter lost connection", slog.String("address", peer), slog.String("error", "EOF"))
		return last()
	}
	if l := lost(retired); !strings.Contains(l, `"level":"info"`) || !strings.Contains(l, "node stopped on purpose") {
		t.Errorf("lost connection to a node that retired here: %s, want INF", l)
	}
	if l := lost(crashed); !strings.Contains(l, `"level":"error"`) {
		t.Errorf("lost connection to a node that did not stop on purpose: %s, want ERR", l)
	}
	system.Logger().Error("EndpointWriter failed to connect", slog.String("address", retired))
	if l := last(); !strings.Contains(l, `"level":"info"`) || !strings.Contains(l, "failed to connect") {
		t.Errorf("failed to connect to a node that retired here: %s, want INF", l)
	}
	rt.SetDeparted(retired, false) // it registered again: running
	if l := lost(retired); !strings.Contains(l, `"level":"error"`) {
		t.Errorf("lost connection to a node that runs again: %s, want ERR", l)
	}
	pubsubs.stop(rt) // this node's pubsub stopped on purpose: every connection ends
	if l := lost(crashed); !strings.Contains(l, `"level":"info"`) {
		t.Errorf("lost connection after this node's pubsub stopped: %s, want INF", l)
	}
	pubsubs.add(rt) // started again
	if l := lost(crashed); !strings.Contains(l, `"level":"error"`) {
		t.Errorf("lost connection after this node's pubsub started again: %s, want ERR", l)
	}
}

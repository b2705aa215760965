package echopubsub_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// call runs f and turns a panic into an error, so a bad argument that
// crashes the caller is reported as such rather than killing the test.
func call(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("PANIC: %v", r)
		}
	}()
	return f()
}

// wantErr fails unless err is an error (not a panic) whose text holds every
// part: the field or argument and the value that were wrong.
func wantErr(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want one naming %q", what, parts)
		return
	}
	if strings.HasPrefix(err.Error(), "PANIC") {
		t.Errorf("%s: %v; want an error naming %q", what, err, parts)
		return
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error %q does not name %q", what, err, p)
		}
	}
}

func TestConfigErrorsNameFieldAndValue(t *testing.T) {
	cases := []struct {
		field string
		set   func(*echopubsub.Config)
		parts []string
	}{
		{"empty name", func(c *echopubsub.Config) { c.Name = "" }, []string{"Name", "empty"}},
		{"bad name", func(c *echopubsub.Config) { c.Name = "a/b" }, []string{"Name", `"a/b"`}},
		{"PoolSize 0", func(c *echopubsub.Config) { c.PoolSize = 0 }, []string{"PoolSize", "got 0"}},
		{"PoolSize too big", func(c *echopubsub.Config) { c.PoolSize = 5000 }, []string{"PoolSize", "5000"}},
		{"BufferSize", func(c *echopubsub.Config) { c.BufferSize = -3 }, []string{"BufferSize", "-3"}},
		{"BufferSize too big", func(c *echopubsub.Config) { c.BufferSize = 1 << 40 }, []string{"BufferSize", "1099511627776"}},
		{"MaxBatchMessages", func(c *echopubsub.Config) { c.MaxBatchMessages = 0 }, []string{"MaxBatchMessages", "got 0"}},
		{"MaxBatchMessages too big", func(c *echopubsub.Config) { c.MaxBatchMessages = 1 << 30 }, []string{"MaxBatchMessages", "1073741824"}},
		{"MaxBatchBytes", func(c *echopubsub.Config) { c.MaxBatchBytes = 0 }, []string{"MaxBatchBytes", "got 0"}},
		{"MaxBatchBytes too big", func(c *echopubsub.Config) { c.MaxBatchBytes = 1 << 30 }, []string{"MaxBatchBytes", "1073741824"}},
		{"MaxTopicBytes", func(c *echopubsub.Config) { c.MaxTopicBytes = 0 }, []string{"MaxTopicBytes", "got 0"}},
		{"MaxTopicBytes too big", func(c *echopubsub.Config) { c.MaxTopicBytes = 1 << 20 }, []string{"MaxTopicBytes", "2048", "1048576"}},
		{"MaxPendingWrites", func(c *echopubsub.Config) { c.MaxPendingWrites = -1 }, []string{"MaxPendingWrites", "-1"}},
		{"MaxQueueLen", func(c *echopubsub.Config) { c.MaxQueueLen = 0 }, []string{"MaxQueueLen", "got 0"}},
		{"BatchInterval", func(c *echopubsub.Config) { c.BatchInterval = -time.Second }, []string{"BatchInterval", "-1s"}},
		{"AckInterval < 0", func(c *echopubsub.Config) { c.AckInterval = -time.Millisecond }, []string{"AckInterval", "-1ms"}},
		{"AckInterval > CallTimeout/10", func(c *echopubsub.Config) { c.AckInterval = time.Second }, []string{"AckInterval", "1s", "500ms"}},
		{"CallTimeout under 10x the default AckInterval", func(c *echopubsub.Config) { c.CallTimeout = 50 * time.Millisecond },
			[]string{"AckInterval", "10ms", "5ms", "the default", "set AckInterval too"}},
		{"CallTimeout", func(c *echopubsub.Config) { c.CallTimeout = 0 }, []string{"CallTimeout", "0s"}},
		{"RetryInterval", func(c *echopubsub.Config) { c.RetryInterval = -time.Millisecond }, []string{"RetryInterval", "-1ms"}},
		{"CapacityWarningInterval", func(c *echopubsub.Config) { c.CapacityWarningInterval = 0 }, []string{"CapacityWarningInterval"}},
		{"ForgetAfter", func(c *echopubsub.Config) { c.ForgetAfter = 0 }, []string{"ForgetAfter"}},
		{"RetentionInterval", func(c *echopubsub.Config) { c.RetentionInterval = -time.Minute }, []string{"RetentionInterval", "-1m0s"}},
		{"CapacityWarningThreshold 0", func(c *echopubsub.Config) { c.CapacityWarningThreshold = 0 }, []string{"CapacityWarningThreshold", "0"}},
		{"CapacityWarningThreshold > 1", func(c *echopubsub.Config) { c.CapacityWarningThreshold = 1.5 }, []string{"CapacityWarningThreshold", "1.5"}},
		{"CapacityWarningThreshold NaN", func(c *echopubsub.Config) { c.CapacityWarningThreshold = math.NaN() }, []string{"CapacityWarningThreshold", "NaN"}},
	}
	system, _ := test.StartRemote(t, test.Logger(t, zerolog.WarnLevel))
	for _, tc := range cases {
		cfg := echopubsub.DefaultConfig("scores")
		tc.set(&cfg)
		wantErr(t, tc.field+" (Validate)", cfg.Validate(), tc.parts...)
		// Start validates before touching the system.
		wantErr(t, tc.field+" (Start)", call(func() error { _, err := echopubsub.Start(system, cfg); return err }), tc.parts...)
	}
	if err := echopubsub.DefaultConfig("scores").Validate(); err != nil {
		t.Errorf("the defaults do not validate: %v", err)
	}
}

func TestStartErrors(t *testing.T) {
	log := test.Logger(t, zerolog.WarnLevel)
	cfg := fastConfig()
	err := call(func() error { _, err := echopubsub.Start(nil, cfg); return err })
	wantErr(t, "nil system", err, "actor system is nil")

	local := actor.NewActorSystem()
	err = call(func() error { _, err := echopubsub.Start(local, cfg); return err })
	wantErr(t, "no remote", err, "remote")
	if !errors.Is(err, echopubsub.ErrRemoteNotStarted) {
		t.Errorf("no remote: %v is not ErrRemoteNotStarted", err)
	}

	system, r := test.StartRemote(t, log)
	t.Cleanup(func() { r.Shutdown(false); system.Shutdown() })
	err = call(func() error {
		_, err := echopubsub.Start(system, cfg, echopubsub.WithMembership(cluster.NewStatic("no-port")))
		return err
	})
	wantErr(t, "bad static address", err, `"no-port"`, "host:port")
	err = call(func() error {
		_, err := echopubsub.Start(system, cfg, echopubsub.WithMembership(cluster.NewStatic()))
		return err
	})
	wantErr(t, "static membership with no address", err, "static membership lists no address")
	other := "127.0.0.1:1" // a list of nodes that leaves this one out
	err = call(func() error {
		_, err := echopubsub.Start(system, cfg, echopubsub.WithMembership(cluster.NewStatic(other)))
		return err
	})
	wantErr(t, "static membership without this node", err, `["127.0.0.1:1"]`, `does not list this node, "`+system.Address()+`"`)

	// A failed Start leaves nothing behind: the same name starts afterwards.
	ps, err := echopubsub.Start(system, cfg, echopubsub.WithLogger(log))
	if err != nil {
		t.Fatalf("start after a failed start: %v", err)
	}
	t.Cleanup(func() { _ = ps.Stop(context.Background()) })
	err = call(func() error { _, err := echopubsub.Start(system, cfg, echopubsub.WithLogger(log)); return err })
	wantErr(t, "same name twice", err, `a pubsub named "scores" is already running on this actor system`)
}

func TestCallErrors(t *testing.T) {
	nd := test.StartCluster(t, 1, fastConfig())[0]
	ps := nd.PS
	c := nd.Subscribe(t, "ok")
	stamp := &testpb.Stamp{Publisher: "t", Seq: 1}

	wantErr(t, "Subscribe nil PID", call(func() error { return ps.Subscribe(nil, "t") }), "PID is nil")
	wantErr(t, "Subscribe empty topic", call(func() error { return ps.Subscribe(c.PID, "") }), "topic", "empty")
	wantErr(t, "Subscribe remote PID", call(func() error { return ps.Subscribe(actor.NewPID("10.0.0.1:1", "x"), "t") }),
		"not a local PID", "10.0.0.1:1")
	plain := nd.System.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	err := call(func() error { return ps.Subscribe(plain, "t") })
	wantErr(t, "Subscribe unmeasurable mailbox", err, "SubscriberMailbox", plain.Id)
	if !errors.Is(err, echopubsub.ErrUnmeasurable) {
		t.Errorf("unmeasurable: %v is not ErrUnmeasurable", err)
	}
	wantErr(t, "Subscribe WithMaxQueueLen(-5)", call(func() error { return ps.Subscribe(c.PID, "t", echopubsub.WithMaxQueueLen(-5)) }),
		"MaxQueueLen", "-5")
	wantErr(t, "SubscribeNamed empty", call(func() error { return ps.SubscribeNamed("", "t") }), "name is empty")
	wantErr(t, "SubscribeNamed empty topic", call(func() error { return ps.SubscribeNamed("n", "") }), "topic", "empty")
	wantErr(t, "Unsubscribe nil PID", call(func() error { return ps.Unsubscribe(nil, "t") }), "PID is nil")
	wantErr(t, "UnsubscribeNamed empty", call(func() error { return ps.UnsubscribeNamed("", "t") }), "name is empty")

	wantErr(t, "Broadcast empty topic", call(func() error { return ps.Broadcast(nil, "", stamp) }), "topic", "empty")
	wantErr(t, "Broadcast nil message", call(func() error { return ps.Broadcast(nil, "room", nil) }), "nil message", `"room"`)
	wantErr(t, "Broadcast typed nil message", call(func() error { return ps.Broadcast(nil, "room", (*testpb.Stamp)(nil)) }), "nil message", `"room"`)
	wantErr(t, "BroadcastFrom nil sender", call(func() error { return ps.BroadcastFrom(nil, "t", stamp) }), "sender PID")
	wantErr(t, "BroadcastFrom empty topic", call(func() error { return ps.BroadcastFrom(c.PID, "", stamp) }), "topic")
	wantErr(t, "LocalBroadcast empty topic", call(func() error { return ps.LocalBroadcast("", stamp) }), "topic")
	wantErr(t, "LocalBroadcast nil message", call(func() error { return ps.LocalBroadcast("room", nil) }), "nil message", `"room"`)
	wantErr(t, "DirectBroadcast empty node", call(func() error { return ps.DirectBroadcast("", "t", stamp) }), "node name")
	wantErr(t, "DirectBroadcast empty topic", call(func() error { return ps.DirectBroadcast(nd.Addr, "", stamp) }), "topic")

	// The Broadcast message an actor sends to ps.PID().
	ask := func(m *messages.Broadcast) error {
		res, err := nd.System.Root.RequestFuture(ps.PID(), m, 2*time.Second).Result()
		if err != nil {
			return err
		}
		if e := res.(*messages.BroadcastResult).Error; e != "" {
			return errors.New(e)
		}
		return nil
	}
	good, _ := anypb.New(stamp)
	wantErr(t, "actor Broadcast nil message", ask(&messages.Broadcast{Topic: "t"}), "message is nil")
	wantErr(t, "actor Broadcast bad type URL", ask(&messages.Broadcast{Topic: "t", Message: &anypb.Any{TypeUrl: "nonsense"}}), "type URL", `"nonsense"`)
	wantErr(t, "actor Broadcast empty topic", ask(&messages.Broadcast{Message: good}), "topic")

	// After Stop every call says so.
	if err := ps.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func() error{
		"Broadcast":       func() error { return ps.Broadcast(nil, "t", stamp) },
		"BroadcastFrom":   func() error { return ps.BroadcastFrom(c.PID, "t", stamp) },
		"DirectBroadcast": func() error { return ps.DirectBroadcast(nd.Addr, "t", stamp) },
		"LocalBroadcast":  func() error { return ps.LocalBroadcast("t", stamp) },
		"Subscribe":       func() error { return ps.Subscribe(c.PID, "t") },
		"Unsubscribe":     func() error { return ps.Unsubscribe(c.PID, "t") },
	} {
		if err := call(f); !errors.Is(err, echopubsub.ErrStopped) {
			t.Errorf("%s after Stop: %v, want ErrStopped", name, err)
		}
	}
	if err := ps.Stop(context.Background()); err != nil {
		t.Errorf("second Stop: %v (Stop is idempotent)", err)
	}
}

// TestCallErrorsBadArguments: nil options and contexts and oversized
// messages or batches are refused with an error naming them, never a panic.
func TestCallErrorsBadArguments(t *testing.T) {
	nd := test.StartCluster(t, 1, fastConfig())[0]
	ps := nd.PS
	c := nd.Subscribe(t, "ok")
	wantErr(t, "WithMaxQueueLen(0) names the value given", call(func() error { return ps.Subscribe(c.PID, "t", echopubsub.WithMaxQueueLen(0)) }),
		"MaxQueueLen", "got 0")
	wantErr(t, "nil SubscribeOption", call(func() error { return ps.Subscribe(c.PID, "t", nil) }), "option")
	wantErr(t, "nil Option", call(func() error {
		_, err := echopubsub.Start(nd.System, echopubsub.DefaultConfig("other"), nil)
		return err
	}), "option")
	//lint:ignore SA1012 the bad argument under test
	wantErr(t, "Stats(nil)", call(func() error { _, err := ps.Stats(nil); return err }), "context")
	//lint:ignore SA1012 the bad argument under test
	wantErr(t, "Stop(nil)", call(func() error { return ps.Stop(nil) }), "context")
	big := &testpb.Stamp{Pad: make([]byte, echopubsub.MaxFrameBytes+1)}
	wantErr(t, "Broadcast over the frame limit", call(func() error { return ps.Broadcast(nil, "t", big) }), "bytes")
	cfg := echopubsub.DefaultConfig("big")
	cfg.MaxBatchBytes = 2 * echopubsub.MaxFrameBytes
	wantErr(t, "MaxBatchBytes over the frame limit", cfg.Validate(), "MaxBatchBytes", fmt.Sprint(cfg.MaxBatchBytes))
}

// TestStatsAfterStop: Stats on a stopped pubsub says so, like every other
// call (before 6fc9c9a it returned "future: dead letter").
func TestStatsAfterStop(t *testing.T) {
	ps := test.StartCluster(t, 1, fastConfig())[0].PS
	if err := ps.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := ps.Stats(context.Background()); !errors.Is(err, echopubsub.ErrStopped) {
		t.Errorf("Stats after Stop: %v, want ErrStopped", err)
	}
}

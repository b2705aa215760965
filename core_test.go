package echopubsub_test

import (
	"testing"
	"time"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// fastConfig is the default configuration with test-sized timings.
func fastConfig() echopubsub.Config {
	cfg := echopubsub.DefaultConfig("scores")
	cfg.BatchInterval = 10 * time.Millisecond
	cfg.CallTimeout = 500 * time.Millisecond
	cfg.RetryInterval = 20 * time.Millisecond
	cfg.BufferSize = 100
	return cfg
}

func stamp(seq uint64) *testpb.Stamp { return &testpb.Stamp{Publisher: "t", Seq: seq} }

func wantStamps(t *testing.T, c *test.Collector, want ...uint64) {
	t.Helper()
	test.Eventually(t, 10*time.Second, func() bool { return equal(c.Stamps(), want) },
		func() string { return "want stamps " + fmtU(want) + ", got " + c.Describe() })
}

func TestBroadcastReachesEveryNode(t *testing.T) {
	nodes := test.StartCluster(t, 3, fastConfig())
	var cs []*test.Collector
	for _, nd := range nodes {
		cs = append(cs, nd.Subscribe(t, "match"))
	}
	waitJoined(t, nodes)
	for i := uint64(1); i <= 5; i++ {
		nodes[0].Broadcast(t, "match", stamp(i))
	}
	for _, c := range cs {
		wantStamps(t, c, 1, 2, 3, 4, 5)
	}
}

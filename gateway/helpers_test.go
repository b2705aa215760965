package gateway_test

import (
	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// sessionConfig is test.FastConfig with the session queues given.
func sessionConfig(soft, hard int) echopubsub.Config {
	cfg := test.FastConfig()
	cfg.SoftQueue, cfg.HardQueue = soft, hard
	return cfg
}

func stamp(seq uint64) *testpb.Stamp { return &testpb.Stamp{Publisher: "t", Seq: seq} }

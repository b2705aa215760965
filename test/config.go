package test

import (
	"time"

	"github.com/echopubsub/echopubsub"
)

// FastConfig is the default configuration (instance "scores") with
// test-sized timings: batches every 10 ms, calls bounded at 500 ms, a
// 100-message buffer.
func FastConfig() echopubsub.Config {
	cfg := echopubsub.DefaultConfig("scores")
	cfg.BatchInterval = 10 * time.Millisecond
	cfg.CallTimeout = 500 * time.Millisecond
	cfg.RetryInterval = 20 * time.Millisecond
	cfg.BufferSize = 100
	return cfg
}

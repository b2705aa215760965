package core

import "time"

// Config is the engine's part of echopubsub.Config, which Start validates
// and converts (Config.engine): see echopubsub.Config for what each field
// means, its default and its valid range.
type Config struct {
	Name                                                string
	PoolSize, BufferSize, MaxPendingWrites, MaxQueueLen int
	MaxBatchMessages, MaxBatchesInFlight, MaxBatchBytes int
	MaxTopicBytes                                       int
	BatchInterval, CallTimeout, RetryInterval           time.Duration
	CapacityWarningInterval, ForgetAfter, AckInterval   time.Duration
	CapacityWarningThreshold                            float64
}

// StallAfter is how long a peer's read cursor may stay still while the
// peer is owed messages before its stream counts as stalled (Stalled): two
// call timeouts (a batch and its retry, each given up after CallTimeout)
// and a flush interval. A peer that takes batches at all moves well within
// it. 10.2 s with the defaults.
func (c Config) StallAfter() time.Duration { return 2*c.CallTimeout + c.BatchInterval }

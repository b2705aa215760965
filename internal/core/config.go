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
	CapacityWarningInterval, ForgetAfter                time.Duration
	CapacityWarningThreshold                            float64
}

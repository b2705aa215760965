package echopubsub

import (
	"fmt"
	"time"

	"github.com/echopubsub/echopubsub/internal/core"
)

// Config is the configuration of one pubsub instance. Build it with
// DefaultConfig and change what you need; Validate (called by Start) names
// the first field that is wrong and its value.
type Config struct {
	// Name identifies the pubsub; it must match on every node. Actor names
	// and the Consul service derive from it. Required: letters, digits, '-',
	// '_' and '.'.
	Name string
	// PoolSize is the number of independent producer+worker pairs per node.
	// A sender always hits the same producer (hash of its PID), so its
	// stream stays ordered. Defaults to 1.
	PoolSize int
	// BufferSize is the number of recent messages each producer keeps for
	// replay. At most MaxBufferSize. Defaults to 10_000. What they cost in
	// memory, and the GOMEMLIMIT that keeps a node near it: BufferBytes,
	// MemoryLimit.
	BufferSize int
	// BatchInterval bounds how long a producer holds a part batch: a full
	// one (MaxBatchMessages or MaxBatchBytes worth, buffered for a node)
	// goes as soon as the node's window (MaxBatchesInFlight) has room,
	// whatever the interval. A part batch goes at the next flush, every
	// BatchInterval, or, while a batch is in flight to that node, when the
	// last one is acknowledged. 0 sends a part batch as soon as the node's
	// window has room, coalescing what arrives while it has none: the
	// lowest latency, at more batches per message under load.
	// Defaults to 200ms.
	BatchInterval time.Duration
	// CallTimeout bounds one acknowledged call to a remote worker, and how
	// long Broadcast waits for room in a full producer mailbox.
	// Defaults to 5s.
	CallTimeout time.Duration
	// RetryInterval is the wait after a failed call before the next try.
	// Defaults to 200ms.
	RetryInterval time.Duration
	// AckInterval is the least time between two answers a worker sends
	// while batches keep coming: an answer acknowledges every batch its
	// node's producer sent before it, so under a steady stream one answer
	// goes per AckInterval instead of one per batch, and each side spends
	// less CPU per message (about a third of the publishing node's at 10,000
	// msg/s), and waits less for a core (p99 a fifth lower at 10 ms than at
	// 1 ms: docs/benchmarks.md). The first answer after a quiet
	// AckInterval goes at once, and so does the answer to a batch that a
	// receipt waits on (BroadcastAwait), that fills the producer's window
	// to that node (MaxBatchesInFlight), that brings what waits for an
	// answer to half the capacity warning's lag (CapacityWarningThreshold
	// of BufferSize), or that a producer with a BatchInterval sent (its
	// next part batch waits for the answer): only the producer's buffer
	// sees the wait, and at most that share of it, at any rate. So the
	// answers held are those to producers with BatchInterval 0. 0 answers
	// as soon as the batches queued at the worker are handled. In [0,
	// CallTimeout/10]. Defaults to 10ms.
	AckInterval time.Duration
	// CapacityWarningThreshold: a warning is logged (and a
	// *messages.CapacityWarning published on the actor system's event stream) when
	// the slowest node's lag reaches this fraction of BufferSize. In (0, 1].
	// Defaults to 0.4.
	CapacityWarningThreshold float64
	// CapacityWarningInterval throttles that warning. Defaults to 60s.
	CapacityWarningInterval time.Duration
	// MaxBatchMessages bounds the entries in one batch, sent and received:
	// a batch from a peer with more entries is rejected whole, so give every
	// node the same value. At most MaxBatchMessagesLimit. Defaults to 10_000.
	MaxBatchMessages int
	// MaxBatchesInFlight sizes the window a producer keeps per node: what
	// it sends before the first is acknowledged, to keep the link busy
	// during a round trip. The window is MaxBatchesInFlight full batches'
	// worth of entries (MaxBatchMessages each) and bytes (MaxBatchBytes
	// each): that many full batches fill it, smaller batches under light
	// load do not (at most 256 batches of any size). 1 is stop-and-wait.
	// In [1, 64]. Defaults to 4.
	MaxBatchesInFlight int
	// MaxBatchBytes bounds the payload bytes in one batch (a batch holds at
	// least one entry), sent and received: a batch from a peer with more
	// payload bytes is rejected whole, so give every node the same value.
	// Keep it well under gRPC's receive limit (4 MiB by default;
	// RemoteConfig raises it to 64 MiB). At most MaxBatchBytesLimit.
	// Defaults to 1 MiB.
	MaxBatchBytes int
	// MaxTopicBytes bounds a topic's length in bytes (and a stream's name,
	// which is its topic): Broadcast, Subscribe, SessionSubscribe and the
	// other calls that take a topic refuse a longer one with
	// ErrInvalidTopic, as they refuse one that is not valid UTF-8. A topic
	// travels in every batch that carries it and names a stream in a
	// durable store. In [1, MaxTopicBytesLimit]. Defaults to 1024 (the
	// gateway's limit on a frame's topic).
	MaxTopicBytes int
	// MaxPendingWrites bounds the broadcasts queued in one producer's
	// mailbox; Broadcast waits (up to CallTimeout) for room beyond it.
	// Defaults to 10_000.
	MaxPendingWrites int
	// MaxQueueLen is the default bound on a subscriber's queued messages:
	// past it, newer messages are dropped for that subscriber and it gets one
	// BackPressure notice. Any positive value; per-subscription override with
	// WithMaxQueueLen. Defaults to 10_000.
	MaxQueueLen int
	// ForgetAfter is how long a producer keeps the read cursor of a member
	// that left the membership, and how long a worker keeps a producer it
	// has not heard from. A member returning within it resumes where it was
	// (either side's cursor is enough); when both sides forgot, where the
	// node was is unknown and it is told CursorExpired. Defaults to 5m.
	ForgetAfter time.Duration
	// RetentionInterval is how often the pubsub trims its durable streams
	// to WithRetention (the first trim runs at Start): rows outlive a
	// limit by up to about this long. Ignored without WithRetention.
	// Defaults to 1m.
	RetentionInterval time.Duration
	// SessionConfig: acknowledged sessions (OpenSession); its fields read
	// as Config's own.
	SessionConfig
}

// engine is the part of c the engine (producers, workers, delivery) reads.
func (c Config) engine() core.Config {
	return core.Config{Name: c.Name, PoolSize: c.PoolSize, BufferSize: c.BufferSize, BatchInterval: c.BatchInterval,
		CallTimeout: c.CallTimeout, RetryInterval: c.RetryInterval, CapacityWarningThreshold: c.CapacityWarningThreshold,
		CapacityWarningInterval: c.CapacityWarningInterval, MaxBatchMessages: c.MaxBatchMessages,
		MaxBatchesInFlight: c.MaxBatchesInFlight, MaxBatchBytes: c.MaxBatchBytes, MaxTopicBytes: c.MaxTopicBytes, MaxPendingWrites: c.MaxPendingWrites,
		MaxQueueLen: c.MaxQueueLen, ForgetAfter: c.ForgetAfter, AckInterval: c.AckInterval}
}

// MaxBatchBytesLimit is the largest MaxBatchBytes: half of the 64 MiB gRPC
// frame limit that RemoteConfig sets on both sides, leaving room for the
// framing of protoactor's envelope around a batch.
const MaxBatchBytesLimit = 32 << 20

// MaxTopicBytesLimit is the largest MaxTopicBytes: a durable topic names its
// stream in a store, and PostgreSQL refuses an index entry over about 2.7 kB.
const MaxTopicBytesLimit = core.MaxTopicBytesLimit

// MaxBufferSize is the largest BufferSize: 16,777,216 slots, 448 MiB of
// ring (28 bytes a slot) per producer before any message is held.
const MaxBufferSize = 1 << 24

// MaxBatchMessagesLimit is the largest MaxBatchMessages.
const MaxBatchMessagesLimit = 1 << 20

// defaultAckInterval is Config.AckInterval's default (see its doc).
const defaultAckInterval = 10 * time.Millisecond

// DefaultConfig returns the defaults of the Elixir EchoPubSub for name.
func DefaultConfig(name string) Config {
	return Config{
		Name:                     name,
		PoolSize:                 1,
		BufferSize:               10_000,
		BatchInterval:            200 * time.Millisecond,
		CallTimeout:              5 * time.Second,
		RetryInterval:            200 * time.Millisecond,
		AckInterval:              defaultAckInterval,
		CapacityWarningThreshold: 0.4,
		CapacityWarningInterval:  60 * time.Second,
		MaxBatchMessages:         10_000,
		MaxBatchesInFlight:       4,
		MaxBatchBytes:            1 << 20,
		MaxTopicBytes:            1024,
		MaxPendingWrites:         10_000,
		MaxQueueLen:              10_000,
		ForgetAfter:              5 * time.Minute,
		RetentionInterval:        time.Minute,
		SessionConfig:            DefaultSessionConfig(),
	}
}

// Validate returns an error naming the first invalid field and its value.
func (c Config) Validate() error {
	if c.Name == "" {
		return fmt.Errorf("echopubsub: config Name must not be empty")
	}
	for _, r := range c.Name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("echopubsub: config Name may hold only letters, digits, '-', '_' and '.', got %q", c.Name)
		}
	}
	positive := []struct {
		name string
		v    int
	}{
		{"PoolSize", c.PoolSize}, {"BufferSize", c.BufferSize}, {"MaxBatchMessages", c.MaxBatchMessages},
		{"MaxBatchBytes", c.MaxBatchBytes}, {"MaxPendingWrites", c.MaxPendingWrites}, {"MaxQueueLen", c.MaxQueueLen},
	}
	for _, f := range positive {
		if f.v <= 0 {
			return fmt.Errorf("echopubsub: config %s must be > 0, got %d", f.name, f.v)
		}
	}
	if c.BufferSize > MaxBufferSize {
		return fmt.Errorf("echopubsub: config BufferSize must be <= %d, got %d", MaxBufferSize, c.BufferSize)
	}
	if c.MaxBatchMessages > MaxBatchMessagesLimit {
		return fmt.Errorf("echopubsub: config MaxBatchMessages must be <= %d, got %d", MaxBatchMessagesLimit, c.MaxBatchMessages)
	}
	if c.MaxBatchBytes > MaxBatchBytesLimit {
		return fmt.Errorf("echopubsub: config MaxBatchBytes must be <= %d (half the gRPC frame limit RemoteConfig sets), got %d", MaxBatchBytesLimit, c.MaxBatchBytes)
	}
	if c.MaxTopicBytes < 1 || c.MaxTopicBytes > MaxTopicBytesLimit {
		return fmt.Errorf("echopubsub: config MaxTopicBytes must be in [1, %d], got %d", MaxTopicBytesLimit, c.MaxTopicBytes)
	}
	if c.MaxBatchesInFlight < 1 || c.MaxBatchesInFlight > 64 {
		return fmt.Errorf("echopubsub: config MaxBatchesInFlight must be in [1, 64], got %d", c.MaxBatchesInFlight)
	}
	if c.PoolSize > 1024 {
		return fmt.Errorf("echopubsub: config PoolSize must be <= 1024, got %d", c.PoolSize)
	}
	if c.BatchInterval < 0 {
		return fmt.Errorf("echopubsub: config BatchInterval must be >= 0, got %v", c.BatchInterval)
	}
	durations := []struct {
		name string
		v    time.Duration
	}{
		{"CallTimeout", c.CallTimeout}, {"RetryInterval", c.RetryInterval},
		{"CapacityWarningInterval", c.CapacityWarningInterval}, {"ForgetAfter", c.ForgetAfter},
		{"RetentionInterval", c.RetentionInterval},
	}
	for _, f := range durations {
		if f.v <= 0 {
			return fmt.Errorf("echopubsub: config %s must be > 0, got %v", f.name, f.v)
		}
	}
	if c.AckInterval < 0 || c.AckInterval > c.CallTimeout/10 {
		hint := ""
		if c.AckInterval == defaultAckInterval {
			hint = fmt.Sprintf(" (the default: with a CallTimeout under %v, set AckInterval too)", 10*defaultAckInterval)
		}
		return fmt.Errorf("echopubsub: config AckInterval must be in [0, CallTimeout/10 = %v], got %v%s", c.CallTimeout/10, c.AckInterval, hint)
	}
	if !(c.CapacityWarningThreshold > 0 && c.CapacityWarningThreshold <= 1) {
		return fmt.Errorf("echopubsub: config CapacityWarningThreshold must be in (0, 1], got %v", c.CapacityWarningThreshold)
	}
	return c.SessionConfig.validate()
}

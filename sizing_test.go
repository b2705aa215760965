package echopubsub_test

import (
	"fmt"
	"testing"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/actors/stream"
)

// The GOMEMLIMIT for a node of a 3-node cluster whose producer keeps the
// last 2,000,000 messages of 212 bytes (proto.Size of what it broadcasts).
func ExampleConfig_MemoryLimit() {
	cfg := echopubsub.DefaultConfig("scores")
	cfg.BufferSize = 2_000_000
	const payload, nodes = 212, 3
	fmt.Printf("buffers %d MiB, in flight %d MiB\n", cfg.BufferBytes(payload)>>20, cfg.InFlightBytes(payload, nodes)>>20)
	fmt.Printf("GOMEMLIMIT=%dMiB\n", cfg.MemoryLimit(payload, nodes, 0)>>20)
	// Output:
	// buffers 457 MiB, in flight 24 MiB
	// GOMEMLIMIT=545MiB
}

func TestMemorySizing(t *testing.T) {
	cfg := echopubsub.DefaultConfig("s")
	cfg.PoolSize, cfg.BufferSize = 2, 1000
	if got, want := cfg.BufferBytes(100), int64(2*1000*(100+stream.BytesPerMessage)); got != want {
		t.Errorf("BufferBytes(100) = %d, want %d", got, want)
	}
	if got := cfg.InFlightBytes(100, 1); got != 0 {
		t.Errorf("InFlightBytes on a single node = %d, want 0", got)
	}
	// 10 B entries: MaxBatchMessages bounds a batch before MaxBatchBytes does.
	if got, want := cfg.InFlightBytes(10, 3), int64(2*2*cfg.MaxBatchesInFlight*cfg.MaxBatchMessages*(10+12)*3); got != want {
		t.Errorf("InFlightBytes(10, 3) = %d, want %d", got, want)
	}
	if got, want := cfg.InFlightBytes(1000, 3), int64(2*2*cfg.MaxBatchesInFlight*cfg.MaxBatchBytes*3); got != want {
		t.Errorf("InFlightBytes(1000, 3) = %d, want %d", got, want)
	}
	other := int64(50 << 20)
	if got, want := cfg.MemoryLimit(100, 3, other), cfg.BufferBytes(100)+cfg.InFlightBytes(100, 3)+other+64<<20; got != want {
		t.Errorf("MemoryLimit = %d, want %d", got, want)
	}
}

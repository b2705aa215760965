package stream

import (
	"testing"

	"github.com/echopubsub/echopubsub/internal/core"
)

// TestHotPathAllocations guards the producer's buffer write: no heap
// allocation per message (payload bytes go to shared 64 KiB segments,
// topics and types are interned). It checks the count, not the time, so it
// holds on a loaded machine.
func TestHotPathAllocations(t *testing.T) {
	s, err := newStore(1000) // small: every write past 1,000 also evicts
	if err != nil {
		t.Fatal(err)
	}
	w := core.Write{Topic: "match:42", PayloadType: "scorepb.Goal", Payload: make([]byte, 10)}
	i := int64(0)
	allocs := testing.AllocsPerRun(20_000, func() {
		i++
		if _, err := s.write(&w, i); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0 {
		t.Fatalf("buffer write: %.2f allocations per message, want 0", allocs)
	}
}

//go:build !race

package core

import "testing"

// TestWritePoolAllocations: a Broadcast's Write and payload buffer come
// from the pool, once the producer recycled the previous ones. (Not under
// the race detector, whose sync.Pool drops items on purpose.)
func TestWritePoolAllocations(t *testing.T) {
	payload := make([]byte, 200)
	allocs := testing.AllocsPerRun(10_000, func() {
		w := NewWrite()
		w.Topic, w.PayloadType = "match:42", "scorepb.Goal"
		w.Payload = append(w.Payload, payload...)
		w.Recycle()
	})
	if allocs > 0 {
		t.Fatalf("%.2f allocations per write, want 0", allocs)
	}
}

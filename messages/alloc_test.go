package messages_test

import "testing"

// TestHotPathAllocations guards the batch: building one from buffered
// entries and reading it back cost a fixed number of allocations per batch
// (its columns), none per entry. It checks counts, not time, so it holds
// on a loaded machine.
func TestHotPathAllocations(t *testing.T) {
	es := benchEntries(1000, 10)
	build := testing.AllocsPerRun(50, func() { benchBatch(es) })
	if build > 10 {
		t.Fatalf("building a batch of %d entries: %.0f allocations, want at most 10 (none per entry)", len(es), build)
	}
	b := benchBatch(es)
	read := testing.AllocsPerRun(50, func() {
		c := b.Entries()
		for {
			if _, _, _, _, _, ok := c.Next(); !ok {
				break
			}
		}
	})
	if read > 0 {
		t.Fatalf("reading a batch of %d entries: %.0f allocations, want 0", len(es), read)
	}
}

package delivery

import (
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestHotPathAllocations guards local delivery: handing an already decoded
// message to a subscriber allocates nothing per message beyond what the
// actor mailbox's queue amortizes (0 allocations per message on average).
// It checks the count, not the time, so it holds on a loaded machine.
func TestHotPathAllocations(t *testing.T) {
	n := newBenchNode(t)
	n.subscribe(t, n.sink(), "t")
	it := &Item{Topic: "t", Message: wrapperspb.String("x"), Node: n.system.Address()}
	allocs := testing.AllocsPerRun(20_000, func() { n.d.Deliver(it) })
	if allocs > 0 {
		t.Fatalf("Deliver to one subscriber: %.2f allocations per message, want 0", allocs)
	}
}

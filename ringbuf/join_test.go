package ringbuf

import (
	"testing"

	"pgregory.net/rapid"
)

// JoinSince errs only towards earlier: whatever the probe's delays and the
// two clocks' rates, the bound is not after the instant the worker's age
// names (so no message written after the node's Start returned is
// withheld), and it is not earlier than that by more than the probe's
// round trip plus the margin.
func TestJoinSinceErrsOnlyTowardsEarlier(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		named := rapid.Int64Range(0, 1<<50).Draw(t, "named")         // the instant the age names, producer's clock
		elapsed := rapid.Int64Range(0, 10*3600e9).Draw(t, "elapsed") // from it to the answer
		rtt := rapid.Int64Range(0, 1e9).Draw(t, "round trip")        // the probe may leave before the named instant
		answered := named + elapsed
		sent := answered - rtt
		// The node's clock runs at rate of the producer's: the two differ
		// by up to 998 ppm in all (NTP slews each by at most 500 ppm; the
		// margin's integer division takes the rest).
		rate := 1 + float64(rapid.IntRange(-998, 998).Draw(t, "ppm"))/1e6
		age := int64(float64(elapsed) * rate)
		since := JoinSince(sent, age)
		if since > named+1 { // ages are whole nanoseconds: 1 ns of truncation
			t.Fatalf("JoinSince(%d, %d) = %d, after the named instant %d: a message written since would be withheld", sent, age, since, named)
		}
		if slack := named - since; slack > rtt+age/400+1 {
			t.Fatalf("JoinSince(%d, %d) = %d, %d before the named instant: more than the round trip %d and the margin", sent, age, since, slack, rtt)
		}
	})
}

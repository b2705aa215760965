package ringbuf

import (
	"testing"

	"github.com/echopubsub/echopubsub/internal/prop"
)

// JoinSince errs only towards earlier: whatever the probe's delays and the
// two clocks' rates, the bound is not after the instant the worker's age
// names (so no message written after the node's Start returned is
// withheld), and it is not earlier than that by more than the probe's
// round trip plus the margin.
func TestJoinSinceErrsOnlyTowardsEarlier(t *testing.T) {
	prop.Check(t, func(t *prop.T) {
		named := prop.Int64Range(0, 1<<50).Draw(t, "named")         // the instant the age names, producer's clock
		elapsed := prop.Int64Range(0, 10*3600e9).Draw(t, "elapsed") // from it to the answer
		rtt := prop.Int64Range(0, 1e9).Draw(t, "round trip")        // the probe may leave before the named instant
		answered := named + elapsed
		sent := answered - rtt
		// The node's clock runs at rate of the producer's: NTP slews each
		// clock by at most 500 ppm, so the two differ by up to
		// 1.0005/0.9995 - 1, about 1000.5 ppm.
		node := float64(prop.IntRange(-500, 500).Draw(t, "node ppm")) / 1e6
		producer := float64(prop.IntRange(-500, 500).Draw(t, "producer ppm")) / 1e6
		rate := (1 + node) / (1 + producer)
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

// The worst case the margin is for: the node's clock 500 ppm slow, the
// producer's 500 ppm fast, a probe answered at once, ten hours after the
// node started.
func TestJoinSinceWorstClocks(t *testing.T) {
	named, elapsed := int64(1<<40), int64(10*3600e9)
	rate := (1 - 500e-6) / (1 + 500e-6)
	age := int64(float64(elapsed) * rate)
	if since := JoinSince(named+elapsed, age); since > named {
		t.Fatalf("JoinSince = %d, %d ns after the instant the age names: a message written since would be withheld", since, since-named)
	}
}

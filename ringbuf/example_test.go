package ringbuf_test

import (
	"fmt"

	"github.com/echopubsub/echopubsub/ringbuf"
)

// The worked example of "How EchoPubSub works", with buffer size 4.
func Example() {
	ring, _ := ringbuf.New[string](4)
	show := func(next uint64) {
		d, _ := ring.Decide(next)
		switch d.Kind {
		case ringbuf.Messages:
			var msgs []string
			for c := d.From; c < d.To; c++ {
				m, _ := ring.At(c)
				msgs = append(msgs, m)
			}
			fmt.Printf("write=%d B=%d lag=%d -> %s %v\n", ring.WriteCursor(), next, d.Lag, d.Kind, msgs)
		case ringbuf.Expired:
			fmt.Printf("write=%d B=%d lag=%d -> %s: misses %d (%d overwritten)\n", ring.WriteCursor(), next, d.Lag, d.Kind, d.Missed, d.Overwritten)
		default:
			fmt.Printf("write=%d B=%d lag=%d -> %s\n", ring.WriteCursor(), next, d.Lag, d.Kind)
		}
	}
	for _, m := range []string{"m0", "m1", "m2"} {
		_, _ = ring.Write(m)
	}
	b := ring.WriteCursor() // B acknowledges m0..m2
	show(b)
	_, _ = ring.Write("m3")
	_, _ = ring.Write("m4")
	show(b)
	for _, m := range []string{"m5", "m6", "m7"} {
		_, _ = ring.Write(m)
	}
	show(b)
	// Output:
	// write=3 B=3 lag=0 -> caught_up
	// write=5 B=3 lag=2 -> messages [m3 m4]
	// write=8 B=3 lag=5 -> expired: misses 5 (1 overwritten)
}

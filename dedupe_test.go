package echopubsub_test

import (
	"fmt"

	"github.com/echopubsub/echopubsub"
)

// A redelivery within the window is caught; one older than the window is not
// (the window bounds memory).
func ExampleDedupe() {
	d := echopubsub.NewDedupe[uint64](3)
	for _, id := range []uint64{1, 2, 2, 3, 4, 1, 4} {
		fmt.Print(d.Seen(id), " ")
	}
	fmt.Println()
	// Output: false false true false false false true
}

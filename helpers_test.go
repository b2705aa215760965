package echopubsub_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub/test"
)

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func fmtU(s []uint64) string { return fmt.Sprint(s) }

// waitJoined waits until every node's producers registered with every other
// node: a node counts as joined from its first successful registration.
func waitJoined(t *testing.T, nodes []*test.Node) {
	t.Helper()
	for _, nd := range nodes {
		for _, other := range nodes {
			if other == nd {
				continue
			}
			test.Eventually(t, 10*time.Second, func() bool { return nd.NodeStats(t, other.Addr).Registered },
				test.Sprintf("%s registered with %s", nd.Addr, other.Addr))
		}
	}
}

package echopubsub_test

import (
	"fmt"
	"testing"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/test"
)

// staticOf is static membership of addrs.
func staticOf(addrs []string) echopubsub.Option {
	return echopubsub.WithMembership(cluster.NewStatic(addrs...))
}

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

// waitJoined waits until every producer of every node registered with every
// other node. Users never need it (see "Joined" in the package doc); only
// tests about a joined node's cursor (its lag, Missed counts) do, and each
// says why.
func waitJoined(t *testing.T, nodes []*test.Node) {
	t.Helper()
	test.WaitJoined(t, nodes)
}

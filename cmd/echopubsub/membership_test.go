package main

import (
	"strconv"
	"testing"

	"github.com/echopubsub/echopubsub/internal/proc"
	"github.com/echopubsub/echopubsub/test"
)

// TestServeMemberships: serve's other memberships. consul: two nodes find
// each other through a Consul agent (no peer list) and each sees the
// other registered. dns: a node whose name (localhost) resolves to its own
// address is a ready cluster of one, its port taken from node.advertise.
func TestServeMemberships(t *testing.T) {
	t.Run("consul", func(t *testing.T) {
		agent := test.StartConsulAgent(t)
		ports, err := proc.FreePorts(6)
		if err != nil {
			t.Fatal(err)
		}
		peers := []string{"127.0.0.1:" + strconv.Itoa(ports[0]), "127.0.0.1:" + strconv.Itoa(ports[3])}
		startNodes(t, ports, peers, bufferSize, "http", func(int) []string {
			return []string{"--membership-kind", "consul", "--membership-consul-address", agent.Addr}
		}, nil) // returns once each node sees the other registered
		if n := agent.HealthyInstances("echopubsub"); n != 2 {
			t.Errorf("Consul lists %d healthy instances of service echopubsub, want 2", n)
		}
	})
	t.Run("dns", func(t *testing.T) {
		ports, err := proc.FreePorts(3)
		if err != nil {
			t.Fatal(err)
		}
		startNodes(t, ports, []string{"127.0.0.1:" + strconv.Itoa(ports[0])}, bufferSize, "http", func(int) []string {
			return []string{"--membership-kind", "dns", "--membership-dns-name", "localhost", "--membership-dns-interval", "200ms"}
		}, nil) // returns once the node is ready with no peer
	})
}

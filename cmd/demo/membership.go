package main

import (
	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub/cluster"
)

// membershipFor picks how a node finds the others: the embedded static list
// of advertised (proxy) addresses by default, Consul when -consul is set.
func membershipFor(spec nodeSpec, log zerolog.Logger) (cluster.Membership, error) {
	if spec.Consul == "" {
		return cluster.NewStatic(spec.Peers...), nil
	}
	return consulMembership(spec.Consul, log)
}

package main

import (
	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/cluster/consul"
)

// consulMembership makes a node find the others through the Consul agent at
// addr (-consul). Each node registers its advertised address, which is its
// proxy's, so Consul-discovered peers also go through the demo's cut path.
// Going offline does not touch Consul: the node's TTL check is refreshed
// over HTTP, so it stays a member and its peers keep buffering for it, as
// they would for a real network partition between nodes.
func consulMembership(addr string, _ zerolog.Logger) (cluster.Membership, error) {
	cfg := consul.DefaultConfig()
	cfg.Address = addr
	return consul.New(cfg)
}

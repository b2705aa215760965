//go:build !race

// Two nodes in one process: not in the race-checked run (protoactor's
// remote.Start races on grpclog's global logger when several nodes share a
// process; see RACE_PKGS in the Makefile). make test runs it in the root
// module's phase.

package dns_test

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster/dns"
	"github.com/echopubsub/echopubsub/internal/proc"
	"github.com/echopubsub/echopubsub/test"
)

// TestDNSClusterDelivers: two pubsubs that find each other through DNS,
// as pods behind a headless Service do (one A record per pod, every pod on
// the same port: here two loopback addresses), deliver to each other.
func TestDNSClusterDelivers(t *testing.T) {
	srv := startServer(t)
	log := test.Logger(t, zerolog.InfoLevel)
	hosts := []string{"127.0.0.1", "127.0.0.2"}
	port := freePortOn(t, hosts...)
	srv.setA(svc, hosts...)
	var nodes []*test.Node
	for _, h := range hosts {
		system := actor.NewActorSystem(echopubsub.ActorSystemLogger(log.Level(zerolog.ErrorLevel)))
		r := remote.NewRemote(system, echopubsub.RemoteConfig(h, port, log))
		r.Start()
		nd := &test.Node{System: system, Remote: r, Addr: system.Address(), Faults: test.NewFaults(), Log: log}
		m := mustNew(t, dns.Config{Name: svc, Port: port, Resolver: srv.resolver(), Interval: 50 * time.Millisecond})
		nd.Start(t, test.FastConfig(), echopubsub.WithMembership(m))
		nodes = append(nodes, nd)
	}
	c := nodes[1].Subscribe(t, "match:1")
	test.WaitJoined(t, nodes)
	for i := 0; i < 10; i++ {
		nodes[0].Broadcast(t, "match:1", wrapperspb.Int64(int64(i)))
	}
	test.Eventually(t, 10*time.Second, func() bool { return c.Len() == 10 }, func() string { return c.Describe() })
}

// freePortOn is a TCP port free on every one of hosts a moment ago.
func freePortOn(t *testing.T, hosts ...string) int {
	t.Helper()
	for attempt := 0; attempt < 20; attempt++ {
		ports, err := proc.FreePorts(1)
		if err != nil {
			t.Fatal(err)
		}
		free := true
		for _, h := range hosts {
			ln, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(ports[0])))
			if err != nil {
				free = false
				break
			}
			ln.Close()
		}
		if free {
			return ports[0]
		}
	}
	t.Fatalf("no port free on all of %v", hosts)
	return 0
}

package dns_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/cluster/dns"
	"github.com/echopubsub/echopubsub/test"
)

const svc = "echopubsub.prod.svc.cluster.local"

func TestDNSConfigDefaultsAndValidation(t *testing.T) {
	m, err := dns.New(dns.Config{Name: svc, Port: 8090})
	if err != nil {
		t.Fatalf("defaults: %v", err)
	}
	got := m.Config()
	want := dns.DefaultConfig()
	want.Name, want.Port = svc, 8090
	if got != want {
		t.Fatalf("defaults:\n got %+v\nwant %+v", got, want)
	}
	if c := (dns.Config{Name: svc, Port: 1, Interval: time.Second}); mustNew(t, c).Config().Timeout != time.Second {
		t.Fatalf("Timeout defaults to at most Interval: %+v", mustNew(t, c).Config())
	}
	for _, tc := range []struct {
		cfg  dns.Config
		want string
	}{
		{dns.Config{Port: 1}, `Name must be a DNS name, got ""`},
		{dns.Config{Name: "http://x", Port: 1}, `Name must be a DNS name, got "http://x"`},
		{dns.Config{Name: svc}, "Port must be 1..65535 for address records, got 0"},
		{dns.Config{Name: svc, Port: 70000}, "Port must be 1..65535 for address records, got 70000"},
		{dns.Config{Name: svc, SRV: true, Port: 1}, "Port must be 0 with SRV (the records carry the ports), got 1"},
		{dns.Config{Name: svc, Port: 1, Interval: -time.Second}, "Interval must be > 0, got -1s"},
		{dns.Config{Name: svc, Port: 1, Interval: time.Second, Timeout: 2 * time.Second}, "Timeout (2s) must be <= Interval (1s)"},
		{dns.Config{Name: svc, Port: 1, RetryMin: time.Minute}, "RetryMin (1m0s) must be <= RetryMax (30s)"},
		{dns.Config{Name: svc, Port: 1, LeftAfter: -1}, "LeftAfter must be >= 1, got -1"},
	} {
		_, err := dns.New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
	system := newSystem(t)
	err = mustNew(t, dns.Config{Name: svc, Port: 1}).Start(cluster.Env{System: system, Self: cluster.Member{Address: "nonhost"},
		Owner: test.SpawnMembershipEvents(system).PID})
	if err == nil || !strings.Contains(err.Error(), `"nonhost"`) {
		t.Fatalf("Start with a bad address = %v, want an error naming it", err)
	}
}

// TestDNSMembersJoinAndLeave: members are the headless Service's addresses:
// each appears as Joined (then one Listed), one that LeftAfter successive
// answers lack is Left (not before), a name that no longer exists (no
// ready pod) is an answer listing no one, and nothing is sent after Stop.
func TestDNSMembersJoinAndLeave(t *testing.T) {
	srv := startServer(t)
	system := newSystem(t)
	ignore := goleak.IgnoreCurrent()
	srv.setA(svc, "127.0.0.1", "127.0.0.2")
	self := "127.0.0.1:7001"
	m, ev, _ := startMember(t, system, dns.Config{Name: svc, Port: 7001, Resolver: srv.resolver(),
		Interval: 20 * time.Millisecond, LeftAfter: 3}, self)

	ev.Wait(t, "127.0.0.2:7001", cluster.Joined, 0)
	ev.Wait(t, "", cluster.Listed, 0)
	if ms := m.Members(); len(ms) != 2 || ms[0].Address != self || ms[1] != (cluster.Member{Address: "127.0.0.2:7001", Name: "127.0.0.2:7001"}) {
		t.Fatalf("Members() = %v, want self then 127.0.0.2:7001", ms)
	}
	srv.setA(svc, "127.0.0.1", "127.0.0.2", "::1")
	ev.Wait(t, "[::1]:7001", cluster.Joined, 0)

	// 127.0.0.2 drops out of the answers: Left only after three answers
	// without it.
	srv.setA(svc, "127.0.0.1", "::1")
	from := srv.queryCount()
	ev.Wait(t, "127.0.0.2:7001", cluster.Left, 0)
	// Each lookup asks A and AAAA: three answers are at least six queries.
	if n := srv.queryCount() - from; n < 6 {
		t.Fatalf("Left after %d queries, want at least 6 (LeftAfter 3 answers of A and AAAA)", n)
	}
	// The Service has no ready pod: NXDOMAIN lists no one.
	srv.setA(svc)
	ev.Wait(t, "[::1]:7001", cluster.Left, 0)
	for _, name := range []string{"127.0.0.2:7001", "[::1]:7001"} {
		if got := ev.Kinds(name); !test.EqualKinds(got, cluster.Joined, cluster.Left) {
			t.Fatalf("events for %s = %v, want joined, left", name, got)
		}
	}
	if got := ev.Kinds(self); !test.EqualKinds(got, cluster.Joined) {
		t.Fatalf("events for self = %v, want one joined (from Start; self is never Left)", got)
	}
	if n := len(ev.OfKind(cluster.Listed)); n != 1 {
		t.Fatalf("%d Listed, want 1", n)
	}

	stop(t, m)
	n := ev.Len()
	srv.setA(svc, "127.0.0.1", "127.0.0.5")
	from = srv.queryCount()
	test.Never(t, 200*time.Millisecond, func() bool { return ev.Len() != n || srv.queryCount() != from },
		test.Sprintf("a lookup or an event after Stop"))
	test.VerifyNoLeaks(t, ignore)
}

// TestDNSOutageKeepsMembers: while the DNS server fails (SERVFAIL), the
// last known members stand however many lookups fail, one line says DNS is
// unavailable and one that it is back; afterwards the answers rule again.
func TestDNSOutageKeepsMembers(t *testing.T) {
	srv := startServer(t)
	system := newSystem(t)
	srv.setA(svc, "127.0.0.1", "127.0.0.2")
	m, ev, log := startMember(t, system, dns.Config{Name: svc, Port: 7001, Resolver: srv.resolver(),
		Interval: 20 * time.Millisecond, LeftAfter: 1, RetryMin: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond}, "127.0.0.1:7001")
	ev.Wait(t, "127.0.0.2:7001", cluster.Joined, 0)

	srv.setFailing(true)
	from := srv.queryCount()
	// The server's query count is the only pace of the lookups a test can
	// see: ten failed queries are several failed lookups.
	test.Eventually(t, 10*time.Second, func() bool { return srv.queryCount()-from >= 10 }, test.Sprintf("lookups during the outage"))
	if left := ev.OfKind(cluster.Left); len(left) != 0 {
		t.Fatalf("a Left during a DNS outage: %v", ev)
	}
	if len(m.Members()) != 2 {
		t.Fatalf("Members() = %v during the outage, want the last known two", m.Members())
	}
	srv.setFailing(false)
	test.Eventually(t, 10*time.Second, func() bool { return log.Count("dns available again") == 1 }, test.Sprintf("'dns available again' logged"))
	if n := log.Count("dns unavailable:"); n != 1 {
		t.Fatalf("%d 'dns unavailable' lines, want 1:\n%s", n, log)
	}
	srv.setA(svc, "127.0.0.1")
	ev.Wait(t, "127.0.0.2:7001", cluster.Left, 0)
}

// TestDNSSRVRecords: with SRV, each record's target and port is a member.
func TestDNSSRVRecords(t *testing.T) {
	srv := startServer(t)
	system := newSystem(t)
	name := "_remote._tcp." + svc
	pod := func(i string) string { return "echopubsub-" + i + ".echopubsub.prod.svc.cluster.local" }
	srv.setSRV(name, net.SRV{Target: pod("0"), Port: 8090}, net.SRV{Target: pod("1"), Port: 8091})
	_, ev, _ := startMember(t, system, dns.Config{Name: name, SRV: true, Resolver: srv.resolver(),
		Interval: 20 * time.Millisecond}, pod("0")+":8090")
	ev.Wait(t, pod("1")+":8091", cluster.Joined, 0)
	if got := ev.Kinds(pod("0") + ":8090"); !test.EqualKinds(got, cluster.Joined) {
		t.Fatalf("events for self = %v, want the one joined from Start", got)
	}
}

func mustNew(t *testing.T, cfg dns.Config) *dns.Membership {
	t.Helper()
	m, err := dns.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

func newSystem(t *testing.T) *actor.ActorSystem {
	t.Helper()
	system := actor.NewActorSystem(echopubsub.ActorSystemLogger(test.Logger(t, zerolog.ErrorLevel)))
	t.Cleanup(system.Shutdown)
	return system
}

func startMember(t *testing.T, system *actor.ActorSystem, cfg dns.Config, self string) (*dns.Membership, *test.MembershipEvents, *test.Captured) {
	t.Helper()
	m := mustNew(t, cfg)
	ev := test.SpawnMembershipEvents(system)
	log, captured := test.CapturingLogger(t, zerolog.InfoLevel)
	if err := m.Start(cluster.Env{System: system, Self: cluster.Member{Address: self, Name: self}, Owner: ev.PID, Log: log}); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { stop(t, m) })
	ev.Wait(t, self, cluster.Joined, 0) // Start announces self first
	return m, ev, captured
}

func stop(t *testing.T, m *dns.Membership) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.Stop(ctx); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

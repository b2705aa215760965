package consul_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/cluster/consul"
	"github.com/echopubsub/echopubsub/test"
)

const service = "scores"

func fastConsul(addr string) consul.Config { return test.FastConsulConfig(addr) }

func TestConsulConfigDefaultsAndValidation(t *testing.T) {
	c, err := consul.New(consul.Config{Address: "127.0.0.1:8500"})
	if err != nil {
		t.Fatalf("defaults: %v", err)
	}
	got := c.Config()
	want := consul.Config{Address: "127.0.0.1:8500", Scheme: "http", TTL: 10 * time.Second,
		RefreshInterval: 10 * time.Second / 3, DeregisterCriticalServiceAfter: time.Minute, WaitTime: time.Minute,
		RequestTimeout: 5 * time.Second, RetryMin: 500 * time.Millisecond, RetryMax: 30 * time.Second,
		RecoveryGrace: 40 * time.Second, Token: got.Token, Datacenter: got.Datacenter}
	if got != want {
		t.Fatalf("defaults:\n got %+v\nwant %+v", got, want)
	}
	// Derived defaults follow the values actually set.
	if c, _ := consul.New(consul.Config{Address: "h:1", TTL: 3 * time.Second, RetryMax: time.Second}); c.Config().RefreshInterval != time.Second || c.Config().RecoveryGrace != 4*time.Second {
		t.Fatalf("derived defaults: %+v", c.Config())
	}

	for _, tc := range []struct {
		cfg  consul.Config
		want string
	}{
		{consul.Config{Address: "nohost"}, `Address must be host:port, got "nohost"`},
		{consul.Config{Address: "h:1", Scheme: "ftp"}, `Scheme must be http or https, got "ftp"`},
		{consul.Config{Address: "h:1", TTL: 500 * time.Millisecond}, "TTL must be >= 1s, got 500ms"},
		{consul.Config{Address: "h:1", TTL: 2 * time.Second, RefreshInterval: 2 * time.Second}, "RefreshInterval (2s) must be shorter than TTL (2s)"},
		{consul.Config{Address: "h:1", RequestTimeout: -time.Second}, "RequestTimeout must be > 0, got -1s"},
		{consul.Config{Address: "h:1", WaitTime: 11 * time.Minute}, "WaitTime must be <= 10m, got 11m0s"},
		{consul.Config{Address: "h:1", RetryMin: 2 * time.Second, RetryMax: time.Second}, "RetryMin (2s) must be <= RetryMax (1s)"},
	} {
		_, err := consul.New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}

	// A bad advertised address fails Start (and starts nothing).
	system := actor.NewActorSystem()
	c, _ = consul.New(consul.Config{Address: "127.0.0.1:1"})
	err = c.Start(cluster.Env{System: system, Self: cluster.Member{Address: "nonhost"}, Service: service, Owner: system.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))})
	if err == nil || !strings.Contains(err.Error(), `"nonhost"`) {
		t.Fatalf("Start with a bad address = %v, want an error naming it", err)
	}
}

// TestConsulMembersJoinUpdateLeave: a member registered in Consul is
// Joined; re-registered with a new incarnation it is Updated (a restarted
// node); when its TTL check is no longer refreshed (a killed node) it is
// Left after about TTL. This node stays healthy past its own TTL (its
// heartbeat refreshes it) and is gone from Consul after Stop.
func TestConsulMembersJoinUpdateLeave(t *testing.T) {
	agent := test.StartConsulAgent(t)
	system := newSystem(t)
	ignore := ignoreCurrent()

	a, evA, _ := startMember(t, system, fastConsul(agent.Addr), "127.0.0.1:7001", 1)
	test.Eventually(t, 5*time.Second, func() bool { return agent.HealthyInstances(service) == 1 },
		test.Sprintf("this node registered and passing in consul"))

	client := apiClient(t, agent.Addr)
	b := "127.0.0.1:7002"
	register := func(inc string) time.Time {
		t.Helper()
		err := client.Agent().ServiceRegister(&api.AgentServiceRegistration{
			ID: service + "@" + b, Name: service, Address: "127.0.0.1", Port: 7002,
			Meta:  map[string]string{consul.MetaNode: b, consul.MetaIncarnation: inc},
			Check: &api.AgentServiceCheck{CheckID: service + "@" + b + ":ttl", TTL: "1s", Status: api.HealthPassing},
		})
		if err != nil {
			t.Fatalf("register fake member: %v", err)
		}
		return time.Now()
	}
	register("1")
	evA.Wait(t, b, cluster.Joined, 1)
	if ms := a.Members(); len(ms) != 2 || ms[0].Name != "127.0.0.1:7001" || ms[1] != (cluster.Member{Address: b, Name: b, Incarnation: 1}) {
		t.Fatalf("Members() = %v, want self then %s inc 1", ms, b)
	}
	register("2")
	evA.Wait(t, b, cluster.Updated, 2)
	if err := client.Agent().UpdateTTL(service+"@"+b+":ttl", "", api.HealthPassing); err != nil {
		t.Fatalf("refresh fake member: %v", err)
	}
	lastRefresh := time.Now()

	// Nobody refreshes b's check: it turns critical after its TTL.
	evA.Wait(t, b, cluster.Left, 2)
	if d := time.Since(lastRefresh); d < 900*time.Millisecond {
		t.Fatalf("member left %v after its last refresh, before its 1s TTL", d)
	}
	if got := evA.Kinds(b); !test.EqualKinds(got, cluster.Joined, cluster.Updated, cluster.Left) {
		t.Fatalf("events for %s = %v, want joined, updated, left", b, got)
	}
	// Polled: once (on a loaded machine, in CI) the agent's health endpoint
	// still counted the fake member right after the watch had seen it
	// critical; what matters here is that this node stays (1, not 0).
	healthy := 0
	test.Eventually(t, 5*time.Second, func() bool { healthy = agent.HealthyInstances(service); return healthy == 1 },
		func() string {
			return fmt.Sprintf("healthy instances = %d after the fake member's TTL, want 1 (this node, kept alive by its heartbeat)", healthy)
		})

	stop(t, a)
	if err := a.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop = %v, want nil (idempotent)", err)
	}
	if n := agent.HealthyInstances(service); n != 0 {
		t.Fatalf("healthy instances = %d after Stop, want 0 (deregistered)", n)
	}
	n := evA.Len()
	register("3")
	test.Never(t, 300*time.Millisecond, func() bool { return evA.Len() != n }, test.Sprintf("an event after Stop"))
	test.VerifyNoLeaks(t, ignore...) // protoactor's timed goroutines are ignored by name (see test.VerifyNoLeaks)
}

// TestConsulUnreachableAtStartRetriesThenJoins: with nothing answering on
// Consul's address, Start succeeds, attempts back off (no hot loop) and one
// line says Consul is unavailable however many attempts fail; once the
// agent is up the node registers, finds the other member, and one line
// says Consul is back.
func TestConsulUnreachableAtStartRetriesThenJoins(t *testing.T) {
	agent := test.NewConsulAgent(t) // not started
	system := newSystem(t)
	ignore := ignoreCurrent()

	// Until the agent starts, its HTTP port accepts and drops connections:
	// every attempt is counted.
	l, err := net.Listen("tcp", agent.Addr)
	if err != nil {
		t.Fatalf("listen on consul's port: %v", err)
	}
	var attempts atomic.Int64
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			attempts.Add(1)
			conn.Close()
		}
	}()

	began := time.Now()
	a, evA, logA := startMember(t, system, fastConsul(agent.Addr), "127.0.0.1:7001", 1)
	test.Eventually(t, 10*time.Second, func() bool { return attempts.Load() >= 16 }, test.Sprintf("16 attempts"))
	// Two workers backing off from 20ms (jitter [d/2, d]) need at least
	// ~350ms for 16 attempts; a hot loop would take a few milliseconds.
	if d := time.Since(began); d < 300*time.Millisecond {
		t.Fatalf("16 attempts in %v: not backing off", d)
	}
	if n := logA.count("consul unavailable"); n != 1 {
		t.Fatalf("%d 'consul unavailable' lines after %d failed attempts, want 1:\n%s", n, attempts.Load(), logA)
	}
	l.Close()
	<-acceptDone

	agent.Start(t)
	test.Eventually(t, 10*time.Second, func() bool { return agent.HealthyInstances(service) == 1 },
		test.Sprintf("node registered once consul is up"))
	b, evB, _ := startMember(t, system, fastConsul(agent.Addr), "127.0.0.1:7002", 1)
	evA.Wait(t, "127.0.0.1:7002", cluster.Joined, 1)
	evB.Wait(t, "127.0.0.1:7001", cluster.Joined, 1)
	test.Eventually(t, 5*time.Second, func() bool { return logA.count("consul available again") == 1 },
		func() string { return "one 'available again' line:\n" + logA.String() })
	for _, line := range []string{"consul unavailable", "consul available again", "registered with consul"} {
		if n := logA.count(line); n != 1 {
			t.Errorf("%d %q lines, want 1:\n%s", n, line, logA)
		}
	}
	stop(t, a)
	stop(t, b)
	test.VerifyNoLeaks(t, ignore...) // protoactor's timed goroutines are ignored by name (see test.VerifyNoLeaks)
}

// TestConsulOutageKeepsMembers: Consul crashes and comes back empty (a dev
// agent keeps nothing). No member is reported Left (not during the outage,
// not while the nodes register again, not after the recovery grace), both
// nodes register again by themselves, and a real leave afterwards is still
// reported.
func TestConsulOutageKeepsMembers(t *testing.T) {
	agent := test.StartConsulAgent(t)
	system := newSystem(t)
	ignore := ignoreCurrent()
	cfg := fastConsul(agent.Addr)

	a, evA, logA := startMember(t, system, cfg, "127.0.0.1:7001", 1)
	b, evB, _ := startMember(t, system, cfg, "127.0.0.1:7002", 1)
	evA.Wait(t, "127.0.0.1:7002", cluster.Joined, 1)
	evB.Wait(t, "127.0.0.1:7001", cluster.Joined, 1)

	agent.Stop(t)
	test.Eventually(t, 5*time.Second, func() bool { return logA.count("consul unavailable") == 1 },
		func() string { return "outage noticed:\n" + logA.String() })
	agent.Start(t)
	test.Eventually(t, 10*time.Second, func() bool { return agent.HealthyInstances(service) == 2 },
		test.Sprintf("both nodes registered again by themselves"))
	test.Eventually(t, 5*time.Second, func() bool { return logA.count("consul available again") == 1 },
		func() string { return "recovery noticed:\n" + logA.String() })
	// "Available again" and "registered again" are two lines from two steps
	// of the same recovery: the second may follow the first by a moment.
	test.Eventually(t, 5*time.Second, func() bool { return logA.count("registered with consul again") >= 1 },
		func() string { return "re-registration:\n" + logA.String() })
	if n := logA.count("registered with consul again"); n != 1 {
		t.Errorf("%d 're-registered' lines, want 1:\n%s", n, logA)
	}
	// The grace ends RecoveryGrace after the watch's first answer; past it,
	// everyone is back, so no Left ever.
	left := func() bool { return len(evA.OfKind(cluster.Left)) > 0 || len(evB.OfKind(cluster.Left)) > 0 }
	test.Never(t, cfg.RecoveryGrace+500*time.Millisecond, left,
		func() string { return "a Left for a Consul outage: " + evA.String() + " / " + evB.String() })
	if !left() && len(a.Members()) != 2 {
		t.Fatalf("a's members = %v, want both", a.Members())
	}

	stop(t, b) // a real leave is still reported, at once (deregistered)
	evA.Wait(t, "127.0.0.1:7002", cluster.Left, 1)
	stop(t, a)
	test.VerifyNoLeaks(t, ignore...) // protoactor's timed goroutines are ignored by name (see test.VerifyNoLeaks)
}

// --- helpers ---

// ignoreCurrent ignores the goroutines running now and the one that waits
// for a (re)started agent process (test kit, ends with the process).
func ignoreCurrent() []goleak.Option {
	return []goleak.Option{goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/echopubsub/echopubsub/test.(*ConsulAgent).Start.func2")}
}

func newSystem(t *testing.T) *actor.ActorSystem {
	t.Helper()
	system := actor.NewActorSystem(echopubsub.ActorSystemLogger(test.Logger(t, zerolog.ErrorLevel)))
	t.Cleanup(system.Shutdown)
	return system
}

func apiClient(t *testing.T, addr string) *api.Client {
	t.Helper()
	cfg := api.DefaultConfig()
	cfg.Address = addr
	cfg.Transport.DisableKeepAlives = true // no idle connection for goleak to see
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatalf("consul client: %v", err)
	}
	return c
}

// startMember starts a Consul membership for node addr, whose events go to
// a recorder; it is stopped when the test ends.
func startMember(t *testing.T, system *actor.ActorSystem, cfg consul.Config, addr string, inc uint64) (*consul.Membership, *test.MembershipEvents, *lines) {
	t.Helper()
	c, err := consul.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	rec := test.SpawnMembershipEvents(system)
	log := &lines{t: t}
	t.Cleanup(log.close)
	self := cluster.Member{Address: addr, Name: addr, Incarnation: inc}
	env := cluster.Env{System: system, Self: self, Service: service, Owner: rec.PID,
		Log: zerolog.New(log).With().Timestamp().Str("test_node", addr).Logger()}
	if err := c.Start(env); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { stop(t, c) })
	rec.Wait(t, addr, cluster.Joined, inc) // Start announces self first
	return c, rec, log
}

func stop(t *testing.T, c *consul.Membership) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

// lines records a logger's output (one JSON object per line) and echoes
// it to t.Log while the test runs.
type lines struct {
	t    *testing.T
	mu   sync.Mutex
	buf  []string
	done bool
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := strings.TrimSuffix(string(p), "\n")
	l.buf = append(l.buf, s)
	if !l.done {
		l.t.Log(s)
	}
	return len(p), nil
}

func (l *lines) close() { l.mu.Lock(); l.done = true; l.mu.Unlock() }

// count is the number of lines whose message starts with msg.
func (l *lines) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.buf {
		if strings.Contains(s, `"message":"`+msg) {
			n++
		}
	}
	return n
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.buf, "\n")
}

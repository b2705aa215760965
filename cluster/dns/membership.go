// Package dns is a cluster.Membership read from DNS, for Kubernetes without
// Consul: the members are the addresses of a headless Service (its A and
// AAAA records, or its SRV records), resolved every Config.Interval.
//
//	m, err := dns.New(dns.Config{Name: "echopubsub.prod.svc.cluster.local", Port: 8090})
//	ps, err := echopubsub.Start(system, cfg, echopubsub.WithMembership(m))
//
// DNS knows no incarnations (each member's is 0, "not known", as with
// cluster.Static): a restarted node is recognised by its registration
// handshake, as a static member is. A member counts as joined from the
// first answer that lists it; it is reported Left once Config.LeftAfter
// successive answers lacked it. A name that does not exist (NXDOMAIN: a
// headless Service with no ready pod) is an answer that lists no one. A
// lookup that fails (timeout, SERVFAIL, no server) is no answer: the last
// known members stand, one log line says DNS is unavailable and one more
// when it is back, and lookups are retried with backoff.
package dns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"

	"github.com/asynkron/protoactor-go/eventstream"
	"github.com/asynkron/protoactor-go/remote"

	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/internal/retry"
)

// Membership is a cluster.Membership backed by DNS. Its one worker, the
// lookup goroutine, is started by Start and stopped by Stop; it keeps no
// state of its own and turns each answer into events under mu.
type Membership struct {
	cfg Config

	mu      sync.Mutex // guards everything below, and every Send to the owner
	env     cluster.Env
	started bool
	stopped bool
	known   map[string]cluster.Member // announced members by address, Self excluded
	missing map[string]int            // successive answers that lacked a known member
	listed  bool                      // cluster.Listed sent (after the first answer)
	sub     *eventstream.Subscription
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	avail retry.Availability
}

var _ cluster.Membership = (*Membership)(nil)

// New applies the defaults to cfg, validates it and returns a DNS
// membership, not started yet.
func New(cfg Config) (*Membership, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Membership{cfg: cfg, known: map[string]cluster.Member{}, missing: map[string]int{}}, nil
}

// Config returns the configuration in use, defaults applied.
func (m *Membership) Config() Config { return m.cfg }

// Start implements Membership. It fails only on a bad Env (Self.Address not
// host:port, a second Start, a Start after Stop), never because DNS fails.
func (m *Membership) Start(env cluster.Env) error {
	if _, _, err := net.SplitHostPort(env.Self.Address); err != nil {
		return fmt.Errorf("cluster: dns: advertised address %q is not host:port: %w", env.Self.Address, err)
	}
	if env.System == nil || env.Owner == nil {
		return errors.New("cluster: dns: cluster.Env needs System and Owner")
	}
	if env.Self.Name == "" {
		env.Self.Name = env.Self.Address
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started || m.stopped {
		return fmt.Errorf("cluster: dns membership of %q already started", m.cfg.Name)
	}
	m.started = true
	m.env = env
	m.env.Log = env.Log.With().Str("membership", "dns").Str("dns_name", m.cfg.Name).Logger()
	m.avail.Log, m.avail.Service = m.env.Log, "dns"
	m.send(&cluster.Event{Kind: cluster.Joined, Member: env.Self})
	m.sub = env.System.EventStream.Subscribe(m.reachable)
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	m.wg.Add(1)
	go m.watch(ctx)
	return nil
}

// Members implements Membership: Self, then the announced members by
// address.
func (m *Membership) Members() []cluster.Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	others := make([]cluster.Member, 0, len(m.known))
	for _, k := range m.known {
		others = append(others, k)
	}
	sort.Slice(others, func(i, j int) bool { return others[i].Address < others[j].Address })
	if !m.started {
		return others
	}
	return append([]cluster.Member{m.env.Self}, others...)
}

// Stop implements Membership: it stops the lookup goroutine, waiting for it
// within ctx. Nothing is deregistered: DNS drops a node when its platform
// does (a pod that ends leaves its Service's endpoints).
func (m *Membership) Stop(ctx context.Context) error {
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return nil
	}
	m.stopped = true // no event is sent from here on
	started := m.started
	m.mu.Unlock()
	if !started {
		return nil
	}
	m.cancel() // a lookup under way returns at once
	m.env.System.EventStream.Unsubscribe(m.sub)
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("cluster: dns stop: lookup goroutine: %w", ctx.Err())
	}
}

// send delivers ev to the owner; m.mu must be held and m.stopped false.
func (m *Membership) send(ev *cluster.Event) { m.env.System.Root.Send(m.env.Owner, ev) }

// reachable forwards protoactor's remote EndpointConnectedEvent for a known
// member as cluster.Reachable (as Static and Consul do).
func (m *Membership) reachable(evt interface{}) {
	ev, ok := evt.(*remote.EndpointConnectedEvent)
	if !ok {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if k, ok := m.known[ev.Address]; ok && !m.stopped {
		m.send(&cluster.Event{Kind: cluster.Reachable, Member: k})
	}
}

// watch looks the members up every Interval (with backoff while DNS fails)
// until ctx ends.
func (m *Membership) watch(ctx context.Context) {
	defer m.wg.Done()
	bo := retry.Backoff{Min: m.cfg.RetryMin, Max: m.cfg.RetryMax}
	for {
		addrs, err := m.lookup(ctx)
		if ctx.Err() != nil {
			return
		}
		wait := m.cfg.Interval
		if err != nil {
			m.avail.Fail("lookup", err, m.cfg.RetryMax)
			wait = bo.Next()
		} else {
			m.avail.OK("lookup")
			bo.Reset()
			m.apply(addrs)
		}
		if !retry.Sleep(ctx, wait) {
			return
		}
	}
}

// lookup resolves the member addresses (sorted, without duplicates). A
// name that does not exist is an answer that lists no one.
func (m *Membership) lookup(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	var out []string
	if m.cfg.SRV {
		_, srvs, err := m.cfg.Resolver.LookupSRV(ctx, "", "", m.cfg.Name)
		if err != nil && !notFound(err) {
			return nil, err
		}
		for _, s := range srvs {
			out = append(out, addr(s.Target, int(s.Port)))
		}
	} else {
		ips, err := m.cfg.Resolver.LookupIPAddr(ctx, m.cfg.Name)
		if err != nil && !notFound(err) {
			return nil, err
		}
		for _, ip := range ips {
			out = append(out, addr(ip.IP.String(), m.cfg.Port))
		}
	}
	sort.Strings(out)
	return compact(out), nil
}

func notFound(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de) && de.IsNotFound
}

func compact(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// apply diffs one answer against the announced members and sends the
// events: Joined for a new address, Left for one that LeftAfter successive
// answers lacked, then Listed after the first answer.
func (m *Membership) apply(addrs []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return
	}
	seen := make(map[string]bool, len(addrs))
	for _, a := range addrs {
		if a == m.env.Self.Address {
			continue
		}
		seen[a] = true
		delete(m.missing, a)
		if _, ok := m.known[a]; !ok {
			mem := cluster.Member{Address: a, Name: a}
			m.known[a] = mem
			m.env.Log.Info().Str("member", a).Msg("dns: member joined")
			m.send(&cluster.Event{Kind: cluster.Joined, Member: mem})
		}
	}
	if !m.listed {
		m.listed = true
		m.send(&cluster.Event{Kind: cluster.Listed})
	}
	var gone []string
	for a := range m.known {
		if !seen[a] {
			if m.missing[a]++; m.missing[a] >= m.cfg.LeftAfter {
				gone = append(gone, a)
			}
		}
	}
	sort.Strings(gone)
	for _, a := range gone {
		mem := m.known[a]
		delete(m.known, a)
		delete(m.missing, a)
		m.env.Log.Info().Str("member", a).Int("answers_without_it", m.cfg.LeftAfter).Msg("dns: member left")
		m.send(&cluster.Event{Kind: cluster.Left, Member: mem})
	}
}

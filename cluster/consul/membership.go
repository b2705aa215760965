package consul

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/eventstream"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/hashicorp/consul/api"

	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/internal/retry"
)

// Membership is a cluster.Membership backed by a Consul agent.
//
// This node registers as an instance of the service named after the pubsub:
// ID "<pubsub>@<node name>" (unique per agent even when one node runs
// several pubsubs), address and port of its advertised remote address, meta
// MetaNode and MetaIncarnation, and a TTL check with
// DeregisterCriticalServiceAfter. Members are the healthy (passing)
// instances, watched with blocking queries.
//
// Two workers, both owned by the Consul value and stopped by Stop:
//
//   - the heartbeat actor (spawned on the pubsub's actor system) registers
//     this node and refreshes its TTL check from a scheduler tick, so the
//     check attests that the node's actor system runs: a node whose actors
//     stall stops refreshing and leaves. When Consul answers a refresh with
//     an error (it restarted and lost the registration) the actor registers
//     again.
//   - the watch goroutine runs the blocking queries. A blocking query can
//     take WaitTime, too long to hold an actor's mailbox, so it is a plain
//     goroutine; it keeps only the last announced member set and turns each
//     answer into events for the owner.
//
// Failures: Start never fails because Consul is down. While Consul fails,
// both workers retry with backoff (RetryMin..RetryMax), no event is sent
// (the last known member set stands: an outage expires no one) and one log
// line says Consul is unavailable; one more says when it is back. After it
// comes back, a member still missing is reported Left only once
// RecoveryGrace has passed.
type Membership struct {
	cfg       Config
	client    *api.Client
	transport *http.Transport

	mu        sync.Mutex // guards everything below, and every Send to the owner
	env       cluster.Env
	started   bool
	stopped   bool
	stopErr   error
	known     map[string]cluster.Member // announced members, Self excluded
	listed    bool                      // cluster.Listed sent (after Consul's first answer)
	hb        *actor.PID
	sub       *eventstream.Subscription
	serviceID string
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup

	avail retry.Availability
}

var _ cluster.Membership = (*Membership)(nil)

// New applies the defaults to cfg, validates it and returns a Consul
// membership, not started yet.
func New(cfg Config) (*Membership, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ac := api.DefaultConfig()
	ac.Address, ac.Scheme, ac.Token, ac.Datacenter = cfg.Address, cfg.Scheme, cfg.Token, cfg.Datacenter
	client, err := api.NewClient(ac)
	if err != nil {
		return nil, fmt.Errorf("cluster: consul client for %s: %w", cfg.Address, err)
	}
	return &Membership{cfg: cfg, client: client, transport: ac.Transport, known: map[string]cluster.Member{}}, nil
}

// Config returns the configuration in use, defaults applied.
func (c *Membership) Config() Config { return c.cfg }

// Start implements Membership. It fails only on a bad Env (Self.Address not
// host:port, a second Start, a Start after Stop), never because Consul is
// unreachable.
func (c *Membership) Start(env cluster.Env) error {
	host, portStr, err := net.SplitHostPort(env.Self.Address)
	if err != nil {
		return fmt.Errorf("cluster: consul: advertised address %q is not host:port: %w", env.Self.Address, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port <= 0 || host == "" {
		return fmt.Errorf("cluster: consul: advertised address %q needs a host and a port > 0", env.Self.Address)
	}
	if env.Service == "" || env.System == nil || env.Owner == nil {
		return fmt.Errorf("cluster: consul: cluster.Env needs Service, System and Owner")
	}
	if env.Self.Name == "" {
		env.Self.Name = env.Self.Address
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started || c.stopped {
		return fmt.Errorf("cluster: consul membership for %q already started", env.Service)
	}
	c.started = true
	c.env = env
	c.env.Log = env.Log.With().Str("membership", "consul").Str("consul", c.cfg.Address).Logger()
	c.avail.Log, c.avail.Service = c.env.Log, "consul"
	c.serviceID = env.Service + "@" + env.Self.Name
	c.ctx, c.cancel = context.WithCancel(context.Background())

	reg := &api.AgentServiceRegistration{
		ID: c.serviceID, Name: env.Service, Address: host, Port: port,
		Meta: map[string]string{MetaNode: env.Self.Name, MetaIncarnation: strconv.FormatUint(env.Self.Incarnation, 10)},
		Check: &api.AgentServiceCheck{
			CheckID: c.serviceID + ":ttl", Name: "echopubsub heartbeat", TTL: c.cfg.TTL.String(),
			Status: api.HealthPassing, DeregisterCriticalServiceAfter: c.cfg.DeregisterCriticalServiceAfter.String(),
		},
	}
	env.System.Root.Send(env.Owner, &cluster.Event{Kind: cluster.Joined, Member: env.Self})

	props := actor.PropsFromProducer(func() actor.Actor { return &heartbeat{c: c, reg: reg} })
	c.hb, err = env.System.Root.SpawnNamed(props, "echopubsub-consul/"+env.Service+"/"+env.Self.Name)
	if err != nil {
		c.cancel()
		return fmt.Errorf("cluster: consul: spawn heartbeat: %w", err)
	}
	c.sub = env.System.EventStream.Subscribe(c.reachable)
	c.wg.Add(1)
	go c.watch()
	return nil
}

// Members implements Membership: Self, then the announced members by name.
func (c *Membership) Members() []cluster.Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	others := make([]cluster.Member, 0, len(c.known))
	for _, m := range c.known {
		others = append(others, m)
	}
	sort.Slice(others, func(i, j int) bool { return others[i].Name < others[j].Name })
	if !c.started {
		return others
	}
	return append([]cluster.Member{c.env.Self}, others...)
}

// Stop implements Membership: it stops the heartbeat actor and the watch
// goroutine (waiting for them within ctx), then deregisters this node so the
// others see it leave at once rather than after TTL. An error says what
// could not be done; Consul removes the instance after its TTL anyway.
func (c *Membership) Stop(ctx context.Context) error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return c.stopErr
	}
	c.stopped = true // no event is sent from here on
	started := c.started
	c.mu.Unlock()
	if !started {
		return nil
	}
	// Cancel first: in-flight calls of both workers return at once.
	c.cancel()
	c.env.System.EventStream.Unsubscribe(c.sub)
	var errs []error
	if err := waitCtx(ctx, c.env.System.Root.StopFuture(c.hb).Wait); err != nil {
		errs = append(errs, fmt.Errorf("stop heartbeat: %w", err))
	}
	if err := waitCtx(ctx, func() error { c.wg.Wait(); return nil }); err != nil {
		errs = append(errs, fmt.Errorf("stop watch: %w", err))
	}
	// The heartbeat is stopped (or its calls fail on the cancelled
	// context): nothing registers this node again after this.
	dctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	err := c.client.Agent().ServiceDeregisterOpts(c.serviceID, (&api.QueryOptions{}).WithContext(dctx))
	cancel()
	if err != nil {
		errs = append(errs, fmt.Errorf("deregister %s: %w (Consul drops it after TTL %v)", c.serviceID, err, c.cfg.TTL))
	} else {
		c.env.Log.Info().Str("service_id", c.serviceID).Msg("deregistered from consul")
	}
	c.transport.CloseIdleConnections()
	c.mu.Lock()
	if len(errs) > 0 {
		c.stopErr = fmt.Errorf("cluster: consul stop: %w", errors.Join(errs...))
	}
	err = c.stopErr
	c.mu.Unlock()
	return err
}

// waitCtx runs wait, giving up when ctx ends first. The goroutine ends when
// wait does (a future's timeout, or workers that were told to stop).
func waitCtx(ctx context.Context, wait func() error) error {
	done := make(chan error, 1)
	go func() { done <- wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// send delivers ev to the owner; c.mu must be held and c.stopped false.
func (c *Membership) send(ev *cluster.Event) {
	c.env.System.Root.Send(c.env.Owner, ev)
}

// reachable forwards protoactor's remote EndpointConnectedEvent for a known
// member as cluster.Reachable (as Static does).
func (c *Membership) reachable(evt interface{}) {
	ev, ok := evt.(*remote.EndpointConnectedEvent)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return
	}
	for _, m := range c.known {
		if m.Address == ev.Address {
			c.send(&cluster.Event{Kind: cluster.Reachable, Member: m})
		}
	}
}

// watch runs blocking queries on the healthy instances until Stop.
func (c *Membership) watch() {
	defer c.wg.Done()
	var (
		index      uint64
		bo         = retry.Backoff{Min: c.cfg.RetryMin, Max: c.cfg.RetryMax}
		failed     bool
		graceUntil time.Time
	)
	for {
		wait := c.cfg.WaitTime
		if g := time.Until(graceUntil); g > 0 && g < wait {
			wait = max(g, time.Millisecond) // wake up when the grace ends, to report who is still missing
		}
		q := (&api.QueryOptions{WaitIndex: index, WaitTime: wait}).WithContext(c.ctx)
		entries, meta, err := c.client.Health().Service(c.env.Service, "", true, q)
		if c.ctx.Err() != nil {
			return
		}
		if err != nil {
			c.avail.Fail("discover", err, c.cfg.RetryMax)
			// Consul may come back empty (restarted): re-read from scratch
			// rather than block on an index it no longer has.
			failed, index = true, 0
			if !retry.Sleep(c.ctx, bo.Next()) {
				return
			}
			continue
		}
		c.avail.OK("discover")
		bo.Reset()
		if failed || meta.LastIndex < index {
			graceUntil = time.Now().Add(c.cfg.RecoveryGrace)
			failed = false
		}
		index = max(meta.LastIndex, 1) // 0 would not block: never hot-loop
		c.apply(entries, time.Now().Before(graceUntil))
	}
}

// apply diffs the healthy instances against the announced members and
// sends the events. Within a recovery grace, missing members are kept.
func (c *Membership) apply(entries []*api.ServiceEntry, grace bool) {
	seen := map[string]cluster.Member{}
	for _, e := range entries {
		m, ok := memberOf(e)
		if !ok || m.Name == c.env.Self.Name {
			continue
		}
		if prev, dup := seen[m.Name]; dup && prev.Incarnation > m.Incarnation {
			continue // the same node listed twice (two agents): the newest wins
		}
		seen[m.Name] = m
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return
	}
	for _, n := range names {
		m := seen[n]
		old, ok := c.known[n]
		switch {
		case !ok:
			c.env.Log.Info().Str("member", m.Name).Uint64("incarnation", m.Incarnation).Msg("consul: member joined")
			c.send(&cluster.Event{Kind: cluster.Joined, Member: m})
		case old != m:
			c.env.Log.Info().Str("member", m.Name).Uint64("incarnation", m.Incarnation).
				Uint64("old_incarnation", old.Incarnation).Msg("consul: member updated")
			c.send(&cluster.Event{Kind: cluster.Updated, Member: m})
		}
		c.known[n] = m
	}
	if !c.listed {
		c.listed = true
		c.send(&cluster.Event{Kind: cluster.Listed})
	}
	if grace {
		return
	}
	var gone []string
	for n := range c.known {
		if _, ok := seen[n]; !ok {
			gone = append(gone, n)
		}
	}
	sort.Strings(gone)
	for _, n := range gone {
		m := c.known[n]
		delete(c.known, n)
		c.env.Log.Info().Str("member", m.Name).Msg("consul: member left (not healthy in consul)")
		c.send(&cluster.Event{Kind: cluster.Left, Member: m})
	}
}

// memberOf reads a Member from a service instance.
func memberOf(e *api.ServiceEntry) (cluster.Member, bool) {
	if e == nil || e.Service == nil || e.Service.Port <= 0 {
		return cluster.Member{}, false
	}
	host := e.Service.Address
	if host == "" && e.Node != nil {
		host = e.Node.Address
	}
	if host == "" {
		return cluster.Member{}, false
	}
	m := cluster.Member{Address: net.JoinHostPort(host, strconv.Itoa(e.Service.Port)), Name: e.Service.Meta[MetaNode]}
	if m.Name == "" {
		m.Name = m.Address
	}
	m.Incarnation, _ = strconv.ParseUint(e.Service.Meta[MetaIncarnation], 10, 64) // absent or bad: 0, "not known"
	return m, true
}

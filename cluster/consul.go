package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/eventstream"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"
)

// Service metadata keys a Consul member registers with.
const (
	// MetaNode is the node name (EchoPubSub's name for the node).
	MetaNode = "node"
	// MetaIncarnation is the node's incarnation, in decimal.
	MetaIncarnation = "incarnation"
)

// ConsulConfig configures a Consul membership. A zero field takes its
// default (see each field); DefaultConsulConfig returns them all.
type ConsulConfig struct {
	// Address is the Consul agent's HTTP API, host:port. Defaults to
	// $CONSUL_HTTP_ADDR, else 127.0.0.1:8500.
	Address string
	// Scheme is "http" or "https". Defaults to $CONSUL_HTTP_SSL's choice,
	// else "http".
	Scheme string
	// Token is the ACL token. Defaults to $CONSUL_HTTP_TOKEN, else none.
	Token string
	// Datacenter to register in and query. Defaults to the agent's.
	Datacenter string

	// TTL is the service's TTL check: a node whose check is not refreshed
	// for TTL turns critical, drops out of the healthy instances and is
	// reported Left by every other node. Defaults to 10s.
	TTL time.Duration
	// RefreshInterval is how often the check is refreshed; it must be
	// shorter than TTL. Defaults to TTL/3.
	RefreshInterval time.Duration
	// DeregisterCriticalServiceAfter is how long Consul keeps a critical
	// instance before removing it (Consul enforces at least one minute).
	// Defaults to 1m.
	DeregisterCriticalServiceAfter time.Duration
	// WaitTime bounds one blocking query (Consul caps it at 10m). Defaults
	// to 1m.
	WaitTime time.Duration
	// RequestTimeout bounds every non-blocking call: register, refresh,
	// deregister. Defaults to 5s.
	RequestTimeout time.Duration
	// RetryMin and RetryMax bound the exponential backoff (with jitter)
	// between attempts while Consul fails. Default to 500ms and 30s.
	RetryMin, RetryMax time.Duration
	// RecoveryGrace is how long after Consul comes back (from an outage, or
	// restarted and empty) a member missing from it is not yet reported
	// Left: the other nodes need that long to notice and register again.
	// Defaults to RetryMax + TTL.
	RecoveryGrace time.Duration
}

// DefaultConsulConfig returns the defaults described on ConsulConfig, with
// the environment variables of the Consul API client applied.
func DefaultConsulConfig() ConsulConfig {
	env := api.DefaultConfig()
	c := ConsulConfig{
		Address: env.Address, Scheme: env.Scheme, Token: env.Token, Datacenter: env.Datacenter,
		TTL: 10 * time.Second, DeregisterCriticalServiceAfter: time.Minute, WaitTime: time.Minute,
		RequestTimeout: 5 * time.Second, RetryMin: 500 * time.Millisecond, RetryMax: 30 * time.Second,
	}
	if c.Address == "" || c.Address == "localhost:8500" {
		c.Address = "127.0.0.1:8500"
	}
	c.RefreshInterval = c.TTL / 3
	c.RecoveryGrace = c.RetryMax + c.TTL
	return c
}

// withDefaults fills every zero field. Derived defaults (RefreshInterval,
// RecoveryGrace) follow the TTL and RetryMax actually used.
func (c ConsulConfig) withDefaults() ConsulConfig {
	d := DefaultConsulConfig()
	str := func(v *string, def string) {
		if *v == "" {
			*v = def
		}
	}
	dur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	str(&c.Address, d.Address)
	str(&c.Scheme, d.Scheme)
	str(&c.Token, d.Token)
	str(&c.Datacenter, d.Datacenter)
	dur(&c.TTL, d.TTL)
	dur(&c.RefreshInterval, c.TTL/3)
	dur(&c.DeregisterCriticalServiceAfter, d.DeregisterCriticalServiceAfter)
	dur(&c.WaitTime, d.WaitTime)
	dur(&c.RequestTimeout, d.RequestTimeout)
	dur(&c.RetryMin, d.RetryMin)
	dur(&c.RetryMax, d.RetryMax)
	dur(&c.RecoveryGrace, c.RetryMax+c.TTL)
	return c
}

// Validate reports the first invalid field, naming it and its value. It
// expects defaults to be applied (NewConsul does that first).
func (c ConsulConfig) Validate() error {
	if _, _, err := net.SplitHostPort(c.Address); err != nil {
		return fmt.Errorf("cluster: consul Address must be host:port, got %q", c.Address)
	}
	if c.Scheme != "http" && c.Scheme != "https" {
		return fmt.Errorf("cluster: consul Scheme must be http or https, got %q", c.Scheme)
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{
		{"TTL", c.TTL}, {"RefreshInterval", c.RefreshInterval},
		{"DeregisterCriticalServiceAfter", c.DeregisterCriticalServiceAfter}, {"WaitTime", c.WaitTime},
		{"RequestTimeout", c.RequestTimeout}, {"RetryMin", c.RetryMin}, {"RetryMax", c.RetryMax},
		{"RecoveryGrace", c.RecoveryGrace},
	} {
		if f.v < 0 {
			return fmt.Errorf("cluster: consul %s must be > 0, got %v", f.name, f.v)
		}
	}
	if c.TTL < time.Second {
		return fmt.Errorf("cluster: consul TTL must be >= 1s, got %v", c.TTL)
	}
	if c.RefreshInterval >= c.TTL {
		return fmt.Errorf("cluster: consul RefreshInterval (%v) must be shorter than TTL (%v)", c.RefreshInterval, c.TTL)
	}
	if c.WaitTime > 10*time.Minute {
		return fmt.Errorf("cluster: consul WaitTime must be <= 10m, got %v", c.WaitTime)
	}
	if c.RetryMin > c.RetryMax {
		return fmt.Errorf("cluster: consul RetryMin (%v) must be <= RetryMax (%v)", c.RetryMin, c.RetryMax)
	}
	return nil
}

// Consul is a membership backed by a Consul agent.
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
type Consul struct {
	cfg       ConsulConfig
	client    *api.Client
	transport *http.Transport

	mu        sync.Mutex // guards everything below, and every Send to the owner
	env       Env
	started   bool
	stopped   bool
	stopErr   error
	known     map[string]Member // announced members, Self excluded
	hb        *actor.PID
	sub       *eventstream.Subscription
	serviceID string
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup

	avail availability
}

var _ Membership = (*Consul)(nil)

// NewConsul applies the defaults to cfg, validates it and returns a Consul
// membership, not started yet.
func NewConsul(cfg ConsulConfig) (*Consul, error) {
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
	return &Consul{cfg: cfg, client: client, transport: ac.Transport, known: map[string]Member{}}, nil
}

// Config returns the configuration in use, defaults applied.
func (c *Consul) Config() ConsulConfig { return c.cfg }

// Start implements Membership. It fails only on a bad Env (Self.Address not
// host:port, a second Start, a Start after Stop), never because Consul is
// unreachable.
func (c *Consul) Start(env Env) error {
	host, portStr, err := net.SplitHostPort(env.Self.Address)
	if err != nil {
		return fmt.Errorf("cluster: consul: advertised address %q is not host:port: %w", env.Self.Address, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port <= 0 || host == "" {
		return fmt.Errorf("cluster: consul: advertised address %q needs a host and a port > 0", env.Self.Address)
	}
	if env.Service == "" || env.System == nil || env.Owner == nil {
		return fmt.Errorf("cluster: consul: Env needs Service, System and Owner")
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
	c.avail.log = c.env.Log
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
	env.System.Root.Send(env.Owner, &Event{Kind: Joined, Member: env.Self})

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
func (c *Consul) Members() []Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	others := make([]Member, 0, len(c.known))
	for _, m := range c.known {
		others = append(others, m)
	}
	sort.Slice(others, func(i, j int) bool { return others[i].Name < others[j].Name })
	if !c.started {
		return others
	}
	return append([]Member{c.env.Self}, others...)
}

// Stop implements Membership: it stops the heartbeat actor and the watch
// goroutine (waiting for them within ctx), then deregisters this node so the
// others see it leave at once rather than after TTL. An error says what
// could not be done; Consul removes the instance after its TTL anyway.
func (c *Consul) Stop(ctx context.Context) error {
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
func (c *Consul) send(ev *Event) {
	c.env.System.Root.Send(c.env.Owner, ev)
}

// reachable forwards protoactor's remote EndpointConnectedEvent for a known
// member as Reachable (as Static does).
func (c *Consul) reachable(evt interface{}) {
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
			c.send(&Event{Kind: Reachable, Member: m})
		}
	}
}

// watch runs blocking queries on the healthy instances until Stop.
func (c *Consul) watch() {
	defer c.wg.Done()
	var (
		index      uint64
		bo         = backoff{min: c.cfg.RetryMin, max: c.cfg.RetryMax}
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
			c.avail.fail("discover", err, c.cfg.RetryMax)
			// Consul may come back empty (restarted): re-read from scratch
			// rather than block on an index it no longer has.
			failed, index = true, 0
			if !sleepCtx(c.ctx, bo.next()) {
				return
			}
			continue
		}
		c.avail.ok("discover")
		bo.reset()
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
func (c *Consul) apply(entries []*api.ServiceEntry, grace bool) {
	seen := map[string]Member{}
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
			c.send(&Event{Kind: Joined, Member: m})
		case old != m:
			c.env.Log.Info().Str("member", m.Name).Uint64("incarnation", m.Incarnation).
				Uint64("old_incarnation", old.Incarnation).Msg("consul: member updated")
			c.send(&Event{Kind: Updated, Member: m})
		}
		c.known[n] = m
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
		c.send(&Event{Kind: Left, Member: m})
	}
}

// memberOf reads a Member from a service instance.
func memberOf(e *api.ServiceEntry) (Member, bool) {
	if e == nil || e.Service == nil || e.Service.Port <= 0 {
		return Member{}, false
	}
	host := e.Service.Address
	if host == "" && e.Node != nil {
		host = e.Node.Address
	}
	if host == "" {
		return Member{}, false
	}
	m := Member{Address: net.JoinHostPort(host, strconv.Itoa(e.Service.Port)), Name: e.Service.Meta[MetaNode]}
	if m.Name == "" {
		m.Name = m.Address
	}
	m.Incarnation, _ = strconv.ParseUint(e.Service.Meta[MetaIncarnation], 10, 64) // absent or bad: 0, "not known"
	return m, true
}

// heartbeat registers this node and refreshes its TTL check. It runs one
// call at a time from its mailbox, each bounded by RequestTimeout and
// aborted by Stop; its next tick is scheduled only after a call returns, so
// a slow Consul never piles up ticks.
type heartbeat struct {
	c          *Consul
	reg        *api.AgentServiceRegistration
	sched      *scheduler.TimerScheduler
	cancelTick scheduler.CancelFunc
	bo         backoff
	registered bool // Consul accepted the registration (and has not lost it since, as far as we know)
	ever       bool
}

type heartbeatTick struct{}

func (h *heartbeat) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		h.sched = scheduler.NewTimerScheduler(ctx)
		h.bo = backoff{min: h.c.cfg.RetryMin, max: h.c.cfg.RetryMax}
		h.tick(ctx)
	case *heartbeatTick:
		h.tick(ctx)
	case *actor.Stopping, *actor.Restarting:
		if h.cancelTick != nil {
			h.cancelTick()
		}
	}
}

func (h *heartbeat) tick(ctx actor.Context) {
	c := h.c
	if c.ctx.Err() != nil {
		return
	}
	rctx, cancel := context.WithTimeout(c.ctx, c.cfg.RequestTimeout)
	defer cancel()
	if !h.registered {
		err := c.client.Agent().ServiceRegisterOpts(h.reg, api.ServiceRegisterOpts{ReplaceExistingChecks: true}.WithContext(rctx))
		if c.ctx.Err() != nil {
			return
		}
		if err != nil {
			c.avail.fail("register", err, c.cfg.RetryMax)
			h.after(ctx, h.bo.next())
			return
		}
		c.avail.ok("register")
		h.bo.reset()
		h.registered = true
		if h.ever {
			c.env.Log.Info().Str("service_id", h.reg.ID).Msg("registered with consul again (it had lost this node)")
		} else {
			c.env.Log.Info().Str("service_id", h.reg.ID).Dur("ttl", c.cfg.TTL).Msg("registered with consul")
		}
		h.ever = true
		h.after(ctx, c.cfg.RefreshInterval)
		return
	}
	err := c.client.Agent().UpdateTTLOpts(h.reg.Check.CheckID, "", api.HealthPassing, (&api.QueryOptions{}).WithContext(rctx))
	if c.ctx.Err() != nil {
		return
	}
	var status api.StatusError
	switch {
	case err == nil:
		c.avail.ok("register")
		h.bo.reset()
		h.after(ctx, c.cfg.RefreshInterval)
	case errors.As(err, &status):
		// Consul answered but does not know the check (a dev agent that
		// restarted, an operator who deregistered us): register again now.
		c.avail.ok("register")
		h.registered = false
		h.after(ctx, 0)
	default:
		c.avail.fail("register", err, c.cfg.RetryMax)
		h.after(ctx, h.bo.next())
	}
}

func (h *heartbeat) after(ctx actor.Context, d time.Duration) {
	if d <= 0 {
		ctx.Send(ctx.Self(), &heartbeatTick{})
		return
	}
	h.cancelTick = h.sched.SendOnce(d, ctx.Self(), &heartbeatTick{})
}

// availability turns per-operation failures into one log line when Consul
// becomes unavailable and one when every operation works again, however
// many attempts happen in between.
type availability struct {
	mu    sync.Mutex
	log   zerolog.Logger
	down  map[string]bool
	since time.Time
}

func (a *availability) fail(op string, err error, retryMax time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.down == nil {
		a.down = map[string]bool{}
	}
	if len(a.down) == 0 {
		a.since = time.Now()
		a.log.Warn().Err(err).Str("op", op).Dur("retry_max", retryMax).
			Msg("consul unavailable: keeping the last known members, retrying with backoff")
	}
	a.down[op] = true
}

func (a *availability) ok(op string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.down[op] {
		return
	}
	delete(a.down, op)
	if len(a.down) == 0 {
		a.log.Info().Dur("unavailable_for", time.Since(a.since).Round(time.Millisecond)).Msg("consul available again")
	}
}

// backoff is exponential between min and max, with jitter in [d/2, d].
type backoff struct{ min, max, cur time.Duration }

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	half := b.cur / 2
	return half + rand.N(b.cur-half+1)
}

func (b *backoff) reset() { b.cur = 0 }

// sleepCtx waits d, or less if ctx ends (then it returns false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

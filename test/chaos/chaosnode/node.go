package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/internal/faults"
	"github.com/echopubsub/echopubsub/internal/proc"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/chaos"
)

type nodeFlags struct {
	name, listen, advertise, peers, level, record string
	incarnation, buffer, pool                     int
	batch, callTimeout, retry                     time.Duration
	presenceDownAfter                             time.Duration
}

type node struct {
	cfg    nodeFlags
	ps     *echopubsub.PubSub
	system *actor.ActorSystem
	log    zerolog.Logger
	hook   *chaos.CrashHook
	check  *test.Checker // live, for progress and the drain; the verdict is the record's
	rec    *chaos.Recorder

	out *proc.Child

	pubs     chaos.Publishers
	presence *churn     // nil without -presence-down-after
	mu       sync.Mutex // subs
	subs     int
}

func runNode(cfg nodeFlags, in io.Reader, out io.Writer, sig <-chan os.Signal) error {
	lvl, err := zerolog.ParseLevel(cfg.level)
	if err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	log := zerolog.New(os.Stderr).Level(lvl).With().Timestamp().Str("chaos_node", cfg.name).Logger()
	host, portStr, err := net.SplitHostPort(cfg.listen)
	if err != nil {
		return fmt.Errorf("-listen %q: %w", cfg.listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return fmt.Errorf("-listen %q: port: %w", cfg.listen, err)
	}
	if cfg.advertise == "" {
		cfg.advertise = cfg.listen
	}
	peers := strings.Split(cfg.peers, ",")
	if cfg.peers == "" {
		peers = []string{cfg.advertise}
	}

	system := actor.NewActorSystem(echopubsub.ActorSystemLogger(log.Level(zerolog.WarnLevel)))
	r := remote.NewRemote(system, echopubsub.RemoteConfig(host, port, log, remote.WithAdvertisedHost(cfg.advertise)))
	r.Start()
	defer func() {
		r.Shutdown(false)
		system.Shutdown()
	}()

	pcfg := echopubsub.DefaultConfig("chaos")
	pcfg.BufferSize, pcfg.PoolSize = cfg.buffer, cfg.pool
	if cfg.batch >= 0 {
		pcfg.BatchInterval = cfg.batch
	}
	if cfg.callTimeout > 0 {
		pcfg.CallTimeout = cfg.callTimeout
	}
	if cfg.retry > 0 {
		pcfg.RetryInterval = cfg.retry
	}
	if cfg.record == "" {
		return fmt.Errorf("-record: a record file is required")
	}
	rec, err := chaos.CreateRecorder(cfg.record)
	if err != nil {
		return fmt.Errorf("-record: %w", err)
	}
	defer rec.Close()
	hook := chaos.NewCrashHook(log, rec)
	ps, err := echopubsub.Start(system, pcfg, echopubsub.WithLogger(log),
		echopubsub.WithMembership(cluster.NewStatic(peers...)), faults.Option(hook).(echopubsub.Option))
	if err != nil {
		return err
	}
	n := &node{cfg: cfg, ps: ps, system: system, log: log, hook: hook, check: test.NewChecker(), rec: rec, out: proc.NewChild(out)}
	n.check.OnViolation = func(v test.Violation) {
		log.Error().Str("violation", v.String()).Msg("chaos: guarantee violated")
		n.out.Send(chaos.Event{Ev: "violation", Violation: &v})
	}
	if cfg.presenceDownAfter > 0 {
		if n.presence, err = startChurn(n, pcfg, peers, cfg.presenceDownAfter); err != nil {
			return err
		}
	}
	n.out.Send(chaos.Event{Ev: proc.EvReady, Addr: system.Address()})
	return chaos.NodeLoop(n.out, in, sig, n.handle, func() chaos.Event { return n.status(false) }, n.stop)
}

func (n *node) stop() error {
	n.pubs.Stop()
	if n.presence != nil {
		if err := n.presence.close(); err != nil {
			n.log.Warn().Err(err).Msg("chaos: presence tracker stop")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return n.ps.Stop(ctx)
}

func (n *node) handle(c chaos.Command) chaos.Event {
	switch c.Op {
	case chaos.OpSubscribe:
		for i := 0; i < c.Count; i++ {
			if err := n.subscribe(c.Late, c.Bound, time.Duration(c.SlowMicros)*time.Microsecond); err != nil {
				return chaos.Event{Err: err.Error()}
			}
		}
		return chaos.Event{}
	case chaos.OpPublish:
		if c.Rate <= 0 || c.Publishers <= 0 {
			return chaos.Event{Err: fmt.Sprintf("publish needs publishers > 0 and rate > 0, got %d and %d", c.Publishers, c.Rate)}
		}
		for i := 0; i < c.Publishers; i++ {
			n.startPublisher(c.Rate, c.Pad)
		}
		return chaos.Event{}
	case chaos.OpStopPublish:
		n.pubs.Stop()
		return chaos.Event{Pubs: n.pubs.Info()}
	case chaos.OpStatus:
		return n.status(true)
	case chaos.OpBehind:
		b := 0
		for _, p := range c.Sent {
			b += n.check.Behind(p.Name, p.Last, p.LastAt)
		}
		return chaos.Event{Behind: b}
	case chaos.OpSkip:
		n.pubs.Skip()
		return chaos.Event{}
	case chaos.OpPresence:
		if n.presence == nil {
			return chaos.Event{Err: "presence: this node runs no tracker (-presence-down-after)"}
		}
		return n.presence.handle(c.What)
	case chaos.OpCrash:
		if err := n.hook.Arm(c.What); err != nil {
			return chaos.Event{Err: err.Error()}
		}
		return chaos.Event{}
	}
	return chaos.Event{Err: fmt.Sprintf("unknown op %q", c.Op)}
}

// subscribe spawns one collector that feeds the node's checker; with
// slow > 0 it spends that long on each message, bounded at bound.
func (n *node) subscribe(late bool, bound int, slow time.Duration) error {
	n.mu.Lock()
	id := n.subs
	name := fmt.Sprintf("%s#%d/s%d", n.cfg.name, n.cfg.incarnation, id)
	n.subs++
	n.mu.Unlock()
	n.rec.Subscriber(id, name)
	props := actor.PropsFromFunc(func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case *messages.Delivery:
			n.rec.Received(id, m)
			n.check.Observe(name, m)
			if slow > 0 {
				time.Sleep(slow) // a slow consumer, on purpose
			}
		case *messages.CursorExpired, *messages.BackPressure:
			n.rec.Received(id, m)
			n.check.Observe(name, m)
		case *actor.Started, *actor.Stopping, *actor.Stopped, *actor.Restarting:
		default:
			n.rec.Received(id, m) // unexpected: recorded, and the verdict asserts there are none
		}
	}, actor.WithMailbox(echopubsub.SubscriberMailbox()))
	pid := n.system.Root.Spawn(props)
	opts := []echopubsub.SubscribeOption{echopubsub.WithMetadata()}
	if bound > 0 {
		opts = append(opts, echopubsub.WithMaxQueueLen(bound))
	}
	if err := n.ps.Subscribe(pid, chaos.Topic, opts...); err != nil {
		return err
	}
	since := time.Now().UnixNano() // everything broadcast from now on must reach it, or it is told
	n.rec.Subscribed(id, since)
	n.check.AddSubscriber(name, since)
	return nil
}

func (n *node) startPublisher(rate, pad int) {
	n.pubs.Start(n.ps, n.rec, n.log, chaos.Topic, n.cfg.name, n.cfg.incarnation, n.cfg.pool, rate, pad)
}

func (n *node) status(full bool) chaos.Event {
	ev := chaos.Event{Ev: "status", Pubs: n.pubs.Info()}
	r := n.check.Report()
	r.Violations = nil // sent one by one as they happen
	if !full {
		r.Duplicates, r.Reorders = nil, nil
	}
	ev.Report = &r
	ev.RSSKB, ev.HWMKB = memory()
	ev.ProducerCrashes, ev.WorkerCrashes = n.hook.Crashes()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if st, err := n.ps.Stats(ctx); err == nil {
		count := map[string]int{}
		for _, g := range st {
			for _, ns := range g.Nodes {
				if ns.Registered && ns.Node != n.ps.NodeName() {
					count[ns.Node]++
				}
			}
		}
		for peer, c := range count {
			if c == len(st) {
				ev.Registered = append(ev.Registered, peer)
			}
		}
		sort.Strings(ev.Registered)
	}
	return ev
}

// memory returns VmRSS and VmHWM (peak RSS) in KiB from /proc/self/status.
func memory() (rss, hwm int64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = v
		case "VmHWM:":
			hwm = v
		}
	}
	return rss, hwm
}

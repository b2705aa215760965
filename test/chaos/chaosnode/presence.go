package main

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/presence"
	"github.com/echopubsub/echopubsub/test/chaos"
)

// churn is the node's presence load: a tracker and a goroutine that tracks,
// updates, untracks and stops processes at random, keeping about
// chaos.PresenceTracked presences, until it is paused (the harness compares
// the nodes' lists) or stopped.
type churn struct {
	n  *node
	ps *echopubsub.PubSub // the presence stream's own pubsub
	tr *presence.Tracker

	mu      sync.Mutex // held for each step: pause waits for the one under way
	procs   []*actor.PID
	keys    map[string]string // pid id -> the key it tracks
	next    int
	paused  bool
	stop    chan struct{}
	stopped chan struct{}
}

// startChurn starts a second pubsub on the node's actor system (name
// "chaos-presence", the chaos pubsub's settings), and a tracker on it: the
// presence stream then takes no cursors of the chaos pubsub's producers,
// whose subscribers' records check that those are contiguous.
func startChurn(n *node, pcfg echopubsub.Config, peers []string, downAfter time.Duration) (*churn, error) {
	pcfg.Name = "chaos-presence"
	ps, err := echopubsub.Start(n.system, pcfg, echopubsub.WithLogger(n.log), echopubsub.WithMembership(cluster.NewStatic(peers...)))
	if err != nil {
		return nil, err
	}
	cfg := presence.DefaultConfig()
	cfg.DownAfter = downAfter
	cfg.HeartbeatInterval = downAfter / 5
	cfg.SyncRetry = downAfter / 2
	tr, err := presence.New(ps, cfg)
	if err != nil {
		_ = ps.Stop(context.Background())
		return nil, err
	}
	c := &churn{n: n, ps: ps, tr: tr, keys: map[string]string{}, stop: make(chan struct{}), stopped: make(chan struct{})}
	go c.run() // owned by the churn: ends at close
	return c, nil
}

func (c *churn) run() {
	defer close(c.stopped)
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	t := time.NewTicker(chaos.PresenceStepEvery)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.step(rng)
		}
	}
}

// step makes one change: a new presence while there are few, otherwise an
// update, an untrack or a process that stops (its presence leaves by watch).
func (c *churn) step(rng *rand.Rand) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paused {
		return
	}
	sys := c.n.system
	if len(c.procs) < chaos.PresenceTracked/2 || (len(c.procs) < chaos.PresenceTracked && rng.Intn(2) == 0) {
		pid := sys.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
		key := fmt.Sprintf("%s#%d/u%d", c.n.cfg.name, c.n.cfg.incarnation, c.next)
		c.next++
		if err := c.tr.Track(pid, chaos.Topic, key, map[string]string{"v": "0"}); err != nil {
			c.n.log.Warn().Err(err).Msg("chaos: presence track")
			sys.Root.Stop(pid)
			return
		}
		c.procs = append(c.procs, pid)
		c.keys[pid.Id] = key
		return
	}
	i := rng.Intn(len(c.procs))
	pid := c.procs[i]
	switch rng.Intn(3) {
	case 0:
		if err := c.tr.Update(pid, chaos.Topic, c.keys[pid.Id], map[string]string{"v": fmt.Sprint(rng.Intn(1000))}); err != nil {
			c.n.log.Warn().Err(err).Msg("chaos: presence update")
		}
		return
	case 1:
		if err := c.tr.Untrack(pid, chaos.Topic, c.keys[pid.Id]); err != nil {
			c.n.log.Warn().Err(err).Msg("chaos: presence untrack")
			return
		}
		sys.Root.Stop(pid)
	default:
		sys.Root.Stop(pid) // leaves when the tracker sees it stop
	}
	c.procs = append(c.procs[:i], c.procs[i+1:]...)
	delete(c.keys, pid.Id)
}

// handle answers chaos.OpPresence: pause, resume, or list (what this node
// lists of chaos.Topic, and which of those are its own).
func (c *churn) handle(what string) chaos.Event {
	switch what {
	case "pause", "resume":
		c.mu.Lock()
		c.paused = what == "pause"
		c.mu.Unlock()
		return chaos.Event{}
	case "list":
		ev := chaos.Event{Presence: []string{}, OwnPresence: []string{}}
		self := c.ps.NodeName()
		for key, metas := range c.tr.List(chaos.Topic) {
			for _, m := range metas {
				s := fmt.Sprintf("%s@%s#%s%v", key, m.Node, m.Ref, m.Meta)
				ev.Presence = append(ev.Presence, s)
				if m.Node == self {
					ev.OwnPresence = append(ev.OwnPresence, s)
				}
			}
		}
		sort.Strings(ev.Presence)
		sort.Strings(ev.OwnPresence)
		return ev
	}
	return chaos.Event{Err: fmt.Sprintf("presence: unknown %q (pause, resume or list)", what)}
}

// close stops the churn, the tracker (first: the other nodes drop this
// node's presences at once) and its pubsub.
func (c *churn) close() error {
	close(c.stop)
	<-c.stopped
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := c.tr.Stop(ctx)
	if perr := c.ps.Stop(ctx); err == nil {
		err = perr
	}
	return err
}

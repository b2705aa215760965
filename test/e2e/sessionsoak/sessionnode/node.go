package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/internal/faults"
	"github.com/echopubsub/echopubsub/internal/proc"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/store/bolt"
	"github.com/echopubsub/echopubsub/store/postgres"
	"github.com/echopubsub/echopubsub/test/chaos"
	"github.com/echopubsub/echopubsub/test/e2e/sessionsoak"
	"github.com/echopubsub/echopubsub/test/testpb"
)

type nodeFlags struct {
	name, listen, advertise, peers, level, record, bolt, dsn, rows string
	incarnation, buffer, pool, softQueue, hardQueue                int
	batch, callTimeout, retry, ackEvery, retainEvery               time.Duration
	ackProb                                                        float64
	retainRows                                                     uint64
}

type node struct {
	cfg    nodeFlags
	ps     *echopubsub.PubSub
	store  echopubsub.Store
	system *actor.ActorSystem
	log    zerolog.Logger
	rec    *chaos.Recorder
	hook   *chaos.CrashHook
	rows   *sessionsoak.RowLog // nil: no rows log
	done   chan struct{}       // closed by stop: ends the rows log's copier
	copied chan struct{}       // closed when the copier ended

	out *proc.Child

	pubs   chaos.Publishers
	mu     sync.Mutex // owners
	owners []*owner
	end    uint64 // the store's last cursor at the last sessions command (the command loop's; no retention: it only grows)
}

func openStore(cfg nodeFlags) (echopubsub.Store, error) {
	switch {
	case (cfg.bolt == "") == (cfg.dsn == ""):
		return nil, errors.New("exactly one of -bolt and -dsn is required")
	case cfg.bolt != "":
		return bolt.Open(cfg.bolt)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return postgres.New(ctx, cfg.dsn)
}

func runNode(cfg nodeFlags, in io.Reader, out io.Writer, sig <-chan os.Signal) error {
	lvl, err := zerolog.ParseLevel(cfg.level)
	if err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	log := zerolog.New(os.Stderr).Level(lvl).With().Timestamp().Str("session_node", cfg.name).Logger()
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
	if cfg.record == "" {
		return errors.New("-record: a record file is required")
	}
	store, err := openStore(cfg)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer store.Close()
	rec, err := chaos.CreateRecorder(cfg.record)
	if err != nil {
		return fmt.Errorf("-record: %w", err)
	}
	defer rec.Close()

	var rows *sessionsoak.RowLog
	if cfg.rows != "" {
		// Copied before Start, whose retention trims at once.
		if rows, err = sessionsoak.OpenRowLog(cfg.rows); err != nil {
			return fmt.Errorf("-rows: %w", err)
		}
		defer rows.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = rows.Copy(ctx, store)
		cancel()
		if err != nil {
			return fmt.Errorf("-rows: copying the store: %w", err)
		}
	}

	system := actor.NewActorSystem(echopubsub.ActorSystemLogger(log.Level(zerolog.WarnLevel)))
	r := remote.NewRemote(system, echopubsub.RemoteConfig(host, port, log, remote.WithAdvertisedHost(cfg.advertise)))
	r.Start()
	defer func() {
		r.Shutdown(false)
		system.Shutdown()
	}()
	pcfg := echopubsub.DefaultConfig("sessions")
	pcfg.BufferSize, pcfg.PoolSize = cfg.buffer, cfg.pool
	if cfg.batch > 0 {
		pcfg.BatchInterval = cfg.batch
	}
	if cfg.callTimeout > 0 {
		pcfg.CallTimeout = cfg.callTimeout
	}
	if cfg.retry > 0 {
		pcfg.RetryInterval = cfg.retry
	}
	if cfg.softQueue > 0 {
		pcfg.SoftQueue = cfg.softQueue
	}
	if cfg.hardQueue > 0 {
		pcfg.HardQueue = cfg.hardQueue
	}
	if cfg.retainEvery > 0 {
		pcfg.RetentionInterval = cfg.retainEvery
	}
	hook := chaos.NewCrashHook(log, rec)
	ps, err := echopubsub.Start(system, pcfg, echopubsub.WithLogger(log),
		echopubsub.WithMembership(cluster.NewStatic(peers...)),
		echopubsub.WithStore(store), echopubsub.WithDurableTopics(chaos.SessionTopic),
		echopubsub.WithRetention(echopubsub.Retention{MaxRows: cfg.retainRows}),
		faults.Option(hook).(echopubsub.Option))
	if err != nil {
		return err
	}
	n := &node{cfg: cfg, ps: ps, store: store, system: system, log: log, rec: rec, hook: hook, rows: rows,
		done: make(chan struct{}), copied: make(chan struct{}), out: proc.NewChild(out)}
	go n.copyRows() // ends when stop closes n.done
	n.out.Send(chaos.Event{Ev: proc.EvReady, Addr: system.Address()})
	return chaos.NodeLoop(n.out, in, sig, n.handle, func() chaos.Event { return n.status("status") }, n.stop)
}

// copyRows copies the store's new rows to the rows log every
// sessionsoak.RowLogEvery until stop.
func (n *node) copyRows() {
	defer close(n.copied)
	if n.rows == nil {
		return
	}
	t := time.NewTicker(sessionsoak.RowLogEvery)
	defer t.Stop()
	for {
		select {
		case <-n.done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := n.rows.Copy(ctx, n.store); err != nil {
			n.log.Warn().Err(err).Msg("session soak: copying the store's rows (tried again)")
		}
		cancel()
	}
}

func (n *node) status(ev string) chaos.Event {
	e := chaos.Event{Ev: ev, Pubs: n.pubs.Info(), Registered: n.registered()}
	e.ProducerCrashes, e.WorkerCrashes = n.hook.Crashes()
	return e
}

func (n *node) stop() error {
	close(n.done)
	<-n.copied
	n.pubs.Stop()
	n.mu.Lock()
	for _, o := range n.owners {
		o.stopTicker()
	}
	n.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return n.ps.Stop(ctx)
}

func (n *node) handle(c chaos.Command) chaos.Event {
	switch c.Op {
	case chaos.OpOpen:
		for _, o := range c.Owners {
			if err := n.open(o); err != nil {
				return chaos.Event{Err: fmt.Sprintf("open %s from %d: %v", o.Name, o.From, err)}
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
		return n.status("")
	case chaos.OpCrash:
		if err := n.hook.Arm(c.What); err != nil {
			return chaos.Event{Err: err.Error()}
		}
		return chaos.Event{}
	case chaos.OpStall:
		return n.stall(c.Owners, c.What != "resume")
	case chaos.OpSessions:
		return n.sessions()
	}
	return chaos.Event{Err: fmt.Sprintf("unknown op %q", c.Op)}
}

// sessions reports every owner, the store's last cursor and (Behind) what
// this node's producers still owe their peers.
func (n *node) sessions() chaos.Event {
	n.mu.Lock()
	owners := append([]*owner(nil), n.owners...)
	n.mu.Unlock()
	ev := chaos.Event{Behind: n.owed()}
	from := uint64(1)
	for _, o := range owners {
		info := o.info()
		info.Pending = n.ps.Pending(info.Session)
		ev.Owners = append(ev.Owners, info)
		if info.Next > from {
			from = info.Next - 1
		}
	}
	// The store's end: read on from the furthest owner, or the end seen
	// last time (a shared store may be far ahead of this node's owners,
	// or the node may have none).
	from = max(from, n.end)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		rows, next, err := n.store.Read(ctx, chaos.SessionTopic, from, 1000)
		if err != nil {
			ev.Err = fmt.Sprintf("store read from %d: %v", from, err)
			return ev
		}
		if len(rows) > 0 {
			ev.StoreEnd = rows[len(rows)-1].Cursor
		}
		if len(rows) < 1000 {
			n.end = max(n.end, ev.StoreEnd)
			return ev
		}
		from = next
	}
}

// stall makes the open session of each owner named stop committing and
// acking (it will be closed at HardQueue), or go on (stalled false).
func (n *node) stall(specs []chaos.OwnerSpec, stalled bool) chaos.Event {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, spec := range specs {
		var found *owner
		for _, o := range n.owners {
			if o.name == spec.Name && !o.info().Closed {
				found = o
			}
		}
		if found == nil {
			return chaos.Event{Err: fmt.Sprintf("stall: owner %s has no open session on %s", spec.Name, n.cfg.name)}
		}
		found.stalled.Store(stalled)
	}
	return chaos.Event{}
}

// owed is what this node's producers still owe their peers: the sum of
// their lags, and 1 for each peer a producer has not joined (unknown).
func (n *node) owed() int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := n.ps.Stats(ctx)
	if err != nil {
		return 1
	}
	owed := 0
	for _, g := range st {
		for _, ns := range g.Nodes {
			if ns.Node == n.ps.NodeName() {
				continue
			}
			owed += int(ns.Lag)
			if !ns.Registered {
				owed++
			}
		}
	}
	return owed
}

// registered lists the peers every producer of this node registered with.
func (n *node) registered() []string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := n.ps.Stats(ctx)
	if err != nil {
		return nil
	}
	count := map[string]int{}
	for _, g := range st {
		for _, ns := range g.Nodes {
			if ns.Registered && ns.Node != n.ps.NodeName() {
				count[ns.Node]++
			}
		}
	}
	var out []string
	for peer, c := range count {
		if c == len(st) {
			out = append(out, peer)
		}
	}
	return out
}

// owner is one logical consumer's session on this node: it records each
// envelope, commits at random moments (and every ackEvery) everything
// outstanding, in cursor order, and acks it after the commit.
type owner struct {
	n    *node
	name string
	sid  int
	id   string
	rng  *rand.Rand
	pid  *actor.PID

	mu          sync.Mutex
	outstanding []uint64 // delivery ids, in order
	lastCursor  uint64   // cursor of the last envelope outstanding
	replayed    bool     // the last envelope was read from the store
	next        uint64   // after the last row handed (envelope or StreamGap)
	closed      bool
	reason      string // SessionClosed's
	committed   uint64 // the last cursor committed
	stalled     atomic.Bool
	tick        *time.Ticker
	done        chan struct{}
}

type flush struct{}

func (n *node) open(spec chaos.OwnerSpec) error {
	n.mu.Lock()
	o := &owner{n: n, name: spec.Name, sid: len(n.owners), rng: rand.New(rand.NewSource(time.Now().UnixNano() + int64(len(n.owners)))),
		next: max(spec.From, 1), done: make(chan struct{})}
	n.owners = append(n.owners, o)
	n.mu.Unlock()
	o.pid = n.system.Root.Spawn(actor.PropsFromFunc(o.receive))
	s, err := n.ps.OpenSession(o.pid)
	if err != nil {
		return err
	}
	o.id = s.ID()
	// Recorded before it subscribes: the first envelope may come at once.
	n.rec.SessionOpened(o.sid, o.name, o.id, spec.From, time.Now().UnixNano())
	if err := n.ps.SessionSubscribe(o.id, chaos.SessionTopic, echopubsub.WithFrom(spec.From)); err != nil {
		return err
	}
	o.tick = time.NewTicker(n.cfg.ackEvery)
	go func() { // ends when the owner's ticker is stopped (node stop)
		for {
			select {
			case <-o.done:
				return
			case <-o.tick.C:
				n.system.Root.Send(o.pid, flush{})
			}
		}
	}()
	return nil
}

func (o *owner) stopTicker() {
	if o.tick != nil {
		o.tick.Stop()
		close(o.done)
	}
}

func (o *owner) info() chaos.OwnerInfo {
	o.mu.Lock()
	defer o.mu.Unlock()
	return chaos.OwnerInfo{Name: o.name, Session: o.id, Next: o.next, Closed: o.closed, Reason: o.reason, Committed: o.committed,
		Replayed: o.replayed}
}

func (o *owner) receive(ctx actor.Context) {
	rec := o.n.rec
	switch m := ctx.Message().(type) {
	case *echopubsub.Envelope:
		st, ok := m.Event.(*testpb.Stamp)
		if !ok {
			rec.SessionNotice(o.sid, m.Event)
			return
		}
		rec.Envelope(o.sid, m.Cursor, st.Publisher, st.Seq, m.Replayed)
		o.mu.Lock()
		o.outstanding = append(o.outstanding, m.DeliveryID)
		o.lastCursor = m.Cursor
		o.replayed = m.Replayed
		o.next = m.Cursor + 1
		o.mu.Unlock()
		if !o.stalled.Load() && o.rng.Float64() < o.n.cfg.ackProb {
			o.ack()
		}
	case *echopubsub.StreamGap:
		rec.StreamGap(o.sid, m.Cursor, m.Missed)
		o.mu.Lock()
		o.next = m.Cursor + 1
		o.mu.Unlock()
	case *echopubsub.StreamTruncated:
		rec.StreamTruncated(o.sid, m.From, m.FirstKept)
		o.mu.Lock()
		o.next = max(o.next, m.FirstKept)
		o.mu.Unlock()
	case *messages.SessionClosed:
		rec.SessionClosed(o.sid, m.Reason.String())
		o.mu.Lock()
		o.closed, o.reason = true, m.Reason.String()
		o.mu.Unlock()
	case flush:
		if !o.stalled.Load() {
			o.ack()
		}
	case *actor.Started, *actor.Stopping, *actor.Stopped, *actor.Restarting:
	default:
		rec.SessionNotice(o.sid, m) // CursorExpired, BackPressure, SessionPressure
	}
}

// ack commits everything outstanding (the record's k line), then acks it.
func (o *owner) ack() {
	o.mu.Lock()
	ids, cursor := o.outstanding, o.lastCursor
	o.outstanding = nil
	closed := o.closed
	o.mu.Unlock()
	if len(ids) == 0 || closed {
		return
	}
	o.n.rec.Committed(o.sid, cursor)
	o.mu.Lock()
	o.committed = cursor
	o.mu.Unlock()
	for len(ids) > 0 {
		k := min(len(ids), 1000) // MaxBatchItems
		if _, err := o.n.ps.AckMany(o.id, ids[:k]); err != nil {
			o.n.log.Warn().Err(err).Str("owner", o.name).Msg("session soak: ack failed")
			return
		}
		ids = ids[k:]
	}
}

func (n *node) startPublisher(rate, pad int) {
	n.pubs.Start(n.ps, n.rec, n.log, chaos.SessionTopic, n.cfg.name, n.cfg.incarnation, n.cfg.pool, rate, pad)
}

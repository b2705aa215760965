// Package sessionsoak is the chaos soak of sessions on a durable topic:
// node processes (./sessionnode) with a store/bolt file each, or sharing
// one PostgreSQL, publish numbered stamps on the durable topic while
// owners, one session each subscribed WithFrom, ack at random; the faults
// are test/chaos's (kill -9 and restart, proxy cuts, blackholes,
// partitions, packet loss, SIGSTOP), injected and confirmed by
// chaos.InjectFault. An owner whose node was killed opens a new session
// WithFrom(its last committed cursor + 1): with bolt on the restarted node
// (its cursors are that node's file's), with the shared PostgreSQL at
// once on the next live node (a cursor means the same row everywhere). After the
// run, the stores are read back (the truth) and chaos.CheckSessions checks
// every session's record against them: the verdict.
//
// It lives in test/e2e because the root module links no store backend.
package sessionsoak

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/store/bolt"
	"github.com/echopubsub/echopubsub/store/postgres"
	"github.com/echopubsub/echopubsub/store/postgres/pgtest"
	"github.com/echopubsub/echopubsub/test/chaos"
)

// Stores the soak runs on.
const (
	StoreBolt     = "bolt"     // a store/bolt file per node, kept across its processes
	StorePostgres = "postgres" // one PostgreSQL shared by the cluster
)

// The session soak's own fault kinds (the others are test/chaos's).
const (
	// FaultOwnerHardQueue: an owner stops committing and acking; the
	// library closes its session at HardQueue (SessionClosed HARD_QUEUE,
	// the confirmation), and Hold/2 later the owner opens a new one on the
	// same node, WithFrom(committed + 1). With retention on, what it missed meanwhile
	// is mostly trimmed: StreamTruncated.
	FaultOwnerHardQueue = "owner_hardqueue"
	// FaultPGCrash (the shared PostgreSQL only): an immediate shutdown of
	// the server (pgtest's Crash: SIGQUIT to the postmaster, what pg_ctl
	// stop -m immediate sends: no checkpoint, every backend quits, the next
	// start recovers from the WAL), held down, then started again.
	// Confirmed by a connection that fails while it is down.
	FaultPGCrash = "pg_crash"
	// FaultPGPause (the shared PostgreSQL only): SIGSTOP of the whole
	// server (postmaster and backends), then SIGCONT: connections stay open
	// and every query hangs. Confirmed by /proc state T.
	FaultPGPause = "pg_sigstop"
)

// Kinds are the fault kinds the session soak injects by default: kill -9
// and restart (the owners resume WithFrom), the network faults, producer
// and worker crashes, the cold restart of every node, an owner closed at
// HardQueue, and (PostgreSQL only, see KindsFor) the database link
// faults.
var Kinds = []string{chaos.FaultKill, chaos.FaultProxyCut, chaos.FaultOneWay, chaos.FaultPairwise,
	chaos.FaultProxyBlackhole, chaos.FaultLoss, chaos.FaultPause, chaos.FaultProxyLatency,
	chaos.FaultProducerCrash, FaultOwnerHardQueue, chaos.FaultWorkerCrash, FaultPGCrash, chaos.FaultColdRestart, FaultPGPause}

// KindsFor is Kinds without what store cannot have (the PostgreSQL faults
// on bolt).
func KindsFor(store string) []string {
	var out []string
	for _, k := range Kinds {
		if store != StorePostgres && (k == FaultPGCrash || k == FaultPGPause) {
			continue
		}
		out = append(out, k)
	}
	return out
}

// Options configure Run.
type Options struct {
	Store string // StoreBolt or StorePostgres
	DSN   string // StorePostgres: reachable from every node (a Unix socket, across namespaces)
	// PG is the server behind DSN (the PostgreSQL faults crash and pause it).
	PG *pgtest.Server
	// RetainRows, when > 0, is every node's WithRetention MaxRows (trimmed
	// every second); SoftQueue and HardQueue are the session settings (0:
	// the library's defaults).
	RetainRows           uint64
	SoftQueue, HardQueue int
	// Binaries: the session node and chaosnode (the proxy): Build.
	Node, Proxy string
	Dir         string
	Nodes       int
	Netns       bool
	Owners      int // per node
	Publishers  int // per node
	Rate        int // messages/s per publisher
	Pad         int
	AckProb     float64
	Messages    int64 // at least this many broadcasts, and every kind once
	Kinds       []string
	Hold        time.Duration
	Settle      time.Duration
	Drain       time.Duration
	Seed        int64
	Logf        func(format string, args ...interface{})
}

// Result is what a session soak measured.
type Result struct {
	Store     string
	Duration  time.Duration
	Messages  int64
	Faults    map[string]int
	Confirmed map[string]int
	Skipped   []string
	Rows      map[string]int // rows per store at the end
	// The truth with retention on (rows copied as they appeared, see
	// RowLog): rows per store over the run, of them trimmed by the end, and
	// cursors no copy caught before they were trimmed.
	Truth, Trimmed, Unknown map[string]int
	// DataRaces reported by nodes built with -race.
	DataRaces int
	Check     *chaos.SessionCheck
}

// Summary renders r.
func (r *Result) Summary() string {
	s := fmt.Sprintf("store %s, duration %v, messages %d, rows per store at the end %v\n"+
		"rows per store over the run %v, trimmed by retention %v, lost to retention before a copy %v\nfaults %v, confirmed %v\n",
		r.Store, r.Duration.Round(time.Second), r.Messages, r.Rows, r.Truth, r.Trimmed, r.Unknown, r.Faults, r.Confirmed)
	if len(r.Skipped) > 0 {
		s += fmt.Sprintf("SKIPPED (no root or no ip tool): %v\n", r.Skipped)
	}
	if r.DataRaces > 0 {
		s += fmt.Sprintf("DATA RACES reported by the nodes: %d\n", r.DataRaces)
	}
	if r.Check != nil {
		s += r.Check.Summary()
	}
	return s
}

// Build builds the session node (with -race if race) and chaosnode (the
// proxy) into dir.
func Build(ctx context.Context, dir string, race bool, tags ...string) (node, proxy string, err error) {
	proxy, err = chaos.BuildNodeTags(ctx, dir, false)
	if err != nil {
		return "", "", err
	}
	node = filepath.Join(dir, "sessionnode")
	args := []string{"build", "-o", node}
	if race {
		args = append(args, "-race")
	}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.CommandContext(ctx, "go", append(args, "./sessionnode")...)
	if _, file, _, ok := runtime.Caller(0); ok {
		cmd.Dir = filepath.Dir(file)
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("go build sessionnode: %v\n%s", err, b)
	}
	return node, proxy, nil
}

// soak is one run's state: where each owner is and what it committed.
type soak struct {
	o   Options
	c   *chaos.Cluster
	pub chaos.Command

	mu        sync.Mutex        // a cold restart restarts every node at once
	owners    [][]string        // per node, the owners whose session is there
	committed map[string]uint64 // owner -> last committed cursor (as of its last session's death)
}

func (s *soak) logf(format string, args ...interface{}) {
	if s.o.Logf != nil {
		s.o.Logf(format, args...)
	}
}

// Run runs one session soak. An error means it could not run; the verdict
// is Result.Check.
func Run(ctx context.Context, o Options) (*Result, error) {
	start := time.Now()
	rng := rand.New(rand.NewSource(o.Seed))
	res := &Result{Store: o.Store, Faults: map[string]int{}, Confirmed: map[string]int{}, Rows: map[string]int{},
		Truth: map[string]int{}, Trimmed: map[string]int{}, Unknown: map[string]int{}}
	s := &soak{o: o, committed: map[string]uint64{},
		pub: chaos.Command{Op: chaos.OpPublish, Publishers: o.Publishers, Rate: o.Rate, Pad: o.Pad}}
	want := o.Kinds
	if len(want) == 0 {
		want = KindsFor(o.Store)
	}
	kinds, skipped := chaos.SplitKinds(want, o.Netns)
	res.Skipped = skipped
	copt := chaos.ClusterOptions{Binary: o.Node, ProxyBinary: o.Proxy, Dir: o.Dir, Nodes: o.Nodes, Netns: o.Netns,
		Buffer: 2000, Pool: 2, BatchInterval: 20 * time.Millisecond, CallTimeout: time.Second, Retry: 100 * time.Millisecond,
		LogLevel: "warn", Logf: o.Logf,
		NodeArgs: func(nd *chaos.NodeProc) []string {
			args := []string{"-ack-prob", fmt.Sprint(o.AckProb), "-rows", filepath.Join(o.Dir, nd.Name+".rows"),
				"-soft-queue", fmt.Sprint(o.SoftQueue), "-hard-queue", fmt.Sprint(o.HardQueue)}
			if o.RetainRows > 0 {
				args = append(args, "-retention-rows", fmt.Sprint(o.RetainRows), "-retention-interval", "1s")
			}
			if o.Store == StoreBolt {
				return append(args, "-bolt", filepath.Join(o.Dir, nd.Name+".db"))
			}
			return append(args, "-dsn", o.DSN)
		}}
	c, err := chaos.NewCluster(copt)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	s.c = c
	for i := range c.Nodes {
		var names []string
		for k := 0; k < o.Owners; k++ {
			names = append(names, fmt.Sprintf("%s/o%d", c.Nodes[i].Name, k))
		}
		s.owners = append(s.owners, names)
		if err := s.open(i); err != nil {
			return nil, err
		}
	}
	if err := c.WaitRegistered(30 * time.Second); err != nil {
		return nil, fmt.Errorf("cluster did not form: %w", err)
	}
	for i := range c.Nodes {
		if _, err := c.Call(i, s.pub); err != nil {
			return nil, err
		}
	}
	s.logf("session soak (%s): %d nodes publishing, %d owners each", o.Store, len(c.Nodes), o.Owners)
	so := chaos.SoakOptions{Cluster: copt, Hold: o.Hold, Restart: s.restart}
	if o.Store == StorePostgres {
		so.Killed = s.failover
	}
	fres := &chaos.Result{Confirmed: res.Confirmed}
	faults := chaos.FaultLoop{Name: "session soak", Kinds: kinds, Messages: o.Messages, Settle: o.Settle, Logf: o.Logf,
		Inject: func(ctx context.Context, kind string) error { return s.inject(ctx, so, rng, kind, fres) }}
	if err := chaos.Sleep(ctx, o.Settle); err != nil {
		return nil, err
	}
	if err := faults.Run(ctx, c, res.Faults); err != nil {
		return nil, err
	}
	if err := s.drain(ctx); err != nil {
		s.logf("session soak: drain incomplete (the tail check will report it): %v", err)
	}
	var files []chaos.RecordFile
	res.DataRaces, files, err = chaos.SoakEnd(c)
	if err != nil {
		return nil, err
	}
	stores, err := s.readStores(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the stores back: %w", err)
	}
	var sfiles []chaos.SessionFile
	for _, f := range files {
		st := "shared"
		if o.Store == StoreBolt {
			st = strings.SplitN(filepath.Base(f.Path), "#", 2)[0]
		}
		sfiles = append(sfiles, chaos.SessionFile{RecordFile: f, Store: st})
	}
	for name, rows := range stores {
		res.Truth[name] = len(rows)
		for _, r := range rows {
			switch {
			case r.Unknown:
				res.Unknown[name]++
				res.Trimmed[name]++
			case r.Trimmed:
				res.Trimmed[name]++
			default:
				res.Rows[name]++
			}
		}
	}
	res.Check, err = chaos.CheckSessions(sfiles, stores)
	if err != nil {
		return nil, fmt.Errorf("checking the records: %w", err)
	}
	res.Messages = res.Check.Messages
	res.Duration = time.Since(start)
	return res, nil
}

// open opens a session on node i for each of owners (default: node i's),
// WithFrom its committed cursor + 1 (1 at first).
func (s *soak) open(i int, owners ...string) error {
	s.mu.Lock()
	if owners == nil {
		owners = s.owners[i]
	}
	var specs []chaos.OwnerSpec
	for _, name := range owners {
		specs = append(specs, chaos.OwnerSpec{Name: name, From: s.committed[name] + 1})
	}
	s.mu.Unlock()
	if len(specs) == 0 {
		return nil
	}
	_, err := s.c.Call(i, chaos.Command{Op: chaos.OpOpen, Owners: specs})
	return err
}

// restart is what a node does after a kill -9 (chaos.SoakOptions.Restart):
// its owners learn what they committed (the dead process's record: an
// owner's commits are its own durable state), resume WithFrom the next
// cursor, and its publishers start again.
func (s *soak) restart(c *chaos.Cluster, i int) error {
	nd := c.Nodes[i]
	if err := s.learnCommitted(fmt.Sprintf("%s#%d.rec", nd.Name, nd.Incarnation-1)); err != nil {
		return err
	}
	if err := s.open(i); err != nil {
		return err
	}
	_, err := c.Call(i, s.pub)
	return err
}

// learnCommitted reads what the owners committed in a dead process's record.
func (s *soak) learnCommitted(record string) error {
	got, err := chaos.Committed(filepath.Join(s.o.Dir, record))
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for owner, cur := range got {
		s.committed[owner] = max(s.committed[owner], cur)
	}
	return nil
}

// failover (shared store): node i was killed; its owners resume at once on
// the next node, WithFrom(committed + 1), and stay there.
func (s *soak) failover(c *chaos.Cluster, i int) error {
	nd := c.Nodes[i]
	if err := s.learnCommitted(fmt.Sprintf("%s#%d.rec", nd.Name, nd.Incarnation)); err != nil {
		return err
	}
	s.mu.Lock()
	moved := s.owners[i]
	s.mu.Unlock()
	if len(moved) == 0 {
		return nil
	}
	j := (i + 1) % len(c.Nodes)
	if err := s.open(j, moved...); err != nil {
		return err
	}
	s.mu.Lock()
	s.owners[i], s.owners[j] = nil, append(s.owners[j], moved...)
	s.mu.Unlock()
	s.logf("session soak: owners %v of killed %s resumed on %s", moved, nd.Name, c.Nodes[j].Name)
	return nil
}

// drain stops the publishers and waits until every producer has delivered
// everything to every peer and every owner has every row of its store, all
// acked, with the stores' ends unchanged since the last look (a row may
// still be on its way to a node-local store).
func (s *soak) drain(ctx context.Context) error {
	if err := s.c.HealNet(); err != nil {
		return err
	}
	for _, nd := range s.c.Live() {
		if _, err := nd.Proc.Call(chaos.Command{Op: chaos.OpStopPublish}, 20*time.Second); err != nil {
			return err
		}
	}
	ends := map[string]uint64{}
	var why string
	deadline := time.Now().Add(s.o.Drain)
	for time.Now().Before(deadline) {
		ok := true
		for _, nd := range s.c.Live() {
			ev, err := nd.Proc.Call(chaos.Command{Op: chaos.OpSessions}, 10*time.Second)
			if err != nil || ev.Err != "" {
				ok, why = false, fmt.Sprintf("%s: %v %s", nd.Name, err, ev.Err)
				break
			}
			if ev.Behind > 0 { // a peer link in its redial wait delivers its backlog seconds later
				ok, why = false, fmt.Sprintf("%s: its producers still owe their peers %d", nd.Name, ev.Behind)
			}
			if ends[nd.Name] != ev.StoreEnd {
				ok, why = false, fmt.Sprintf("%s: store end moved from %d to %d", nd.Name, ends[nd.Name], ev.StoreEnd)
				ends[nd.Name] = ev.StoreEnd
			}
			for _, ow := range ev.Owners {
				if !ow.Closed && (ow.Next != ev.StoreEnd+1 || ow.Pending > 0) {
					ok, why = false, fmt.Sprintf("%s: owner %s at %d of %d, %d pending", nd.Name, ow.Name, ow.Next, ev.StoreEnd+1, ow.Pending)
				}
			}
		}
		if ok {
			return nil
		}
		if err := chaos.Sleep(ctx, 250*time.Millisecond); err != nil { // polling the nodes, bounded by the deadline
			return err
		}
	}
	return fmt.Errorf("not drained after %v: %s", s.o.Drain, why)
}

// readStores reads the topic's rows from every store once the nodes are
// down: each node's bolt file, or the shared table.
func (s *soak) readStores(ctx context.Context) (map[string][]chaos.StoreRow, error) {
	out := map[string][]chaos.StoreRow{}
	copies := func(nodes ...*chaos.NodeProc) ([][]chaos.StoreRow, error) {
		var all [][]chaos.StoreRow
		for _, nd := range nodes {
			rows, err := LoadRows(filepath.Join(s.o.Dir, nd.Name+".rows"))
			if err != nil {
				return nil, err
			}
			all = append(all, rows)
		}
		return all, nil
	}
	if s.o.Store == StorePostgres {
		st, err := postgres.New(ctx, s.o.DSN)
		if err != nil {
			return nil, err
		}
		defer st.Close()
		final, err := ReadRows(ctx, st, 1)
		if err != nil {
			return nil, err
		}
		cs, err := copies(s.c.Nodes...)
		if err != nil {
			return nil, err
		}
		if out["shared"], err = mergeRows(cs, final); err != nil {
			return nil, fmt.Errorf("the shared store: %w", err)
		}
		return out, nil
	}
	for _, nd := range s.c.Nodes {
		path := filepath.Join(s.o.Dir, nd.Name+".db")
		if _, err := os.Stat(path); err != nil {
			return nil, err
		}
		st, err := bolt.Open(path)
		if err != nil {
			return nil, err
		}
		final, err := ReadRows(ctx, st, 1)
		_ = st.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		cs, err := copies(nd)
		if err != nil {
			return nil, err
		}
		if out[nd.Name], err = mergeRows(cs, final); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return out, nil
}

// inject injects one fault: the session soak's own kinds here, the others
// through chaos.InjectFault (the same injection and confirmation as the
// plain soak).
func (s *soak) inject(ctx context.Context, so chaos.SoakOptions, rng *rand.Rand, kind string, fres *chaos.Result) error {
	switch kind {
	case FaultOwnerHardQueue:
		return s.ownerHardQueue(ctx, rng, fres)
	case FaultPGCrash, FaultPGPause:
		return s.pgFault(ctx, kind, fres)
	}
	return chaos.InjectFault(ctx, s.c, so, rng, kind, fres, chaos.Command{})
}

// ownerHardQueue stalls one owner until the library closes its session at
// HardQueue, then, Hold/2 later, opens a new one for it on the same node,
// WithFrom(committed + 1). The owner is one whose last envelope came live:
// a catch-up (rows read from the store) gives a stalled owner one row per
// RoomWait and never closes it, by design. Should its session fall into a
// catch-up while stalled, it is let go on and another owner is tried.
func (s *soak) ownerHardQueue(ctx context.Context, rng *rand.Rand, fres *chaos.Result) error {
	var why string
	for try := 0; try < 3; try++ {
		i, ow, err := s.liveOwner(ctx, rng)
		if err != nil {
			return err
		}
		nd := s.c.Nodes[i]
		s.logf("session soak: stalling owner %s on %s", ow.Name, nd.Name)
		stall := chaos.Command{Op: chaos.OpStall, Owners: []chaos.OwnerSpec{{Name: ow.Name}}}
		if _, err := s.c.Call(i, stall); err != nil {
			return err
		}
		var closed chaos.OwnerInfo
		err = chaos.Poll(s.o.Hold+6*time.Second, func() (bool, string) {
			ev, err := s.c.Call(i, chaos.Command{Op: chaos.OpSessions})
			if err != nil {
				return false, err.Error()
			}
			for _, o := range ev.Owners {
				if o.Session == ow.Session {
					closed = o
					return o.Closed, fmt.Sprintf("session %s of %s: %d pending, not closed (last envelope replayed: %v)",
						o.Session, o.Name, o.Pending, o.Replayed)
				}
			}
			return false, fmt.Sprintf("session %s of %s gone from %s", ow.Session, ow.Name, nd.Name)
		})
		if err != nil {
			why = err.Error()
			s.logf("session soak: %s; letting it go on", why)
			stall.What = "resume"
			if _, err := s.c.Call(i, stall); err != nil {
				return err
			}
			continue
		}
		if closed.Reason != messages.SessionCloseReason_SESSION_CLOSE_REASON_HARD_QUEUE.String() {
			return fmt.Errorf("fault %s not confirmed: session %s of %s closed with %s", FaultOwnerHardQueue, closed.Session, ow.Name, closed.Reason)
		}
		fres.Confirmed[FaultOwnerHardQueue]++
		// The owner comes back a little later (a client reconnecting): with
		// retention on, rows it was owed are gone by then.
		if err := chaos.Sleep(ctx, s.o.Hold/2); err != nil {
			return err
		}
		s.mu.Lock()
		s.committed[ow.Name] = max(s.committed[ow.Name], closed.Committed)
		s.mu.Unlock()
		return s.open(i, ow.Name)
	}
	return fmt.Errorf("fault %s not confirmed in 3 tries: %s", FaultOwnerHardQueue, why)
}

// liveOwner picks, at random, an open session whose last envelope came
// live (polling: after a fault the sessions catch up first).
func (s *soak) liveOwner(ctx context.Context, rng *rand.Rand) (int, chaos.OwnerInfo, error) {
	var i int
	var got chaos.OwnerInfo
	err := chaos.Poll(20*time.Second, func() (bool, string) {
		live := s.c.Live()
		nd := live[rng.Intn(len(live))]
		ev, err := nd.Proc.Call(chaos.Command{Op: chaos.OpSessions}, 10*time.Second)
		if err != nil || ev.Err != "" {
			return false, fmt.Sprintf("%s: %v %s", nd.Name, err, ev.Err)
		}
		var cands []chaos.OwnerInfo
		for _, o := range ev.Owners {
			if !o.Closed && !o.Replayed && o.Next > 1 {
				cands = append(cands, o)
			}
		}
		if len(cands) == 0 {
			return false, fmt.Sprintf("%s: no open session whose last envelope came live", nd.Name)
		}
		i, got = nd.Index, cands[rng.Intn(len(cands))]
		return true, ""
	})
	return i, got, err
}

// pgFault crashes (immediate shutdown, then a start) or pauses the shared
// PostgreSQL for Hold.
func (s *soak) pgFault(ctx context.Context, kind string, fres *chaos.Result) error {
	pg := s.o.PG
	if pg == nil {
		return fmt.Errorf("fault %s needs Options.PG", kind)
	}
	s.logf("session soak: injecting %s", kind)
	if kind == FaultPGPause {
		if err := pg.Pause(); err != nil {
			return err
		}
		var state string
		err := chaos.Poll(2*time.Second, func() (bool, string) {
			var err error
			state, err = chaos.PidState(pg.Pid())
			return err == nil && state == "T", fmt.Sprintf("postmaster state %q, %v", state, err)
		})
		if err == nil {
			fres.Confirmed[kind]++
			err = chaos.Sleep(ctx, s.o.Hold)
		}
		return errors.Join(err, pg.Resume())
	}
	if err := pg.Crash(); err != nil {
		return err
	}
	// Confirmed by an observation of its own: nothing answers at the DSN.
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	st, err := postgres.New(cctx, s.o.DSN)
	cancel()
	if err == nil {
		st.Close()
		_ = pg.Restart()
		return fmt.Errorf("fault %s not confirmed: the server still answered after its immediate shutdown", kind)
	}
	fres.Confirmed[kind]++
	err = chaos.Sleep(ctx, s.o.Hold/2)
	return errors.Join(err, pg.Restart())
}

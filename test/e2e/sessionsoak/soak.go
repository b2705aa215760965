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
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store/bolt"
	"github.com/echopubsub/echopubsub/store/postgres"
	"github.com/echopubsub/echopubsub/test/chaos"
	"github.com/echopubsub/echopubsub/test/testpb"
	"google.golang.org/protobuf/proto"
)

// Stores the soak runs on.
const (
	StoreBolt     = "bolt"     // a store/bolt file per node, kept across its processes
	StorePostgres = "postgres" // one PostgreSQL shared by the cluster
)

// Kinds are the fault kinds the session soak injects by default: kill -9
// and restart (the owners resume WithFrom), and the network faults. The
// producer and worker crashes and the cold restart are the plain soak's
// (the session node has no crash hook).
var Kinds = []string{chaos.FaultKill, chaos.FaultProxyCut, chaos.FaultOneWay, chaos.FaultPairwise,
	chaos.FaultProxyBlackhole, chaos.FaultLoss, chaos.FaultPause, chaos.FaultProxyLatency}

// Options configure Run.
type Options struct {
	Store string // StoreBolt or StorePostgres
	DSN   string // StorePostgres: reachable from every node (a Unix socket, across namespaces)
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
	// DataRaces reported by nodes built with -race.
	DataRaces int
	Check     *chaos.SessionCheck
}

// Summary renders r.
func (r *Result) Summary() string {
	s := fmt.Sprintf("store %s, duration %v, messages %d, rows per store %v\nfaults %v, confirmed %v\n",
		r.Store, r.Duration.Round(time.Second), r.Messages, r.Rows, r.Faults, r.Confirmed)
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
	o         Options
	c         *chaos.Cluster
	owners    [][]string        // per node, the owners whose session is there
	committed map[string]uint64 // owner -> last committed cursor (as of its last session's death)
	pub       chaos.Command
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
	res := &Result{Store: o.Store, Faults: map[string]int{}, Confirmed: map[string]int{}, Rows: map[string]int{}}
	s := &soak{o: o, committed: map[string]uint64{},
		pub: chaos.Command{Op: chaos.OpPublish, Publishers: o.Publishers, Rate: o.Rate, Pad: o.Pad}}
	kinds := []string{}
	all := Kinds
	if len(o.Kinds) > 0 {
		all = o.Kinds
	}
	for _, k := range all {
		if chaos.NeedsNetns(k) && !o.Netns {
			res.Skipped = append(res.Skipped, k)
			continue
		}
		kinds = append(kinds, k)
	}
	copt := chaos.ClusterOptions{Binary: o.Node, ProxyBinary: o.Proxy, Dir: o.Dir, Nodes: o.Nodes, Netns: o.Netns,
		Buffer: 2000, Pool: 2, BatchInterval: 20 * time.Millisecond, CallTimeout: time.Second, Retry: 100 * time.Millisecond,
		LogLevel: "warn", Logf: o.Logf,
		NodeArgs: func(nd *chaos.NodeProc) []string {
			args := []string{"-ack-prob", fmt.Sprint(o.AckProb)}
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
	for n := 0; ; n++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if c.Sent() >= o.Messages && n >= len(kinds) {
			break
		}
		if err := sleep(ctx, o.Settle); err != nil {
			return nil, err
		}
		kind := kinds[n%len(kinds)]
		if err := chaos.InjectFault(ctx, c, so, rng, kind, fres, chaos.Command{}); err != nil {
			return nil, fmt.Errorf("fault %s: %w", kind, err)
		}
		res.Faults[kind]++
		s.logf("session soak: %s done; %d messages sent (%.0fs)", kind, c.Sent(), time.Since(start).Seconds())
	}
	if err := s.drain(ctx); err != nil {
		s.logf("session soak: drain incomplete (the tail check will report it): %v", err)
	}
	c.Close() // the race detector reports on exit, too; the records are complete
	res.DataRaces = c.DataRaces()
	files, err := c.Records()
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
		res.Rows[name] = len(rows)
	}
	res.Check, err = chaos.CheckSessions(sfiles, stores)
	if err != nil {
		return nil, fmt.Errorf("checking the records: %w", err)
	}
	res.Messages = res.Check.Messages
	res.Duration = time.Since(start)
	return res, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// open opens a session on node i for each of owners (default: node i's),
// WithFrom its committed cursor + 1 (1 at first).
func (s *soak) open(i int, owners ...string) error {
	if owners == nil {
		owners = s.owners[i]
	}
	var specs []chaos.OwnerSpec
	for _, name := range owners {
		specs = append(specs, chaos.OwnerSpec{Name: name, From: s.committed[name] + 1})
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
	if len(s.owners[i]) > 0 {
		if err := s.open(i); err != nil {
			return err
		}
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
	moved := s.owners[i]
	if len(moved) == 0 {
		return nil
	}
	j := (i + 1) % len(c.Nodes)
	if err := s.open(j, moved...); err != nil {
		return err
	}
	s.owners[i], s.owners[j] = nil, append(s.owners[j], moved...)
	s.logf("session soak: owners %v of killed %s resumed on %s", moved, nd.Name, c.Nodes[j].Name)
	return nil
}

// drain stops the publishers and waits until every owner has every row of
// its store, all acked, with the stores' ends unchanged since the last
// look (a row may still be on its way to a node-local store).
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
		if err := sleep(ctx, 250*time.Millisecond); err != nil { // polling the nodes, bounded by the deadline
			return err
		}
	}
	return fmt.Errorf("not drained after %v: %s", s.o.Drain, why)
}

// readStores reads the topic's rows from every store once the nodes are
// down: each node's bolt file, or the shared table.
func (s *soak) readStores(ctx context.Context) (map[string][]chaos.StoreRow, error) {
	out := map[string][]chaos.StoreRow{}
	if s.o.Store == StorePostgres {
		st, err := postgres.New(ctx, s.o.DSN)
		if err != nil {
			return nil, err
		}
		defer st.Close()
		rows, err := readAll(ctx, st)
		out["shared"] = rows
		return out, err
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
		rows, err := readAll(ctx, st)
		_ = st.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out[nd.Name] = rows
	}
	return out, nil
}

func readAll(ctx context.Context, st echopubsub.Store) ([]chaos.StoreRow, error) {
	var out []chaos.StoreRow
	from := uint64(1)
	for {
		recs, next, err := st.Read(ctx, chaos.SessionTopic, from, 1000)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			row := chaos.StoreRow{Cursor: r.Cursor, Gap: r.Kind == echopubsub.RecordGap, Origin: r.Origin, Reason: r.Reason}
			if !row.Gap {
				var stamp testpb.Stamp
				if err := proto.Unmarshal(r.Payload, &stamp); err != nil {
					return nil, fmt.Errorf("row %d: %w", r.Cursor, err)
				}
				row.Publisher, row.Seq = stamp.Publisher, stamp.Seq
			}
			out = append(out, row)
		}
		if len(recs) < 1000 {
			return out, nil
		}
		from = next
	}
}

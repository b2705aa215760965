package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cmd/demo/scorepb"
	"github.com/echopubsub/echopubsub/internal/devca"
	"github.com/echopubsub/echopubsub/internal/proc"
)

// Demo is a running ScoreBoard: the source of truth, one proxy and one
// process per node, the scorer, and the web page.
type Demo struct {
	cfg       Config
	log       zerolog.Logger
	authority *Authority
	fabric    *Fabric
	children  []*child // index i-1 is node i
	byAddr    map[string]int
	web       *http.Server
	webCancel context.CancelFunc
	url       string
	hub       *hub
	client    *http.Client
	burst     chan struct{}
	ready     chan struct{} // closed once every node has registered with every other
	readyOnce sync.Once
	tlsDir    string // with Config.TLS: the CA and node certificates

	cancel context.CancelFunc
	wg     sync.WaitGroup // scorer and poller

	mu        sync.Mutex // guards the fields below
	events    []Event
	links     map[int]*linkState
	published uint64 // highest goal handed to a node for broadcast
	publisher int
	prev      map[int]BoardSnapshot
	inSyncAt  map[int]time.Time

	stopOnce sync.Once
	stopErr  error
}

// linkState is what the page shows of a node's transport.
type linkState struct {
	mode      string    // "online", "offline", "blip", "outage"
	changedAt time.Time // last change
	restoreAt time.Time // outage: when it comes back
}

// Event is one line of the page's timeline.
type Event struct {
	AtUnixMs int64  `json:"at_unix_ms"`
	Kind     string `json:"kind"` // "link", "goal", "held", "expired", "reload", "replay"
	Node     int    `json:"node,omitempty"`
	Text     string `json:"text"`
}

const maxEvents = 40

// Start runs the demo until Stop: it serves the page on 127.0.0.1, opens a
// proxy per node and starts the node processes.
func Start(ctx context.Context, cfg Config) (*Demo, error) {
	level, err := zerolog.ParseLevel(cfg.LogLevel)
	if err != nil {
		return nil, err
	}
	log := newLog(level).Str("demo", "scoreboard").Logger()
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own binary to start the nodes: %w", err)
	}
	d := &Demo{
		cfg: cfg, log: log, authority: NewAuthority(), fabric: NewFabric(log), byAddr: map[string]int{},
		hub: newHub(), client: &http.Client{Timeout: 2 * time.Second}, burst: make(chan struct{}, 1),
		ready: make(chan struct{}),
		links: map[int]*linkState{}, prev: map[int]BoardSnapshot{}, inSyncAt: map[int]time.Time{},
	}

	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", cfg.Port))
	if err != nil {
		return nil, fmt.Errorf("page port: %w", err)
	}
	d.url = "http://" + ln.Addr().String() + "/"
	d.serveWeb(ln)

	specs := make([]nodeSpec, cfg.Nodes)
	var peers []string
	for i := range specs {
		listen, err := proc.FreeAddr()
		if err == nil {
			specs[i].Advertise, err = d.fabric.Listen(i+1, listen)
		}
		if err != nil {
			d.Stop(context.Background())
			return nil, err
		}
		specs[i].Index, specs[i].Listen = i+1, listen
		peers = append(peers, specs[i].Advertise)
		d.byAddr[specs[i].Advertise] = i + 1
		d.links[i+1] = &linkState{mode: "online", changedAt: time.Now()}
	}
	if cfg.TLS {
		if err := d.makeCerts(specs); err != nil {
			d.Stop(context.Background())
			return nil, err
		}
	}
	for i := range specs {
		specs[i].Peers = peers
		specs[i].BufferSize = cfg.BufferSize
		specs[i].BatchInterval = cfg.BatchInterval
		specs[i].Authority = d.url + "api/truth"
		specs[i].Consul = cfg.Consul
		specs[i].LogLevel = cfg.LogLevel
	}

	// Start the nodes side by side: each takes a moment to come up.
	d.children = make([]*child, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.children[i], errs[i] = spawnChild(ctx, exe, specs[i])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		d.Stop(context.Background())
		return nil, err
	}

	loops, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	d.wg.Add(2)
	go func() { defer d.wg.Done(); d.scoreLoop(loops) }()
	go func() { defer d.wg.Done(); d.pollLoop(loops) }()
	d.event("link", 0, fmt.Sprintf("%d nodes started, each its own process; buffer_size %d, batch_interval %v", cfg.Nodes, cfg.BufferSize, cfg.BatchInterval))
	return d, nil
}

// URL is the page's address.
func (d *Demo) URL() string { return d.url }

// Stop stops the scorer, every node process (killing what does not stop
// by ctx's deadline), the proxies and the page, in that order. Idempotent.
func (d *Demo) Stop(ctx context.Context) error {
	d.stopOnce.Do(func() {
		if d.cancel != nil {
			d.cancel()
		}
		d.wg.Wait()
		var errs []error
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, c := range d.children {
			if c == nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := c.stop(ctx); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		d.fabric.Close()
		if d.web != nil {
			d.webCancel() // ends the WebSocket handlers, which Shutdown does not wait for
			if err := d.web.Shutdown(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		if d.tlsDir != "" {
			if err := os.RemoveAll(d.tlsDir); err != nil {
				errs = append(errs, err)
			}
		}
		d.stopErr = errors.Join(errs...)
	})
	return d.stopErr
}

// TLSDir is where the CA and node certificates are (Config.TLS), or "".
func (d *Demo) TLSDir() string { return d.tlsDir }

// makeCerts makes a throw-away CA and, for each node, a certificate that
// stands for exactly its advertised address (a URI SAN, see
// echopubsub.NodeURI) and for 127.0.0.1 (which dials verify), as PEM files
// in a fresh temporary directory.
func (d *Demo) makeCerts(specs []nodeSpec) error {
	dir, err := os.MkdirTemp("", "echopubsub-demo-tls-")
	if err != nil {
		return fmt.Errorf("tls: %w", err)
	}
	d.tlsDir = dir
	ca, err := devca.New("ScoreBoard demo CA")
	if err != nil {
		return err
	}
	var ids []devca.Identity
	for i := range specs {
		id := devca.Identity{Name: fmt.Sprintf("node%d", specs[i].Index), URIs: []*url.URL{echopubsub.NodeURI(specs[i].Advertise)},
			IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}
		ids = append(ids, id)
		specs[i].TLSCA = filepath.Join(dir, "ca.pem")
		specs[i].TLSCert = filepath.Join(dir, id.Name+".pem")
		specs[i].TLSKey = filepath.Join(dir, id.Name+"-key.pem")
	}
	return ca.WriteFiles(dir, ids...)
}

func (d *Demo) event(kind string, node int, text string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.events = append(d.events, Event{AtUnixMs: time.Now().UnixMilli(), Kind: kind, Node: node, Text: text})
	if len(d.events) > maxEvents {
		d.events = d.events[len(d.events)-maxEvents:]
	}
}

// scoreLoop scores a goal every GoalEvery, runs bursts, and republishes the
// latest score when handing it to a node failed.
func (d *Demo) scoreLoop(ctx context.Context) {
	// The match kicks off once the nodes have found each other, so that no
	// node starts the demo already behind.
	select {
	case <-ctx.Done():
		return
	case <-d.ready:
	case <-time.After(20 * time.Second):
		d.log.Warn().Msg("nodes have not all registered with each other after 20s: starting the match anyway")
	}
	d.event("goal", 0, "Kick-off: every node has registered with every other")
	goals := time.NewTicker(d.cfg.GoalEvery)
	defer goals.Stop()
	retry := time.NewTicker(500 * time.Millisecond)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-goals.C:
			d.score(ctx)
		case <-d.burst:
			n := d.cfg.burstSize()
			d.event("goal", 0, fmt.Sprintf("Burst: %d goals in %v, more than the %d messages a peer keeps for an offline node", n, time.Duration(n)*d.cfg.burstGap(), d.cfg.BufferSize))
			for i := 0; i < n && ctx.Err() == nil; i++ {
				d.score(ctx)
				select {
				case <-ctx.Done():
				case <-time.After(d.cfg.burstGap()):
				}
			}
			goals.Reset(d.cfg.GoalEvery)
		case <-retry.C:
			truth := d.authority.Truth()
			d.mu.Lock()
			behind := d.published < truth.GetGoal()
			d.mu.Unlock()
			if behind {
				d.publish(ctx, truth)
			}
		}
	}
}

func (d *Demo) score(ctx context.Context) {
	d.publish(ctx, d.authority.Goal(time.Now()))
}

// publish hands s to a node, which broadcasts it with EchoPubSub: the first
// online node, so that an offline node's column shows what it misses. If
// every node is offline, node 1 announces it anyway.
func (d *Demo) publish(ctx context.Context, s *scorepb.Score) {
	via := 1
	for _, c := range d.children {
		if d.fabric.Online(c.index) {
			via = c.index
			break
		}
	}
	body, err := marshalScore(s)
	if err != nil {
		d.log.Error().Err(err).Msg("encode score")
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.children[via-1].control+"/publish", bytes.NewReader(body))
	if err != nil {
		return
	}
	resp, err := d.client.Do(req)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			err = fmt.Errorf("node %d answered %s", via, resp.Status)
		}
	}
	if err != nil {
		d.log.Warn().Err(err).Uint64("goal", s.GetGoal()).Msg("publish failed; the latest score is retried")
		return
	}
	d.mu.Lock()
	if s.GetGoal() > d.published {
		d.published = s.GetGoal()
	}
	d.publisher = via
	d.mu.Unlock()
}

// Link actions, from the page's buttons.
var linkActions = map[string]bool{"offline": true, "online": true, "blip": true, "outage": true}

// outage is the length of the "5 s outage" button's cut.
const outage = 5 * time.Second

func (d *Demo) linkAction(node int, action string) error {
	if node < 1 || node > len(d.children) {
		return fmt.Errorf("no node %d", node)
	}
	restored := func(text string) func() {
		return func() {
			d.setLink(node, "online", time.Time{})
			d.event("link", node, text)
		}
	}
	switch action {
	case "offline":
		d.fabric.Cut(node)
		d.setLink(node, "offline", time.Time{})
		d.event("link", node, fmt.Sprintf("Node %d taken offline: its connections are cut, peers keep up to %d messages for it", node, d.cfg.BufferSize))
	case "online":
		d.fabric.Restore(node)
		d.setLink(node, "online", time.Time{})
		d.event("link", node, fmt.Sprintf("Node %d back online: peers reconnect (protoactor waits about 2 s after a failed connection) and replay what they hold", node))
	case "blip":
		d.setLink(node, "blip", time.Now().Add(time.Millisecond))
		d.event("link", node, fmt.Sprintf("Node %d: 1 ms blip, every connection cut and restored", node))
		d.fabric.CutFor(node, time.Millisecond, restored(fmt.Sprintf("Node %d: blip over, anything lost in flight is re-sent", node)))
	case "outage":
		d.setLink(node, "outage", time.Now().Add(outage))
		d.event("link", node, fmt.Sprintf("Node %d: 5 s outage started", node))
		d.fabric.CutFor(node, outage, restored(fmt.Sprintf("Node %d: outage over, back online", node)))
	default:
		return fmt.Errorf("no action %q", action)
	}
	return nil
}

func (d *Demo) setLink(node int, mode string, restoreAt time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.links[node] = &linkState{mode: mode, changedAt: time.Now(), restoreAt: restoreAt}
}

// Burst asks the scorer for a burst; a burst already queued absorbs it.
func (d *Demo) Burst() {
	select {
	case d.burst <- struct{}{}:
	default:
	}
}

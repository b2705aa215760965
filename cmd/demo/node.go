package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cmd/demo/scorepb"
)

// nodeFlag is the hidden first argument that makes the binary run one node:
// the demo re-executes itself as `demo -node <spec JSON>`.
const nodeFlag = "-node"

// topic is the one topic of the match.
const topic = "match"

// pubsubName is the EchoPubSub name every node uses.
const pubsubName = "scoreboard"

// nodeSpec is what the demo tells a node process.
type nodeSpec struct {
	Index         int           `json:"index"`     // 1-based
	Listen        string        `json:"listen"`    // the remote's real address
	Advertise     string        `json:"advertise"` // the node's proxy address
	Peers         []string      `json:"peers"`     // every node's advertised address
	BufferSize    int           `json:"buffer_size"`
	BatchInterval time.Duration `json:"batch_interval"`
	Authority     string        `json:"authority"` // URL of the source of truth
	Consul        string        `json:"consul,omitempty"`
	LogLevel      string        `json:"log_level"`
	// TLS: PEM files of the cluster CA, this node's certificate and key
	// (empty: plaintext).
	TLSCA   string `json:"tls_ca,omitempty"`
	TLSCert string `json:"tls_cert,omitempty"`
	TLSKey  string `json:"tls_key,omitempty"`
}

// readyLine is the one line a node writes on stdout once it runs: its
// control URL, in internal/proc's JSON lines (the demo starts its nodes
// with that package).
type readyLine struct {
	Ev      string `json:"ev"` // "ready"
	Control string `json:"control"`
}

// runNode is the main of a node process.
func runNode(specJSON string) error {
	var spec nodeSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return fmt.Errorf("node spec: %w", err)
	}
	level, err := zerolog.ParseLevel(spec.LogLevel)
	if err != nil {
		return err
	}
	log := newLog(level).Int("node_index", spec.Index).Logger()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The demo holds this process's stdin open: EOF means the demo is gone.
	// It backs up Pdeathsig, which only Linux has.
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); stop() }()

	n, err := startNode(spec, log)
	if err != nil {
		return err
	}
	if err := json.NewEncoder(os.Stdout).Encode(readyLine{Ev: "ready", Control: n.controlURL}); err != nil {
		return err
	}
	<-ctx.Done()
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return n.stop(shutdown)
}

// node is one running node process: actor system, remote, pubsub, board
// and the HTTP control port the demo talks to (never cut: it is the demo's
// view into the node, not the cluster's transport).
type node struct {
	spec       nodeSpec
	log        zerolog.Logger
	system     *actor.ActorSystem
	remote     *remote.Remote
	ps         *echopubsub.PubSub
	board      *BoardState
	http       *http.Server
	controlURL string
	meters     *sdkmetric.MeterProvider
}

func startNode(spec nodeSpec, log zerolog.Logger) (*node, error) {
	host, portStr, err := net.SplitHostPort(spec.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen address %q: %w", spec.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("listen port %q: %w", portStr, err)
	}
	// protoactor's own logs (connection failures, mostly) are the expected
	// result of the demo's cuts: shown only at debug level.
	protoLevel := zerolog.Disabled
	if log.GetLevel() <= zerolog.DebugLevel {
		protoLevel = zerolog.DebugLevel
	}
	opts := []remote.ConfigOption{remote.WithAdvertisedHost(spec.Advertise)}
	if spec.TLSCert != "" {
		tc, err := echopubsub.LoadTLS(spec.TLSCA, spec.TLSCert, spec.TLSKey)
		if err != nil {
			return nil, err
		}
		opts = append(opts, echopubsub.WithTLS(tc))
	}
	system := actor.NewActorSystem(echopubsub.ActorSystemLogger(log.Level(protoLevel)))
	rcfg := echopubsub.RemoteConfig(host, port, log, opts...)
	rcfg.DialOptions = append(rcfg.DialOptions, grpc.WithContextDialer(taggedDialer(spec.Index)))
	r := remote.NewRemote(system, rcfg)
	if err := startRemote(r); err != nil {
		return nil, err
	}
	n := &node{spec: spec, log: log, system: system, remote: r, board: newBoardState()}

	membership, err := membershipFor(spec, log)
	if err != nil {
		n.shutdownRemote()
		return nil, err
	}
	cfg := echopubsub.DefaultConfig(pubsubName)
	cfg.BufferSize = spec.BufferSize
	cfg.BatchInterval = spec.BatchInterval
	cfg.CallTimeout = 2 * time.Second
	cfg.RetryInterval = 250 * time.Millisecond
	// Metrics: the OpenTelemetry SDK with a Prometheus exporter, served on
	// the control port's /metrics (the page links it through /api/nodes).
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		n.shutdownRemote()
		return nil, fmt.Errorf("metrics exporter: %w", err)
	}
	n.meters = sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	ps, err := echopubsub.Start(system, cfg, echopubsub.WithMembership(membership), echopubsub.WithLogger(log),
		echopubsub.WithMeterProvider(n.meters))
	if err != nil {
		n.shutdownRemote()
		return nil, err
	}
	n.ps = ps

	fetch := func() (*scorepb.Score, error) { return fetchTruth(spec.Authority) }
	props := actor.PropsFromProducer(func() actor.Actor {
		return &boardActor{state: n.board, fetch: fetch, system: system, log: log}
	}, actor.WithMailbox(echopubsub.SubscriberMailbox()))
	pid := system.Root.Spawn(props)
	if err := ps.Subscribe(pid, topic, echopubsub.WithMetadata()); err != nil {
		_ = n.stop(context.Background())
		return nil, fmt.Errorf("subscribe: %w", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = n.stop(context.Background())
		return nil, fmt.Errorf("control port: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /state", n.handleState)
	mux.HandleFunc("POST /publish", n.handlePublish)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("GET /health", echopubsub.HealthHandler(ps))
	n.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	n.controlURL = "http://" + ln.Addr().String()
	go func() {
		if err := n.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("control server")
		}
	}()
	return n, nil
}

// startRemote starts r, turning protoactor's panic on a busy port into an
// error.
func startRemote(r *remote.Remote) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("start remote: %v", p)
		}
	}()
	r.Start()
	return nil
}

// taggedDialer dials like gRPC would and then writes the preamble that tells
// the demo's proxies which node opened the connection (see proxy.go).
func taggedDialer(self int) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		if _, err := c.Write([]byte{preambleMagic, byte(self)}); err != nil {
			_ = c.Close()
			return nil, err
		}
		return c, nil
	}
}

func (n *node) shutdownRemote() {
	n.remote.Shutdown(false)
	n.system.Shutdown()
}

func (n *node) stop(ctx context.Context) error {
	var errs []error
	if n.http != nil {
		errs = append(errs, n.http.Shutdown(ctx))
	}
	if n.ps != nil {
		errs = append(errs, n.ps.Stop(ctx))
	}
	if n.meters != nil {
		errs = append(errs, n.meters.Shutdown(ctx))
	}
	n.shutdownRemote()
	return errors.Join(errs...)
}

// HeldFor is what one of this node's producers holds for another node.
type HeldFor struct {
	Node       string `json:"node"` // advertised address
	Lag        uint64 `json:"lag"`
	Expired    bool   `json:"expired"`
	Registered bool   `json:"registered"`
	Failures   int    `json:"failures"`
}

// NodeReport is a node's answer to GET /state.
type NodeReport struct {
	Index       int           `json:"index"`
	Addr        string        `json:"addr"`
	PID         int           `json:"pid"`
	Board       BoardSnapshot `json:"board"`
	WriteCursor uint64        `json:"write_cursor"`
	Held        []HeldFor     `json:"held"` // per other node, summed over groups
	StatsError  string        `json:"stats_error,omitempty"`
}

func (n *node) handleState(w http.ResponseWriter, r *http.Request) {
	rep := NodeReport{Index: n.spec.Index, Addr: n.spec.Advertise, PID: os.Getpid(), Board: n.board.Snapshot()}
	ctx, cancel := context.WithTimeout(r.Context(), time.Second)
	defer cancel()
	groups, err := n.ps.Stats(ctx)
	if err != nil {
		rep.StatsError = err.Error()
	}
	held := map[string]*HeldFor{}
	var order []string
	for _, g := range groups {
		rep.WriteCursor += g.WriteCursor
		for _, ns := range g.Nodes {
			if ns.Node == n.spec.Advertise {
				continue
			}
			h, ok := held[ns.Node]
			if !ok {
				h = &HeldFor{Node: ns.Node, Registered: true}
				held[ns.Node] = h
				order = append(order, ns.Node)
			}
			h.Lag += ns.Lag
			h.Expired = h.Expired || ns.Expired
			h.Registered = h.Registered && ns.Registered
			h.Failures += ns.Failures
		}
	}
	for _, a := range order {
		rep.Held = append(rep.Held, *held[a])
	}
	writeJSON(w, rep)
}

// handlePublish broadcasts the posted score (JSON of scorepb.Score) on the
// match topic: the demo's source of truth announces each goal through an
// online node.
func (n *node) handlePublish(w http.ResponseWriter, r *http.Request) {
	var s scorepb.Score
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	if err == nil {
		err = unmarshalScore(body, &s)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.ViaNode = uint32(n.spec.Index)
	if err := n.ps.Broadcast(nil, topic, &s); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// fetchTruth reads the source of truth.
func fetchTruth(url string) (*scorepb.Score, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("source of truth: %s", resp.Status)
	}
	var s scorepb.Score
	if err := unmarshalScore(body, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

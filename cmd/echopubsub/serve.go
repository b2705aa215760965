package main

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/cluster/consul"
	"github.com/echopubsub/echopubsub/cluster/dns"
	"github.com/echopubsub/echopubsub/gateway"
	"github.com/echopubsub/echopubsub/store/bolt"
	"github.com/echopubsub/echopubsub/store/postgres"
	"github.com/echopubsub/echopubsub/store/seglog"
)

func serveCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a node: the pubsub, the WebSocket gateway, /metrics, /healthz, /readyz and the admin endpoint",
		Long: `Run one node of a cluster as a standalone server. Every setting is a flag, an
environment variable (ECHOPUBSUB_<KEY>) and a key of an optional configuration
file (--config, YAML or JSON); docs/server.md lists them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := resolve(cmd.Flags(), os.Getenv)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return serve(ctx, v, os.Stderr, os.Stdout)
		},
	}
	addFlags(cmd.Flags())
	return cmd
}

// readyLine is what serve writes on stdout once it serves.
type readyLine struct {
	Ev    string `json:"ev"` // "ready"
	Node  string `json:"node"`
	HTTP  string `json:"http"`
	Admin string `json:"admin,omitempty"`
}

// server is one running node.
type server struct {
	log     zerolog.Logger
	system  *actor.ActorSystem
	remote  *remote.Remote
	store   echopubsub.Store
	ps      *echopubsub.PubSub
	gw      *gateway.Gateway
	meters  *sdkmetric.MeterProvider
	servers []*http.Server
	errs    chan error        // a listener that failed
	addrs   map[string]string // setting key -> the address bound
}

// serve runs a node until ctx ends, then stops it within shutdown.timeout.
func serve(ctx context.Context, v values, logOut, readyOut io.Writer) error {
	log, err := newLogger(v, logOut)
	if err != nil {
		return err
	}
	s := &server{log: log, errs: make(chan error, 2), addrs: map[string]string{}}
	if err := s.start(v); err != nil {
		_ = s.stop(context.Background())
		return err
	}
	log.Info().Str("http", s.addrs["http.listen"]).Str("admin", s.addrs["admin.listen"]).Str("node", s.ps.NodeName()).Msg("serving")
	// One JSON line on stdout says it serves, with the addresses bound (a
	// port 0 is resolved): for scripts and supervisors (internal/proc's
	// "ready" line).
	if err := json.NewEncoder(readyOut).Encode(readyLine{Ev: "ready", Node: s.ps.NodeName(),
		HTTP: s.addrs["http.listen"], Admin: s.addrs["admin.listen"]}); err != nil {
		log.Warn().Err(err).Msg("ready line not written")
	}
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-s.errs:
	case <-s.ps.Done():
		runErr = s.ps.Err()
	}
	timeout, _ := time.ParseDuration(v["shutdown.timeout"])
	stopCtx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return errors.Join(runErr, s.stop(stopCtx))
}

func newLogger(v values, out io.Writer) (zerolog.Logger, error) {
	level, err := zerolog.ParseLevel(v["log.level"])
	if err != nil || v["log.level"] == "" {
		return zerolog.Logger{}, fmt.Errorf("log.level: %q is not one of trace, debug, info, warn, error", v["log.level"])
	}
	switch v["log.format"] {
	case "json":
	case "console":
		out = zerolog.ConsoleWriter{Out: out, TimeFormat: "15:04:05.000", NoColor: true}
	default:
		return zerolog.Logger{}, fmt.Errorf("log.format: %q is not json or console", v["log.format"])
	}
	// Times to the millisecond: zerolog's default format has whole seconds.
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00"
	return zerolog.New(out).Level(level).With().Timestamp().Logger(), nil
}

// start builds the node from v. On error, stop releases what was built.
func (s *server) start(v values) error {
	host, port, err := splitHostPort("node.listen", v["node.listen"])
	if err != nil {
		return err
	}
	advertise := v["node.advertise"]
	if advertise == "" {
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			return fmt.Errorf("node.advertise: required when node.listen %q has no specific host", v["node.listen"])
		}
		advertise = net.JoinHostPort(host, strconv.Itoa(port))
	}
	if _, _, err := splitHostPort("node.advertise", advertise); err != nil {
		return err
	}
	cfg, err := pubsubConfig(v)
	if err != nil {
		return err
	}
	membership, err := newMembership(v, advertise)
	if err != nil {
		return err
	}
	opts := []remote.ConfigOption{remote.WithAdvertisedHost(advertise)}
	if tc, err := nodeTLS(v); err != nil {
		return err
	} else if tc != nil {
		opts = append(opts, echopubsub.WithTLS(tc))
	}
	psOpts := []echopubsub.Option{echopubsub.WithMembership(membership), echopubsub.WithLogger(s.log)}
	if s.store, err = openStore(v, s.log); err != nil {
		return err
	}
	if s.store != nil {
		psOpts = append(psOpts, echopubsub.WithStore(s.store))
		if topics := list(v["durable_topics"]); len(topics) > 0 {
			psOpts = append(psOpts, echopubsub.WithDurableTopics(topics...))
		}
		if r := retention(v); r != (echopubsub.Retention{}) {
			psOpts = append(psOpts, echopubsub.WithRetention(r))
		}
	}
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return fmt.Errorf("metrics exporter: %w", err)
	}
	s.meters = sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	psOpts = append(psOpts, echopubsub.WithMeterProvider(s.meters))

	// protoactor's own logs only at debug level: its connection errors
	// while a peer restarts are the library's to report (it does, by peer).
	protoLevel := zerolog.Disabled
	if s.log.GetLevel() <= zerolog.DebugLevel {
		protoLevel = zerolog.DebugLevel
	}
	s.system = actor.NewActorSystem(echopubsub.ActorSystemLogger(s.log.Level(protoLevel)))
	s.remote = remote.NewRemote(s.system, echopubsub.RemoteConfig(host, port, s.log, opts...))
	if err := startRemote(s.remote); err != nil {
		return fmt.Errorf("node.listen %q: %w", v["node.listen"], err)
	}
	if s.ps, err = echopubsub.Start(s.system, cfg, psOpts...); err != nil {
		return err
	}
	if err := s.startHTTP(v, reg); err != nil {
		return err
	}
	return s.startAdmin(v)
}

// startHTTP serves the gateway, its client, /metrics, /healthz and /readyz.
func (s *server) startHTTP(v values, reg *prometheus.Registry) error {
	gcfg := gateway.DefaultConfig()
	gcfg.OriginPatterns = list(v["gateway.origins"])
	gcfg.Publish = v["gateway.publish"] == "true"
	auth := gateway.AnyIdentity
	if tok := v["gateway.token"]; tok != "" {
		auth = func(r *http.Request) (string, error) {
			got := bearer(r)
			if got == "" {
				got = r.URL.Query().Get("token")
			}
			if subtle.ConstantTimeCompare([]byte(got), []byte(tok)) != 1 {
				return "", errors.New("gateway: missing or wrong token")
			}
			return "token", nil
		}
	}
	gw, err := gateway.New(s.ps, auth, gcfg)
	if err != nil {
		return err
	}
	s.gw = gw
	mux := http.NewServeMux()
	mux.Handle("/ws", gw)
	mux.Handle("GET /echopubsub.js", gateway.ClientHandler())
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("GET /healthz", echopubsub.LivenessHandler(s.ps))
	mux.Handle("GET /readyz", echopubsub.HealthHandler(s.ps))
	tc, err := serverTLS(v, "http.tls_cert", "http.tls_key", "")
	if err != nil {
		return err
	}
	return s.listen("http.listen", v["http.listen"], mux, tc)
}

// startAdmin serves echopubsub.AdminHandler on admin.listen.
func (s *server) startAdmin(v values) error {
	if v["admin.listen"] == "" {
		return nil
	}
	var opts []echopubsub.AdminOption
	token := v["admin.token"]
	if f := v["admin.token_file"]; f != "" {
		if token != "" {
			return fmt.Errorf("admin.token_file: %q given with admin.token: give one", f)
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("admin.token_file: %w", err)
		}
		if token = strings.TrimSpace(string(b)); token == "" {
			return fmt.Errorf("admin.token_file: %q is empty", f)
		}
	}
	if token != "" {
		opts = append(opts, echopubsub.WithAdminToken(token))
	}
	if v["admin.client_ca"] != "" {
		opts = append(opts, echopubsub.WithAdminClientCerts())
	}
	if v["admin.publish"] == "true" {
		opts = append(opts, echopubsub.WithAdminPublish())
	}
	if token == "" && v["admin.client_ca"] == "" {
		return fmt.Errorf("admin.listen: %q needs admin.token, admin.token_file or admin.client_ca (the endpoint is always authenticated), or set it empty", v["admin.listen"])
	}
	tc, err := serverTLS(v, "admin.tls_cert", "admin.tls_key", "admin.client_ca")
	if err != nil {
		return err
	}
	return s.listen("admin.listen", v["admin.listen"], echopubsub.AdminHandler(s.ps, opts...), tc)
}

// listen serves h on addr (setting key) in a goroutine owned by s: stop
// shuts the server down, which ends it.
func (s *server) listen(key, addr string, h http.Handler, tc *tls.Config) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	s.addrs[key] = ln.Addr().String()
	// The server's own errors (a TLS handshake refused) go to the node's log.
	errLog := stdlog.New(s.log.With().Str("level", "warn").Str("listener", key).Logger(), "", 0)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, TLSConfig: tc, ErrorLog: errLog}
	s.servers = append(s.servers, srv)
	go func() {
		var err error
		if tc != nil {
			err = srv.ServeTLS(ln, "", "")
		} else {
			err = srv.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.errs <- fmt.Errorf("%s: %w", key, err)
		}
	}()
	return nil
}

// stop releases the node in order: no new requests, sockets closed, the
// pubsub drained and stopped, then the store, meters and remote.
func (s *server) stop(ctx context.Context) error {
	var errs []error
	for _, srv := range s.servers {
		// A tail streams until its client leaves: give requests a moment
		// to end, then close what is left.
		grace, cancel := context.WithTimeout(ctx, time.Second)
		if srv.Shutdown(grace) != nil {
			_ = srv.Close()
		}
		cancel()
	}
	if s.gw != nil {
		errs = append(errs, s.gw.Close(ctx))
	}
	if s.ps != nil {
		errs = append(errs, s.ps.Stop(ctx))
	}
	if s.store != nil {
		errs = append(errs, s.store.Close())
	}
	if s.meters != nil {
		errs = append(errs, s.meters.Shutdown(ctx))
	}
	if s.remote != nil {
		s.remote.Shutdown(true)
	}
	if s.system != nil {
		s.system.Shutdown()
	}
	return errors.Join(errs...)
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

func splitHostPort(key, addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%s: %q is not host:port: %v", key, addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port <= 0 || port > 65535 {
		return "", 0, fmt.Errorf("%s: %q: port %q is not 1..65535", key, addr, p)
	}
	return host, port, nil
}

func list(s string) []string {
	if s == "" {
		return nil
	}
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

func intOf(v values, key string) int {
	n, _ := strconv.Atoi(v[key]) // checked by resolve
	return n
}

func durOf(v values, key string) time.Duration {
	d, _ := time.ParseDuration(v[key]) // checked by resolve
	return d
}

// pubsubConfig is the library's Config with the settings applied.
func pubsubConfig(v values) (echopubsub.Config, error) {
	cfg := echopubsub.DefaultConfig(v["name"])
	if v["pubsub.buffer_size"] != "" {
		cfg.BufferSize = intOf(v, "pubsub.buffer_size")
	}
	if v["pubsub.batch_interval"] != "" {
		cfg.BatchInterval = durOf(v, "pubsub.batch_interval")
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("name %q, pubsub.buffer_size %q, pubsub.batch_interval %q: %w",
			v["name"], v["pubsub.buffer_size"], v["pubsub.batch_interval"], err)
	}
	return cfg, nil
}

func retention(v values) echopubsub.Retention {
	return echopubsub.Retention{MaxAge: durOf(v, "retention.max_age"),
		MaxRows: uint64(intOf(v, "retention.max_rows")), MaxBytes: uint64(intOf(v, "retention.max_bytes"))}
}

// newMembership builds the membership membership.kind names.
func newMembership(v values, advertise string) (cluster.Membership, error) {
	if k := v["membership.kind"]; k != "static" && v["membership.peers"] != "" {
		return nil, fmt.Errorf("membership.peers: %q is for membership.kind static, not %q", v["membership.peers"], k)
	}
	switch k := v["membership.kind"]; k {
	case "static":
		peers := list(v["membership.peers"])
		if len(peers) == 0 {
			peers = []string{advertise}
		}
		for _, p := range peers {
			if _, _, err := splitHostPort("membership.peers", p); err != nil {
				return nil, err
			}
		}
		found := false
		for _, p := range peers {
			found = found || p == advertise
		}
		if !found {
			return nil, fmt.Errorf("membership.peers: %q does not list this node (node.advertise %q)", v["membership.peers"], advertise)
		}
		return cluster.NewStatic(peers...), nil
	case "consul":
		cfg := consul.DefaultConfig()
		if a := v["membership.consul.address"]; a != "" {
			cfg.Address = a
		}
		cfg.TTL = durOf(v, "membership.consul.ttl")
		m, err := consul.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("membership.consul.address %q, membership.consul.ttl %q: %w",
				v["membership.consul.address"], v["membership.consul.ttl"], err)
		}
		return m, nil
	case "dns":
		cfg := dns.DefaultConfig()
		cfg.Name = v["membership.dns.name"]
		cfg.SRV = v["membership.dns.srv"] == "true"
		cfg.Port = intOf(v, "membership.dns.port")
		if cfg.Port == 0 && !cfg.SRV {
			_, cfg.Port, _ = splitHostPort("node.advertise", advertise)
		}
		cfg.Interval = durOf(v, "membership.dns.interval")
		cfg.Timeout = min(cfg.Timeout, cfg.Interval) // a lookup never outlasts the interval
		m, err := dns.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("membership.dns.name %q, membership.dns.srv %q, membership.dns.port %q, membership.dns.interval %q: %w",
				v["membership.dns.name"], v["membership.dns.srv"], v["membership.dns.port"], v["membership.dns.interval"], err)
		}
		return m, nil
	default:
		return nil, fmt.Errorf("membership.kind: %q is not static, consul or dns", k)
	}
}

// openStore opens the store store.kind names; nil without durable topics.
func openStore(v values, log zerolog.Logger) (echopubsub.Store, error) {
	switch k := v["store.kind"]; k {
	case "seglog":
		if len(list(v["durable_topics"])) == 0 {
			return nil, nil
		}
		st, err := seglog.Open(v["store.path"], seglog.WithLogger(log))
		if err != nil {
			return nil, fmt.Errorf("store.path %q: %w", v["store.path"], err)
		}
		return st, nil
	case "bolt":
		if len(list(v["durable_topics"])) == 0 {
			return nil, nil
		}
		if err := os.MkdirAll(filepath.Dir(v["store.path"]), 0o755); err != nil {
			return nil, fmt.Errorf("store.path %q: %w", v["store.path"], err)
		}
		st, err := bolt.Open(v["store.path"])
		if err != nil {
			return nil, fmt.Errorf("store.path %q: %w", v["store.path"], err)
		}
		return st, nil
	case "postgres":
		if v["store.postgres_url"] == "" {
			return nil, fmt.Errorf("store.postgres_url: required with store.kind %q", k)
		}
		if len(list(v["durable_topics"])) == 0 {
			return nil, nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		st, err := postgres.New(ctx, v["store.postgres_url"])
		if err != nil {
			return nil, fmt.Errorf("store.postgres_url: %w", err)
		}
		return st, nil
	default:
		return nil, fmt.Errorf("store.kind: %q is not seglog, bolt or postgres", k)
	}
}

// nodeTLS is mutual TLS between nodes, when tls.* is set.
func nodeTLS(v values) (*tls.Config, error) {
	ca, cert, key := v["tls.ca"], v["tls.cert"], v["tls.key"]
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	if ca == "" || cert == "" || key == "" {
		return nil, fmt.Errorf("tls: tls.ca %q, tls.cert %q and tls.key %q must be given together", ca, cert, key)
	}
	return echopubsub.LoadTLS(ca, cert, key)
}

// serverTLS is a listener's TLS from its cert and key settings, and a
// client CA (mTLS: a client certificate is verified when given; the admin
// handler decides whether one is required).
func serverTLS(v values, certKey, keyKey, caKey string) (*tls.Config, error) {
	cert, key := v[certKey], v[keyKey]
	if cert == "" && key == "" {
		if caKey != "" && v[caKey] != "" {
			return nil, fmt.Errorf("%s: %q needs %s and %s", caKey, v[caKey], certKey, keyKey)
		}
		return nil, nil
	}
	if cert == "" || key == "" {
		return nil, fmt.Errorf("%s %q and %s %q must be given together", certKey, cert, keyKey, key)
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("%s %q with %s %q: %w", certKey, cert, keyKey, key, err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if caKey != "" && v[caKey] != "" {
		pem, err := os.ReadFile(v[caKey])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", caKey, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: %q holds no PEM certificate", caKey, v[caKey])
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return tc, nil
}

// bearer is the token of an "Authorization: Bearer" header.
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

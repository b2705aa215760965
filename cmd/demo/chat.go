package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"
	_ "google.golang.org/protobuf/types/known/structpb" // chat messages are google.protobuf.Struct

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/gateway"
	"github.com/echopubsub/echopubsub/presence"
	"github.com/echopubsub/echopubsub/store/seglog"
)

// The chat demo (go run ./cmd/demo -chat): two EchoPubSub nodes in this
// process, each with its own WebSocket gateway and its own embedded store
// (store/seglog: a log directory in a temp dir), where the node appends every message of the
// durable room it receives, whoever published it. The page /chat?node=1&user=ada is a chat client
// bound to node 1, on the gateway's JavaScript client (served at
// /static/echopubsub.js): it subscribes to the durable room from the
// stream's start, shows each message and acks it after it is shown, and
// when it comes back (offline and back, or a dropped socket: it reconnects
// with back-off) it resumes from the last acked cursor + 1, so what it
// missed comes from the node's store, with the session's pending count on
// screen.

const (
	chatRoom   = "chat:lobby"
	chatPubSub = "chat"
	chatNodes  = 2
)

// Chat is a running chat demo.
type Chat struct {
	log   zerolog.Logger
	dir   string     // the nodes' stores
	addrs []string   // the nodes' addresses, kept over a restart
	mu    sync.Mutex // guards the nodes' fields (a node stops and starts while pages connect)
	nodes []*chatNode
	ln    net.Listener
	web   *http.Server
}

type chatNode struct {
	system *actor.ActorSystem
	remote *remote.Remote
	store  echopubsub.Store // closed after ps stopped
	ps     *echopubsub.PubSub
	gw     *gateway.Gateway
	pres   *presence.Tracker // who is online in the room; stopped before ps
}

var chatUser = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)

// chatIdentity is the demo's authentication hook: the user name in the
// query (a real application checks a session cookie or a token here).
func chatIdentity(r *http.Request) (string, error) {
	u := r.URL.Query().Get("user")
	if !chatUser.MatchString(u) {
		return "", fmt.Errorf("user must match %s, got %q", chatUser, u)
	}
	return u, nil
}

// StartChat starts the chat demo's nodes and its page on 127.0.0.1:port.
func StartChat(cfg Config) (*Chat, error) {
	level, err := zerolog.ParseLevel(cfg.LogLevel)
	if err != nil {
		return nil, err
	}
	log := newLog(level).Str("demo", "chat").Logger()
	dir, err := os.MkdirTemp("", "echopubsub-chat-")
	if err != nil {
		return nil, err
	}
	c := &Chat{log: log, dir: dir}
	if err := c.startNodes(); err != nil {
		_ = c.Stop(context.Background())
		return nil, err
	}
	c.ln, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", cfg.Port))
	if err != nil {
		_ = c.Stop(context.Background())
		return nil, fmt.Errorf("page listener: %w", err)
	}
	c.serve()
	return c, nil
}

func (c *Chat) startNodes() error {
	for i := 0; i < chatNodes; i++ {
		n := &chatNode{}
		c.nodes = append(c.nodes, n)
		if err := n.startRemote(c.log, 0); err != nil {
			return err
		}
		c.addrs = append(c.addrs, n.system.Address())
	}
	for i, n := range c.nodes {
		if err := c.startNode(i, n); err != nil {
			return err
		}
	}
	return nil
}

// startRemote starts the node's actor system and remote on 127.0.0.1:port
// (0: any free port; a restart passes the node's old port).
func (n *chatNode) startRemote(log zerolog.Logger, port int) error {
	n.system = actor.NewActorSystem(echopubsub.ActorSystemLogger(log.Level(zerolog.Disabled)))
	n.remote = remote.NewRemote(n.system, echopubsub.RemoteConfig("127.0.0.1", port, log))
	if err := startRemote(n.remote); err != nil {
		n.system.Shutdown()
		n.remote, n.system = nil, nil
		return err
	}
	return nil
}

// startNode opens node i's store and starts its pubsub, presence tracker
// and gateway on its running actor system.
func (c *Chat) startNode(i int, n *chatNode) error {
	cfg := echopubsub.DefaultConfig(chatPubSub)
	cfg.BatchInterval = 20 * time.Millisecond
	cfg.CallTimeout = 2 * time.Second
	cfg.RetryInterval = 250 * time.Millisecond
	cfg.SoftQueue, cfg.HardQueue = 50, 200
	ps := (*echopubsub.PubSub)(nil)
	authorize := func(sessionID, stream string) error {
		if id, ok := ps.SessionIdentity(sessionID); !ok || id == "" {
			return errors.New("no identity")
		}
		if !strings.HasPrefix(stream, "chat:") {
			return fmt.Errorf("%s is not a chat room", stream)
		}
		return nil
	}
	log := c.log.With().Int("node_index", i+1).Logger()
	// The store logs what its Open cut off or refused through the node's logger.
	store, err := seglog.Open(filepath.Join(c.dir, fmt.Sprintf("node-%d", i+1)), seglog.WithLogger(log))
	if err != nil {
		return fmt.Errorf("node %d: %w", i+1, err)
	}
	n.store = store
	ps, err = echopubsub.Start(n.system, cfg, echopubsub.WithMembership(cluster.NewStatic(c.addrs...)),
		echopubsub.WithLogger(log),
		echopubsub.WithStore(store),
		echopubsub.WithDurableTopics("chat:*"), echopubsub.WithAuthorizer(authorize))
	if err != nil {
		return fmt.Errorf("node %d: %w", i+1, err)
	}
	n.ps = ps
	// Who is online: each page tracks its user in the room through
	// the gateway (docs/presence.md, docs/gateway.md "Presence").
	if n.pres, err = presence.New(ps, presence.DefaultConfig()); err != nil {
		return fmt.Errorf("node %d presence: %w", i+1, err)
	}
	gcfg := gateway.DefaultConfig()
	gcfg.Presence = n.pres
	gcfg.Publish = true
	gcfg.Authorize = func(a gateway.Access) error {
		if !strings.HasPrefix(a.Topic, "chat:") {
			return fmt.Errorf("%s is not a chat room", a.Topic)
		}
		return nil
	}
	if n.gw, err = gateway.New(ps, chatIdentity, gcfg); err != nil {
		return fmt.Errorf("node %d gateway: %w", i+1, err)
	}
	return nil
}

// stop stops the node gracefully: its tracker first (its Goodbye takes the
// node's presences off the other nodes at once, as when the node goes
// offline with its users), then its sockets, its pubsub, its store and its
// actor system.
func (n *chatNode) stop(ctx context.Context) error {
	var errs []error
	if n.pres != nil {
		if err := n.pres.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if n.gw != nil {
		if err := n.gw.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if n.ps != nil {
		if err := n.ps.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if n.store != nil {
		if err := n.store.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if n.remote != nil {
		n.remote.Shutdown(false)
	}
	if n.system != nil {
		n.system.Shutdown()
	}
	n.gw, n.pres, n.ps, n.store, n.remote, n.system = nil, nil, nil, nil, nil, nil
	return errors.Join(errs...)
}

// node returns the index of node {n} of a request's path, or -1.
func (c *Chat) node(r *http.Request) int {
	for i := range c.nodes {
		if r.PathValue("node") == fmt.Sprint(i+1) {
			return i
		}
	}
	return -1
}

// StopNode stops node i (0-based) gracefully; its pages' clients retry
// until StartNode brings it back.
func (c *Chat) StopNode(ctx context.Context, i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[i]
	if n.system == nil {
		return fmt.Errorf("node %d is already stopped", i+1)
	}
	return n.stop(ctx)
}

// StartNode starts stopped node i (0-based) again: a new actor system,
// pubsub, tracker and gateway on the node's old address and store directory.
func (c *Chat) StartNode(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[i]
	if n.system != nil {
		return fmt.Errorf("node %d is already running", i+1)
	}
	_, port, err := net.SplitHostPort(c.addrs[i])
	if err != nil {
		return err
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return err
	}
	if err := n.startRemote(c.log, p); err != nil {
		return fmt.Errorf("node %d: %w", i+1, err)
	}
	if err := c.startNode(i, n); err != nil {
		_ = n.stop(context.Background())
		return err
	}
	return nil
}

func (c *Chat) serve() {
	static, _ := fs.Sub(staticFiles, "static") // cannot fail: the directory is embedded
	mux := http.NewServeMux()
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.Handle("GET /static/echopubsub.js", gateway.ClientHandler()) // the gateway's JavaScript client
	mux.HandleFunc("GET /chat", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, static, "chat.html")
	})
	mux.HandleFunc("GET /chat/ws/{node}", func(w http.ResponseWriter, r *http.Request) {
		i := c.node(r)
		if i < 0 {
			http.Error(w, fmt.Sprintf("want /chat/ws/{1..%d}", len(c.nodes)), http.StatusNotFound)
			return
		}
		c.mu.Lock()
		gw := c.nodes[i].gw
		c.mu.Unlock()
		if gw == nil {
			http.Error(w, fmt.Sprintf("node %d is stopped", i+1), http.StatusServiceUnavailable)
			return
		}
		gw.ServeHTTP(w, r)
	})
	// A node's graceful stop and its restart (the page's clients reconnect).
	mux.HandleFunc("POST /chat/nodes/{node}/{action}", func(w http.ResponseWriter, r *http.Request) {
		i := c.node(r)
		if i < 0 {
			http.Error(w, fmt.Sprintf("want /chat/nodes/{1..%d}/{stop,start}", len(c.nodes)), http.StatusNotFound)
			return
		}
		var err error
		switch r.PathValue("action") {
		case "stop":
			ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
			defer cancel()
			err = c.StopNode(ctx, i)
		case "start":
			err = c.StartNode(i)
		default:
			http.Error(w, "want stop or start", http.StatusNotFound)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		fmt.Fprintf(w, "node %d: %s done\n", i+1, r.PathValue("action"))
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/chat?node=1&user=ada", http.StatusFound)
	})
	c.web = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { // ends when Stop shuts the server down
		if err := c.web.Serve(c.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			c.log.Error().Err(err).Msg("chat page server")
		}
	}()
}

// URL is the chat page of user ada on node 1.
func (c *Chat) URL() string { return "http://" + c.ln.Addr().String() + "/chat?node=1&user=ada" }

// Base is the page server's address.
func (c *Chat) Base() string { return "http://" + c.ln.Addr().String() }

// Stop closes the sockets, stops the nodes and removes their stores.
func (c *Chat) Stop(ctx context.Context) error {
	var errs []error
	c.mu.Lock()
	for _, n := range c.nodes { // every socket first: no page re-tracks on a node still running
		if n.gw != nil {
			if err := n.gw.Close(ctx); err != nil {
				errs = append(errs, err)
			}
			n.gw = nil
		}
	}
	c.mu.Unlock()
	if c.web != nil {
		if err := c.web.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	c.mu.Lock()
	for _, n := range c.nodes {
		if err := n.stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	c.mu.Unlock()
	if err := os.RemoveAll(c.dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// runChat runs the chat demo until ctx ends; it returns the exit code.
func runChat(ctx context.Context, stop context.CancelFunc, cfg Config) int {
	c, err := StartChat(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	fmt.Printf("Chat is running: open %s and %s/chat?node=2&user=bob (Ctrl-C stops)\n", c.URL(), c.Base())
	<-ctx.Done()
	stop() // a second Ctrl-C now kills the demo outright
	fmt.Println("Chat: stopping")
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Stop(shutdown); err != nil {
		fmt.Fprintln(os.Stderr, "demo: stop:", err)
		return 1
	}
	return 0
}

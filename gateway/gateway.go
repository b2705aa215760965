// Package gateway is EchoPubSub's WebSocket gateway, built on package
// echopubsub's exported API: an http.Handler that binds each socket to one
// new session of a pubsub, on this node. JSON commands (subscribe,
// unsubscribe, ack, ack_many, replay, publish, request, reply) act on the
// socket's own session only; envelopes reach the client in protojson and
// stay reserved until it acks them, so a client that stops reading is a
// slow consumer under the session's rules and is closed with a reason.
// Protocol and defaults: docs/gateway.md. A JavaScript client for
// browsers (one ES module, no build step) ships in this module as
// client/echopubsub.js; ClientHandler serves it.
//
//	gw, err := gateway.New(ps, authenticate, gateway.DefaultConfig())
//	http.Handle("/ws", gw)
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/coder/websocket"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/presence"
)

// Gateway is an http.Handler that serves the gateway's WebSocket protocol
// (docs/gateway.md): each socket is bound to one new session, opened for
// it on this node and closed with it. Every command a client sends acts on
// that session; a client cannot name another.
//
// Envelopes reach the client as JSON frames (the message in protojson) and
// stay reserved until the client acks them, so a socket that stops reading
// is a slow consumer like any session: the pubsub's SoftQueue and HardQueue
// (echopubsub.Config) apply, and its SlowConsumerAction closes the
// session, then the gateway closes the socket with a close frame saying
// why. Only the client's own time counts against it: sessions are opened
// WithHandoff and the writer reports each envelope it wrote
// (PubSub.Handed), so the time an envelope waits in the socket's queue or
// in a slow write never makes a client that acks promptly look stalled
// (RoomWait).
type Gateway struct {
	ps   *echopubsub.PubSub
	cfg  Config
	auth func(*http.Request) (string, error)
	log  zerolog.Logger

	mu      sync.Mutex
	sockets map[*socket]struct{}
	closed  bool
	wg      sync.WaitGroup // one per ServeHTTP that got past authentication
}

// ErrForbidden: an authentication hook's error that wraps it refuses the
// upgrade with 403 Forbidden; any other error refuses it with 401.
var ErrForbidden = errors.New("echopubsub: forbidden")

// ErrClosed: the gateway was closed (Close).
var ErrClosed = errors.New("echopubsub: gateway closed")

// Resolver finds message types by name (protojson needs it for the
// payloads it reads and writes, and for google.protobuf.Any fields inside
// them). *protoregistry.Types implements it.
type Resolver interface {
	protoregistry.MessageTypeResolver
	protoregistry.ExtensionTypeResolver
}

// Access is one thing a client asks to do, for Config.Authorize.
type Access struct {
	// Identity is what the authentication hook returned for the socket.
	Identity  string
	SessionID string
	// Op is "subscribe", "replay", "publish" or "request".
	Op string
	// Topic is the topic subscribed or published to; for "request" the
	// session id the request goes to.
	Topic string
}

// Config configures a Gateway. Start from DefaultConfig; the
// zero value of a field is not a default, New refuses it.
type Config struct {
	// WriteTimeout bounds the writing of one frame to a socket. A socket
	// that takes longer (its client stopped reading and the TCP window is
	// full) is closed. Default 10s.
	WriteTimeout time.Duration
	// ReadLimit is the largest client frame, in bytes. A larger one closes
	// the socket with status 1009 (message too big). Default 64 KiB.
	ReadLimit int64
	// MaxFrameSize is the largest server frame, in bytes. An envelope whose
	// frame would be larger is sent without its payload, with
	// payload_error saying so (still with its delivery id, to ack): never
	// dropped silently. Default 1 MiB.
	MaxFrameSize int
	// OutboundQueue is how many frames may wait for a socket's writer.
	// Durable envelopes are bounded by the session's HardQueue first; a
	// socket whose queue is full (ephemeral deliveries, notices) is a slow
	// consumer and is closed. The queue grows as frames come and gives its
	// memory back once drained: an idle socket keeps at most 64 slots,
	// whatever the bound. Default 4096; must be above the pubsub's
	// HardQueue, so that the session's own rule acts first.
	OutboundQueue int
	// PingInterval is how often an idle socket is pinged; a peer that does
	// not answer within WriteTimeout is gone and its socket is closed (its
	// session with it). Default 30s.
	PingInterval time.Duration
	// MaxSubscriptions bounds one socket's topics. Default 256.
	MaxSubscriptions int
	// CloseTimeout bounds Close waiting for sockets to end. Default 10s.
	CloseTimeout time.Duration
	// OriginPatterns are the hosts allowed as Origin besides the request's
	// own host (coder/websocket AcceptOptions.OriginPatterns: path.Match
	// patterns; New refuses a malformed one). Default
	// none: same origin only.
	OriginPatterns []string
	// Resolver resolves payload types. Default protoregistry.GlobalTypes
	// (every message type linked into the binary).
	Resolver Resolver
	// Authorize, when set, decides each subscribe, replay, publish and
	// request; its error refuses the command (error frame
	// "unauthorized"). Default nil: all of them are allowed (publish only
	// when Publish is set). A replay is also asked of the pubsub's own
	// authorizer (echopubsub.WithAuthorizer), which sees the session id:
	// PubSub.SessionIdentity gives its identity.
	Authorize func(Access) error
	// DefaultReplayLimit is the replay command's limit when the client
	// gives none. Default 100.
	DefaultReplayLimit int
	// MaxReplayLimit bounds the replay command's limit. Default 1000.
	MaxReplayLimit int
	// Publish enables the "publish" command (a Broadcast from the
	// client). Default false: publish answers "publish_disabled".
	Publish bool
	// ReceiptTimeout bounds a publish with "receipt": true: its result
	// comes when every member delivered the message (BroadcastAwait) or
	// after ReceiptTimeout, with what was known then ("complete": false).
	// The socket reads no other command meanwhile (that keeps its publishes
	// in order), so the wait is at most half of WriteTimeout, which bounds
	// a pong. Default 5s.
	ReceiptTimeout time.Duration
	// Presence, when set, enables the presence commands (track, untrack,
	// presence; docs/gateway.md): a socket tracks under its own identity
	// (what the authentication hook returned), never another key, and
	// what it tracked leaves when it closes. The tracker must be of the
	// gateway's pubsub. Default nil: presence is off, and those commands
	// answer "presence_disabled".
	Presence *presence.Tracker
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{WriteTimeout: 10 * time.Second, PingInterval: 30 * time.Second, ReadLimit: 64 << 10, MaxFrameSize: 1 << 20,
		OutboundQueue: 4096, MaxSubscriptions: 256, CloseTimeout: 10 * time.Second, Resolver: protoregistry.GlobalTypes,
		DefaultReplayLimit: 100, MaxReplayLimit: 1000, ReceiptTimeout: 5 * time.Second}
}

// validate names the first invalid field and its value.
func (c Config) validate(hardQueue int) error {
	switch {
	case c.WriteTimeout <= 0:
		return fmt.Errorf("echopubsub: gateway config WriteTimeout must be > 0, got %v", c.WriteTimeout)
	case c.PingInterval <= 0:
		return fmt.Errorf("echopubsub: gateway config PingInterval must be > 0, got %v", c.PingInterval)
	case c.ReadLimit < 512:
		return fmt.Errorf("echopubsub: gateway config ReadLimit must be >= 512 bytes, got %d", c.ReadLimit)
	case c.MaxFrameSize < 1024:
		return fmt.Errorf("echopubsub: gateway config MaxFrameSize must be >= 1024 bytes, got %d", c.MaxFrameSize)
	case c.OutboundQueue <= hardQueue:
		return fmt.Errorf("echopubsub: gateway config OutboundQueue must be above the pubsub's HardQueue (%d), got %d", hardQueue, c.OutboundQueue)
	case c.MaxSubscriptions <= 0:
		return fmt.Errorf("echopubsub: gateway config MaxSubscriptions must be > 0, got %d", c.MaxSubscriptions)
	case c.CloseTimeout <= 0:
		return fmt.Errorf("echopubsub: gateway config CloseTimeout must be > 0, got %v", c.CloseTimeout)
	case c.MaxReplayLimit <= 0:
		return fmt.Errorf("echopubsub: gateway config MaxReplayLimit must be > 0, got %d", c.MaxReplayLimit)
	case c.DefaultReplayLimit <= 0 || c.DefaultReplayLimit > c.MaxReplayLimit:
		return fmt.Errorf("echopubsub: gateway config DefaultReplayLimit must be in 1..MaxReplayLimit (%d), got %d", c.MaxReplayLimit, c.DefaultReplayLimit)
	case c.ReceiptTimeout <= 0:
		return fmt.Errorf("echopubsub: gateway config ReceiptTimeout must be > 0, got %v", c.ReceiptTimeout)
	case c.Resolver == nil:
		return fmt.Errorf("echopubsub: gateway config Resolver must not be nil, got nil")
	}
	for i, p := range c.OriginPatterns {
		// coder/websocket matches each with path.Match, lower-cased: a
		// malformed one would fail every cross-origin request.
		if _, err := path.Match(strings.ToLower(p), ""); err != nil {
			return fmt.Errorf("echopubsub: gateway config OriginPatterns[%d] must be a path.Match pattern, got %q: %w", i, p, err)
		}
	}
	return nil
}

// New returns a gateway serving sessions of ps. authenticate runs on
// every upgrade request before the upgrade: it returns the identity the
// socket acts for (recorded with echopubsub.WithIdentity, so an authorizer can see
// it), or an error that refuses the request with 401 (403 when it wraps
// ErrForbidden). It must not be nil; AnyIdentity accepts everyone.
func New(ps *echopubsub.PubSub, authenticate func(*http.Request) (identity string, err error), cfg Config) (*Gateway, error) {
	if ps == nil {
		return nil, fmt.Errorf("echopubsub: gateway.New needs a pubsub, got nil")
	}
	if authenticate == nil {
		return nil, fmt.Errorf("echopubsub: gateway.New authenticate must not be nil, got nil (use AnyIdentity to accept everyone)")
	}
	if err := ps.Err(); err != nil {
		return nil, fmt.Errorf("echopubsub: gateway.New: pubsub %q is stopped: %w", ps.Config().Name, err)
	}
	if err := cfg.validate(ps.Config().HardQueue); err != nil {
		return nil, err
	}
	return &Gateway{ps: ps, cfg: cfg, auth: authenticate, sockets: map[*socket]struct{}{},
		log: ps.Logger().With().Str("component", "gateway").Logger()}, nil
}

// AnyIdentity is an authentication hook that accepts every request, with
// identity "anonymous" (for demos and tests).
func AnyIdentity(*http.Request) (string, error) { return "anonymous", nil }

// Sockets is the number of open sockets.
func (g *Gateway) Sockets() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.sockets)
}

// Close refuses new sockets, closes every open one (status 1001, "gateway
// closing") and waits, up to ctx and CloseTimeout, until their handlers
// returned. Their sessions are closed with them. Idempotent.
func (g *Gateway) Close(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("echopubsub: gateway Close needs a context, got nil")
	}
	g.mu.Lock()
	g.closed = true
	for s := range g.sockets {
		s.requestClose(websocket.StatusGoingAway, "gateway closing", true)
	}
	g.mu.Unlock()
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }() // ends when the handlers do (each bounded by CloseTimeout)
	timer := time.NewTimer(g.cfg.CloseTimeout)
	defer timer.Stop()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("echopubsub: gateway close: %w", ctx.Err())
	case <-timer.C:
		return fmt.Errorf("echopubsub: gateway close: sockets still open after CloseTimeout %v", g.cfg.CloseTimeout)
	}
}

// ServeHTTP authenticates the request, opens a session, upgrades to a
// WebSocket and serves it until either side closes.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	identity, err := g.auth(r)
	if err != nil {
		code := http.StatusUnauthorized
		if errors.Is(err, ErrForbidden) {
			code = http.StatusForbidden
		}
		http.Error(w, http.StatusText(code), code)
		return
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		http.Error(w, "gateway closed", http.StatusServiceUnavailable)
		return
	}
	g.wg.Add(1)
	g.mu.Unlock()
	defer g.wg.Done()

	s := &socket{gw: g, identity: identity, out: newOutQueue(g.cfg.OutboundQueue),
		closeCh: make(chan struct{}), writerDone: make(chan struct{}), subs: map[string]bool{},
		tracked: map[string]bool{}, watching: map[string]bool{}, shown: map[string]bool{}, requests: map[uint64]*echopubsub.Envelope{}}
	system := g.ps.ActorSystem()
	s.owner = system.Root.Spawn(actor.PropsFromFunc(s.receive))
	defer func() { _ = system.Root.StopFuture(s.owner).Wait() }()
	defer s.untrackAll() // before the owner stops (the tracker would see it stop too)
	// WithHandoff: the writer reports each envelope it wrote (Handed), so
	// that time in this socket's queue and writes is never the client's.
	sess, err := g.ps.OpenSession(s.owner, echopubsub.WithIdentity(identity), echopubsub.WithHandoff())
	if err != nil {
		http.Error(w, "session: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	s.sid = sess.ID()
	defer func() { _ = g.ps.CloseSession(s.sid) }() // already closed (hard queue, Stop): nothing to do

	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: g.cfg.OriginPatterns})
	if err != nil {
		return // Accept answered the request
	}
	// readLoop enforces ReadLimit with its own close reason; the library's
	// limit, one byte above, only bounds what it buffers.
	conn.SetReadLimit(g.cfg.ReadLimit + 1)
	s.conn = conn
	g.mu.Lock()
	if g.closed {
		s.requestClose(websocket.StatusGoingAway, "gateway closing", true)
	}
	g.sockets[s] = struct{}{}
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		delete(g.sockets, s)
		g.mu.Unlock()
	}()
	g.log.Debug().Str("session", s.sid).Str("identity", identity).Msg("gateway: socket open")

	s.send(outFrame{raw: mustJSON(helloFrame{Type: "hello", SessionID: s.sid, Identity: identity,
		Node: g.ps.NodeName(), Instance: g.ps.Config().Name})})
	go s.writeLoop() // owned by this handler: it waits for writerDone below
	s.readLoop(r.Context())
	s.requestClose(websocket.StatusNormalClosure, "", false)
	<-s.writerDone
	g.log.Debug().Str("session", s.sid).Str("reason", s.closeReason).Msg("gateway: socket closed")
}

// socket is one WebSocket and its session. The handler goroutine reads
// commands; the writer goroutine (writeLoop) writes frames; the owner actor
// (receive) turns what the session delivers into frames for the writer.
type socket struct {
	gw       *Gateway
	conn     *websocket.Conn
	identity string
	sid      string
	owner    *actor.PID

	out        *outQueue // frames for the writer; a late send is dropped with the socket
	closeOnce  sync.Once
	closeCh    chan struct{} // closed by requestClose
	writerDone chan struct{}
	// Set once, before closeCh is closed.
	closeCode   websocket.StatusCode
	closeReason string
	flush       bool

	subs map[string]bool // handler goroutine only
	// tracked: the topics this socket tracks (handler goroutine only);
	// shown: the topics whose presence_state was sent (owner actor only).
	// watching: the topics whose presence it follows (handler goroutine).
	tracked  map[string]bool
	watching map[string]bool
	shown    map[string]bool

	reqMu    sync.Mutex
	requests map[uint64]*echopubsub.Envelope // request envelopes by delivery id, until replied to or acked
}

// outFrame is one frame for the writer: an envelope or a notice (encoded
// by the writer), or raw JSON.
type outFrame struct {
	env    *echopubsub.Envelope
	notice interface{} // a notice message, or a *echopubsub.StreamGap, StreamTruncated, CaughtUp, SessionStalled or SessionResumed
	raw    []byte
}

// receive is the session owner: it runs on the actor's goroutine and never
// blocks (a full outbound queue closes the socket instead).
func (s *socket) receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *echopubsub.Envelope:
		if rc, ok := echopubsub.RequestContextOf(m); ok && !rc.Reply {
			s.reqMu.Lock()
			s.requests[m.DeliveryID] = m
			s.reqMu.Unlock()
		}
		s.send(outFrame{env: m})
	case *messages.SessionPressure, *messages.CursorExpired, *messages.BackPressure:
		s.send(outFrame{notice: m})
	case *echopubsub.StreamGap, *echopubsub.StreamTruncated, *echopubsub.CaughtUp,
		*echopubsub.SessionStalled, *echopubsub.SessionResumed:
		s.send(outFrame{notice: m})
	case *ownerFrame:
		s.send(outFrame{raw: m.raw})
	case *presence.Diff:
		s.presenceDiff(m)
	case *presenceState:
		s.presenceState(m)
	case *messages.SessionClosed:
		s.send(outFrame{notice: m})
		code, reason := websocket.StatusNormalClosure, "session closed"
		switch m.Reason {
		case messages.SessionCloseReason_SESSION_CLOSE_REASON_HARD_QUEUE:
			code, reason = websocket.StatusPolicyViolation, "slow consumer: "+m.Detail
		case messages.SessionCloseReason_SESSION_CLOSE_REASON_PUBSUB_STOPPED:
			code, reason = websocket.StatusGoingAway, "pubsub stopped"
		}
		s.requestClose(code, reason, true)
	case *actor.Stopping:
		s.requestClose(websocket.StatusGoingAway, "session owner stopped", true)
	}
}

// send queues f for the writer; a full queue makes the socket a slow
// consumer.
func (s *socket) send(f outFrame) {
	if !s.out.push(f) {
		s.requestClose(websocket.StatusPolicyViolation, "slow consumer: outbound queue full", false)
		// Nothing more can reach this client: stop reserving for it now.
		_ = s.gw.ps.CloseSession(s.sid)
	}
}

// requestClose asks the writer to close the socket with code and reason,
// after writing what is queued when flush is set. The first request wins.
func (s *socket) requestClose(code websocket.StatusCode, reason string, flush bool) {
	s.closeOnce.Do(func() {
		s.closeCode, s.closeReason, s.flush = code, closeReasonClip(reason), flush
		close(s.closeCh)
	})
}

// closeReasonClip keeps a close reason within the 123 bytes a close frame
// allows.
func closeReasonClip(r string) string {
	const max = 123
	if len(r) <= max {
		return r
	}
	r = r[:max]
	for len(r) > 0 && !utf8.ValidString(r) {
		r = r[:len(r)-1]
	}
	return r
}

// writeLoop writes queued frames until a close is requested, then closes
// the socket (with its close handshake, bounded by coder/websocket's own
// 5 s timeouts). A write that fails or times out closes the socket at once.
func (s *socket) writeLoop() {
	defer close(s.writerDone)
	ping := time.NewTicker(s.gw.cfg.PingInterval)
	defer ping.Stop()
	for {
		select {
		case <-ping.C:
			ctx, cancel := context.WithTimeout(context.Background(), s.gw.cfg.WriteTimeout)
			err := s.conn.Ping(ctx) // the handler's read loop reads the pong
			cancel()
			if err != nil {
				s.requestClose(websocket.StatusPolicyViolation, "no pong within WriteTimeout", false)
				_ = s.conn.CloseNow()
				return
			}
		case <-s.out.ready:
			if err := s.drain(true); err != nil {
				s.requestClose(websocket.StatusPolicyViolation, "slow consumer: write timed out", false)
				_ = s.conn.CloseNow()
				return
			}
		case <-s.closeCh:
			if s.flush {
				if err := s.drain(false); err != nil {
					_ = s.conn.CloseNow()
					return
				}
			}
			_ = s.conn.Close(s.closeCode, s.closeReason)
			return
		}
	}
}

// drain writes queued frames until the queue is empty or, when stopAtClose
// is set, a close was requested (writeLoop then closes, flushing or not).
func (s *socket) drain(stopAtClose bool) error {
	for {
		if stopAtClose {
			select {
			case <-s.closeCh:
				return nil
			default:
			}
		}
		f, ok := s.out.pop()
		if !ok {
			return nil
		}
		if err := s.write(f); err != nil {
			return err
		}
		// One frame, then the other sockets' goroutines: a writer with a
		// long queue would otherwise keep a CPU for a whole time slice
		// while the acks of other sockets wait to be read, and a client
		// whose ack the server has not read yet looks stalled.
		runtime.Gosched()
	}
}

// write encodes and writes one frame. Once a durable envelope is written
// the session is told (Handed): the wait for its ack is the client's from
// now, not before.
func (s *socket) write(f outFrame) error {
	b := f.raw
	switch {
	case f.env != nil:
		b = s.encodeEnvelope(f.env)
	case f.notice != nil:
		b = s.encodeNotice(f.notice)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.gw.cfg.WriteTimeout)
	defer cancel()
	if err := s.conn.Write(ctx, websocket.MessageText, b); err != nil {
		return err
	}
	if f.env != nil && f.env.DeliveryID > 0 {
		_ = s.gw.ps.Handed(s.sid, f.env.DeliveryID) // fails only once the session is closed: nothing to tell
	}
	return nil
}

func (s *socket) encodeEnvelope(env *echopubsub.Envelope) []byte {
	f := envelopeFrame{Type: "envelope", SessionID: env.SessionID, DeliveryID: env.DeliveryID, Topic: env.Topic,
		Class: "durable", Context: env.Context, PayloadType: env.PayloadType}
	if env.Class == echopubsub.ClassEphemeral {
		f.Class = "ephemeral"
	}
	f.Replayed, f.Cursor = env.Replayed, env.Cursor
	f.Traceparent, f.Tracestate = env.Traceparent, env.Tracestate
	if rc, ok := echopubsub.RequestContextOf(env); ok {
		f.Request = &requestInfo{RequestID: rc.RequestID, From: rc.From, To: rc.To, Reply: rc.Reply}
	}
	switch ev := env.Event.(type) {
	case nil:
		f.PayloadError = "no payload"
	case *messages.Undecodable:
		f.PayloadError, f.PayloadBase64 = "undecodable on this node: "+ev.Error, ev.Payload
	default:
		b, err := protojson.MarshalOptions{Resolver: s.gw.cfg.Resolver}.Marshal(ev)
		if err != nil {
			f.PayloadError = "protojson: " + err.Error()
			f.PayloadBase64, _ = proto.Marshal(ev)
		} else {
			f.Payload = b
		}
	}
	b := mustJSON(f)
	if len(b) > s.gw.cfg.MaxFrameSize {
		f.Payload, f.PayloadBase64 = nil, nil
		f.PayloadError = "frame over MaxFrameSize (" + strconv.Itoa(len(b)) + " bytes)"
		b = mustJSON(f)
	}
	return b
}

func (s *socket) encodeNotice(n interface{}) []byte {
	if g, ok := n.(*echopubsub.StreamGap); ok {
		return mustJSON(noticeFrame{Type: "notice", Kind: "stream_gap", Notice: mustJSON(streamGapJSON{SessionID: g.SessionID,
			Stream: g.Stream, Cursor: g.Cursor, Node: g.Node, Missed: g.Missed, Reason: g.Reason,
			ProducerIncarnation: g.ProducerIncarnation, From: g.From, To: g.To})})
	}
	if tr, ok := n.(*echopubsub.StreamTruncated); ok {
		return mustJSON(noticeFrame{Type: "notice", Kind: "stream_truncated", Notice: mustJSON(streamTruncatedJSON{
			SessionID: tr.SessionID, Stream: tr.Stream, From: tr.From, FirstKept: tr.FirstKept})})
	}
	if c, ok := n.(*echopubsub.CaughtUp); ok {
		return mustJSON(noticeFrame{Type: "notice", Kind: "caught_up", Notice: mustJSON(caughtUpJSON{
			SessionID: c.SessionID, Stream: c.Stream, Cursor: c.Cursor})})
	}
	if st, ok := n.(*echopubsub.SessionStalled); ok {
		return mustJSON(noticeFrame{Type: "notice", Kind: "session_stalled", Notice: mustJSON(sessionStallJSON{
			SessionID: st.SessionID, Pending: st.Pending, QuietMS: st.Quiet.Milliseconds(), Node: st.Node})})
	}
	if r, ok := n.(*echopubsub.SessionResumed); ok {
		return mustJSON(noticeFrame{Type: "notice", Kind: "session_resumed", Notice: mustJSON(sessionStallJSON{
			SessionID: r.SessionID, Pending: r.Pending, QuietMS: r.Quiet.Milliseconds(), Node: r.Node})})
	}
	m, ok := n.(proto.Message)
	if !ok {
		return mustJSON(errorFrame{Type: "error", Code: CodeInternal, Message: fmt.Sprintf("unknown notice %T", n)})
	}
	kind := "notice"
	switch m.(type) {
	case *messages.SessionPressure:
		kind = "session_pressure"
	case *messages.SessionClosed:
		kind = "session_closed"
	case *messages.CursorExpired:
		kind = "cursor_expired"
	case *messages.BackPressure:
		kind = "back_pressure"
	}
	b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
	if err != nil { // the library's own messages always marshal
		b = []byte("{}")
	}
	return mustJSON(noticeFrame{Type: "notice", Kind: kind, Notice: b})
}

// mustJSON marshals the gateway's own frame types, which cannot fail.
func mustJSON(v interface{}) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return []byte(`{"type":"error","code":"internal","message":"frame encoding failed"}`)
	}
	return b
}

// readLoop handles client frames until the socket fails or closes.
// The protocol is one JSON command per text message: a binary message is
// refused (1003) unread, and one over ReadLimit closes with 1009.
func (s *socket) readLoop(ctx context.Context) {
	for {
		typ, r, err := s.conn.Reader(ctx)
		if err != nil {
			return
		}
		if typ != websocket.MessageText {
			s.requestClose(websocket.StatusUnsupportedData, "binary message: send one JSON command per text message", false)
			return
		}
		b, err := io.ReadAll(io.LimitReader(r, s.gw.cfg.ReadLimit+1))
		if err != nil {
			return
		}
		if int64(len(b)) > s.gw.cfg.ReadLimit {
			s.requestClose(websocket.StatusMessageTooBig, "frame over ReadLimit", false)
			return
		}
		s.handle(b)
	}
}

// handle runs one command and queues its answer.
func (s *socket) handle(b []byte) {
	defer func() {
		// A bug behind one command must not take the process down (this
		// goroutine is the HTTP server's): the client gets an internal
		// error, the socket goes on.
		if r := recover(); r != nil {
			s.gw.log.Error().Interface("panic", r).Str("session", s.sid).Msg("gateway: command panicked")
			s.send(outFrame{raw: mustJSON(errorFrame{Type: "error", Code: CodeInternal, Message: "internal error"})})
		}
	}()
	f, ferr := decodeClientFrame(b)
	if ferr == nil {
		ferr = s.run(f)
	}
	if ferr != nil {
		e := errorFrame{Type: "error", Code: ferr.Code, Message: ferr.Message}
		if f != nil {
			e.ID = f.ID
			if _, known := opFields[f.Op]; known {
				e.Op = f.Op
			}
		}
		s.send(outFrame{raw: mustJSON(e)})
	}
}

func (s *socket) result(f *clientFrame, res interface{}) *frameError {
	if res == nil {
		res = struct{}{}
	}
	s.send(outFrame{raw: mustJSON(resultFrame{Type: "result", ID: f.ID, Op: f.Op, Result: res})})
	return nil
}

// run executes a decoded command on the socket's own session.
func (s *socket) run(f *clientFrame) *frameError {
	if f.SessionID != nil && *f.SessionID != s.sid {
		return ferr(CodeForbiddenSession, "a socket acts on its own session only")
	}
	ps := s.gw.ps
	switch f.Op {
	case opSubscribe:
		if err := s.authorize(opSubscribe, f.Topic); err != nil {
			return err
		}
		if !s.subs[f.Topic] && len(s.subs) >= s.gw.cfg.MaxSubscriptions {
			return ferr(CodeTooManySubs, "a socket holds at most %d subscriptions", s.gw.cfg.MaxSubscriptions)
		}
		opts := []echopubsub.SessionSubscribeOption{echopubsub.WithEnvelopeContext(f.context)}
		if f.Class == "ephemeral" {
			opts = append(opts, echopubsub.WithClass(echopubsub.ClassEphemeral))
		}
		if f.from != nil { // absent: live only (or, with consumer, where the consumer resumes)
			opts = append(opts, echopubsub.WithFrom(*f.from))
		}
		if f.Consumer != "" { // the library checks the name (ErrBadConsumerName names it)
			opts = append(opts, echopubsub.WithConsumer(f.Consumer))
		}
		if err := ps.SessionSubscribe(s.sid, f.Topic, opts...); err != nil {
			return libErr(err)
		}
		s.subs[f.Topic] = true
		return s.result(f, nil)
	case opUnsubscribe:
		if err := ps.SessionUnsubscribe(s.sid, f.Topic); err != nil {
			return libErr(err)
		}
		delete(s.subs, f.Topic)
		return s.result(f, nil)
	case opAck:
		pending, err := ps.Ack(s.sid, *f.DeliveryID)
		if errors.Is(err, echopubsub.ErrUnknownDelivery) { // the library's Ack names nothing: it does not allocate
			return ferr(CodeUnknownDelivery, "delivery %d is not held by this session (never issued, already acknowledged, or ephemeral)", *f.DeliveryID)
		}
		if err != nil {
			return libErr(err)
		}
		s.forgetRequests(*f.DeliveryID)
		return s.result(f, map[string]int{"pending": pending})
	case opAckMany:
		res, err := ps.AckMany(s.sid, f.DeliveryIDs)
		if err != nil {
			return libErr(err)
		}
		s.forgetRequests(f.DeliveryIDs...)
		unknown := res.Unknown
		if unknown == nil {
			unknown = []uint64{}
		}
		return s.result(f, map[string]interface{}{"acked": res.Acked, "unknown": unknown, "pending": res.Pending})
	case opReplay:
		return s.replay(f)
	case opRequest:
		if err := s.authorize(opRequest, f.To); err != nil {
			return err
		}
		msg, ferr := s.decodePayload(f)
		if ferr != nil {
			return ferr
		}
		id, err := ps.RequestFromSession(s.sid, f.To, msg)
		if err != nil {
			return libErr(err)
		}
		return s.result(f, map[string]uint64{"request_id": id})
	case opReply:
		s.reqMu.Lock()
		req := s.requests[*f.DeliveryID]
		s.reqMu.Unlock()
		if req == nil {
			return ferr(CodeUnknownDelivery, "delivery %d is not an open request of this session", *f.DeliveryID)
		}
		msg, ferr := s.decodePayload(f)
		if ferr != nil {
			return ferr
		}
		rc, _ := echopubsub.RequestContextOf(req)
		if err := ps.Reply(rc.From, req, msg); err != nil {
			return libErr(err)
		}
		s.forgetRequests(*f.DeliveryID)
		return s.result(f, map[string]uint64{"request_id": rc.RequestID})
	case opPublish:
		if !s.gw.cfg.Publish {
			return ferr(CodePublishDisabled, "this gateway does not accept publish")
		}
		if err := s.authorize(opPublish, f.Topic); err != nil {
			return err
		}
		msg, ferr := s.decodePayload(f)
		if ferr != nil {
			return ferr
		}
		if f.Receipt != nil && *f.Receipt {
			r, err := s.publishReceipt(f.Topic, msg, f.traced)
			if err != nil {
				return libErr(err)
			}
			return s.result(f, map[string]interface{}{"receipt": r})
		}
		if err := s.publish(f.Topic, msg, f.traced); err != nil {
			return libErr(err)
		}
		return s.result(f, nil)
	case opTrack, opUntrack, opPresence:
		return s.presence(f)
	}
	return ferr(CodeUnknownOp, "unknown op %q", clip(f.Op)) // decodeClientFrame refused it already
}

func (s *socket) authorize(op, topic string) *frameError {
	if s.gw.cfg.Authorize == nil {
		return nil
	}
	if err := s.gw.cfg.Authorize(Access{Identity: s.identity, SessionID: s.sid, Op: op, Topic: topic}); err != nil {
		return ferr(CodeUnauthorized, "%s %q: %s", op, clip(topic), clip(err.Error()))
	}
	return nil
}

func (s *socket) forgetRequests(ids ...uint64) {
	s.reqMu.Lock()
	for _, id := range ids {
		delete(s.requests, id)
	}
	s.reqMu.Unlock()
}

// decodePayload turns a frame's type and protojson payload into a message.
func (s *socket) decodePayload(f *clientFrame) (proto.Message, *frameError) {
	mt, err := s.gw.cfg.Resolver.FindMessageByName(protoreflect.FullName(f.Type))
	if err != nil {
		return nil, ferr(CodeUnknownType, "unknown message type %q", clip(f.Type))
	}
	msg := mt.New().Interface()
	if err := (protojson.UnmarshalOptions{Resolver: s.gw.cfg.Resolver}).Unmarshal(f.Payload, msg); err != nil {
		return nil, ferr(CodeInvalidArgument, "payload is not a %s in protojson: %s", f.Type, clip(err.Error()))
	}
	return msg, nil
}

// libErr maps a library error to an error frame.
func libErr(err error) *frameError {
	code := CodeInvalidArgument
	switch {
	case errors.Is(err, echopubsub.ErrUnknownDelivery):
		code = CodeUnknownDelivery
	case errors.Is(err, echopubsub.ErrUnknownSession):
		code = CodeUnknownSession
	case errors.Is(err, echopubsub.ErrTooManyItems):
		code = CodeTooManyItems
	case errors.Is(err, echopubsub.ErrStopped), errors.Is(err, echopubsub.ErrBusy):
		code = CodeUnavailable
	case errors.Is(err, echopubsub.ErrNoStore):
		code = CodeReplayUnavailable
	case errors.Is(err, echopubsub.ErrUnauthorized):
		code = CodeUnauthorized
	case errors.Is(err, echopubsub.ErrCursorBeyondEnd):
		code = CodeCursorBeyondEnd
	case errors.Is(err, echopubsub.ErrConsumerBusy):
		code = CodeConsumerBusy
	case errors.Is(err, echopubsub.ErrConsumerFrom):
		code = CodeConsumerFrom
	case errors.Is(err, echopubsub.ErrNoConsumerStore):
		code = CodeReplayUnavailable
	}
	return ferr(code, "%s", clip(err.Error()))
}

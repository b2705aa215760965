package echopubsub

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/store"
)

// AdminOption configures AdminHandler.
type AdminOption func(*adminOptions)

type adminOptions struct {
	token   string
	mtls    bool
	publish bool
}

// WithAdminToken makes AdminHandler accept requests that carry
// "Authorization: Bearer <token>". Defaults to none.
func WithAdminToken(token string) AdminOption {
	return func(o *adminOptions) { o.token = token }
}

// WithAdminClientCerts makes AdminHandler accept requests over TLS whose
// client certificate the server verified (mTLS: the http.Server's TLS
// configuration trusts a client CA and verifies the certificates clients
// present). Defaults to off.
func WithAdminClientCerts() AdminOption {
	return func(o *adminOptions) { o.mtls = true }
}

// WithAdminPublish enables POST publish. Defaults to off: the endpoint is
// read-only.
func WithAdminPublish() AdminOption {
	return func(o *adminOptions) { o.publish = true }
}

// adminTailIdentity is the identity of the sessions a tail opens (they are
// listed by sessions like any other).
const adminTailIdentity = "echopubsub-admin-tail"

// AdminHandler serves a node's inside to operators: the command
// echopubsub's peers, streams, sessions, tail, replay and publish talk to
// it (docs/server.md, "Admin endpoint"). Any application can mount it, as
// it would net/http/pprof:
//
//	mux.Handle("/admin/", http.StripPrefix("/admin", echopubsub.AdminHandler(ps, echopubsub.WithAdminToken(tok))))
//
// Routes (answers are JSON; tail and replay are JSON lines, one object a
// line, flushed as they come):
//
//	GET  /peers                         Health: each peer's lag, registration, last ack
//	GET  /streams                       the store's streams (StreamLister) and the retention
//	GET  /sessions                      this node's sessions: identity, pending, stalled, quiet
//	GET  /tail?topic=T[&from=N][&count=N]   live messages and every notice (a session)
//	GET  /replay?stream=S&from=N[&to=M] the stored rows, gaps and truncation
//	POST /publish?topic=T[&type=NAME]   body: the message in protojson (default type google.protobuf.StringValue)
//
// Every request must be authenticated: a bearer token (WithAdminToken) or
// a verified client certificate (WithAdminClientCerts); with neither
// option every request is refused (401). Publishing is refused (403)
// unless WithAdminPublish.
func AdminHandler(ps *PubSub, opts ...AdminOption) http.Handler {
	a := &admin{ps: ps}
	for _, o := range opts {
		o(&a.o)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /peers", a.peers)
	mux.HandleFunc("GET /streams", a.streams)
	mux.HandleFunc("GET /sessions", a.sessions)
	mux.HandleFunc("GET /tail", a.tail)
	mux.HandleFunc("GET /replay", a.replay)
	mux.HandleFunc("POST /publish", a.publishHandler)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := a.authenticate(r); err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="echopubsub admin"`)
			adminError(w, http.StatusUnauthorized, err)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

type admin struct {
	ps *PubSub
	o  adminOptions
}

// authenticate accepts a verified client certificate or the bearer token.
func (a *admin) authenticate(r *http.Request) error {
	if a.o.mtls && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		return nil
	}
	if a.o.token == "" {
		if a.o.mtls {
			return errors.New("echopubsub admin: no verified client certificate")
		}
		return errors.New("echopubsub admin: no authentication configured (WithAdminToken or WithAdminClientCerts)")
	}
	h := r.Header.Get("Authorization")
	if len(h) < 7 || !strings.EqualFold(h[:7], "bearer ") {
		return errors.New("echopubsub admin: missing bearer token")
	}
	if subtle.ConstantTimeCompare([]byte(strings.TrimSpace(h[7:])), []byte(a.o.token)) != 1 {
		return errors.New("echopubsub admin: wrong bearer token")
	}
	return nil
}

func adminJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

func adminError(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}

func (a *admin) peers(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), a.ps.cfg.CallTimeout+time.Second)
	defer cancel()
	adminJSON(w, a.ps.Health(ctx))
}

// AdminRetention is Retention as the admin endpoint reports it.
type AdminRetention struct {
	MaxAge   time.Duration `json:"max_age_ns"`
	MaxRows  uint64        `json:"max_rows"`
	MaxBytes uint64        `json:"max_bytes"`
	Text     string        `json:"text"` // Retention.String
}

// AdminStreams is the answer of GET streams.
type AdminStreams struct {
	Node      string         `json:"node"`
	Store     string         `json:"store"` // the store's Go type; "" without one
	Shared    bool           `json:"shared"`
	Retention AdminRetention `json:"retention"`
	Streams   []StreamInfo   `json:"streams"`
}

func (a *admin) streams(w http.ResponseWriter, r *http.Request) {
	out := AdminStreams{Node: a.ps.rt.Node, Streams: []StreamInfo{}}
	st := a.store()
	if st == nil {
		adminJSON(w, out)
		return
	}
	ret := a.ps.dur.Retention
	out.Store, out.Shared = fmt.Sprintf("%T", st), st.Shared()
	out.Retention = AdminRetention{MaxAge: ret.MaxAge, MaxRows: ret.MaxRows, MaxBytes: ret.MaxBytes, Text: ret.String()}
	lister, ok := st.(StreamLister)
	if !ok {
		adminError(w, http.StatusNotImplemented, fmt.Errorf("echopubsub admin: store %T does not list its streams (StreamLister)", st))
		return
	}
	list, err := lister.Streams(r.Context())
	if err != nil {
		adminError(w, http.StatusInternalServerError, err)
		return
	}
	if list != nil {
		out.Streams = list
	}
	adminJSON(w, out)
}

func (a *admin) store() Store {
	if a.ps.dur == nil {
		return nil
	}
	return a.ps.dur.Store
}

// AdminSession is one session of GET sessions.
type AdminSession struct {
	ID       string `json:"id"`
	Identity string `json:"identity"`
	Pending  int    `json:"pending"`
	Stalled  bool   `json:"stalled"`
	// Quiet is how long the session has held deliveries without an ack
	// (SessionStats.Quiet; 0: it holds none).
	Quiet time.Duration `json:"quiet_ns"`
	// Waiting: a durable delivery waits for room (SessionStats.Waiting).
	Waiting bool `json:"waiting"`
}

func (a *admin) sessions(w http.ResponseWriter, _ *http.Request) {
	out := struct {
		Node     string         `json:"node"`
		Sessions []AdminSession `json:"sessions"`
	}{Node: a.ps.rt.Node, Sessions: []AdminSession{}}
	for _, id := range a.ps.sess.engine.IDs() {
		st, err := a.ps.SessionStats(id)
		if err != nil {
			continue // closed since IDs
		}
		identity, _ := a.ps.SessionIdentity(id)
		out.Sessions = append(out.Sessions, AdminSession{ID: id, Identity: identity, Pending: st.Pending, Stalled: st.Stalled, Quiet: st.Quiet, Waiting: st.Waiting})
	}
	adminJSON(w, out)
}

// AdminLine is one line of tail and replay. Kind says which fields are set:
// "subscribed" (tail: the subscription is in place, Topic), "replay"
// (replay's first line: Stream, From, To, Last), "message" (tail) and
// "row" (replay): Topic or Stream, Cursor, Type, Payload (protojson;
// PayloadBase64 when this node cannot decode it), Time and Origin for a
// row; "gap" (replay: a stored gap row: Missed, Reason, Origin); "notice":
// Type and Notice (what the session was told: CursorExpired, BackPressure,
// StreamGap, StreamTruncated, SessionStalled ... as JSON).
type AdminLine struct {
	Kind          string          `json:"kind"`
	Topic         string          `json:"topic,omitempty"`
	Stream        string          `json:"stream,omitempty"`
	Cursor        uint64          `json:"cursor,omitempty"`
	Replayed      bool            `json:"replayed,omitempty"`
	Type          string          `json:"type,omitempty"`
	Payload       json.RawMessage `json:"payload,omitempty"`
	PayloadBase64 string          `json:"payload_base64,omitempty"`
	Notice        json.RawMessage `json:"notice,omitempty"`
	Time          *time.Time      `json:"time,omitempty"`
	Origin        string          `json:"origin,omitempty"`
	Missed        uint64          `json:"missed,omitempty"`
	Reason        string          `json:"reason,omitempty"`
	From          uint64          `json:"from,omitempty"`
	To            uint64          `json:"to,omitempty"`
	Last          uint64          `json:"last,omitempty"`
}

// lines writes JSON lines, flushing each.
type lines struct {
	w   http.ResponseWriter
	enc *json.Encoder
	rc  *http.ResponseController
}

func newLines(w http.ResponseWriter) *lines {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	return &lines{w: w, enc: json.NewEncoder(w), rc: http.NewResponseController(w)}
}

func (l *lines) write(line AdminLine) error {
	if err := l.enc.Encode(line); err != nil {
		return err
	}
	return l.rc.Flush()
}

func queryUint(r *http.Request, name string) (uint64, bool, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return 0, false, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("echopubsub admin: %s %q is not a cursor (an unsigned integer)", name, s)
	}
	return n, true, nil
}

// tailOwner is the owner actor of a tail's session: it hands every
// message to the request's goroutine, waiting while that one writes (the
// session's own limits bound what waits: HardQueue, the slow-consumer rule).
type tailOwner struct {
	out  chan<- any
	done <-chan struct{}
}

func (t *tailOwner) Receive(c actor.Context) {
	switch c.Message().(type) {
	case *actor.Started, *actor.Stopping, *actor.Stopped, *actor.Restarting:
		return
	}
	select {
	case t.out <- c.Message():
	case <-t.done:
	}
}

func (a *admin) tail(w http.ResponseWriter, r *http.Request) {
	topic := r.URL.Query().Get("topic")
	if topic == "" {
		adminError(w, http.StatusBadRequest, errors.New("echopubsub admin: tail needs topic"))
		return
	}
	from, hasFrom, err := queryUint(r, "from")
	if err == nil && hasFrom && from == 0 {
		err = errors.New(`echopubsub admin: from "0": cursors start at 1`)
	}
	count, _, err2 := queryUint(r, "count")
	if err = errors.Join(err, err2); err != nil {
		adminError(w, http.StatusBadRequest, err)
		return
	}
	ctx := r.Context()
	msgs := make(chan any, 64)
	system := a.ps.rt.System
	pid := system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &tailOwner{out: msgs, done: ctx.Done()} }))
	defer system.Root.Stop(pid)
	sess, err := a.ps.OpenSession(pid, WithIdentity(adminTailIdentity))
	if err != nil {
		adminError(w, http.StatusServiceUnavailable, err)
		return
	}
	defer func() { _ = a.ps.CloseSession(sess.ID()) }()
	var subOpts []SessionSubscribeOption
	if hasFrom {
		subOpts = append(subOpts, WithFrom(from))
	}
	if err := a.ps.SessionSubscribe(sess.ID(), topic, subOpts...); err != nil {
		adminError(w, http.StatusBadRequest, fmt.Errorf("echopubsub admin: tail %q: %w", topic, err))
		return
	}
	out := newLines(w)
	if out.write(AdminLine{Kind: "subscribed", Topic: topic, From: from}) != nil {
		return
	}
	var n uint64
	for count == 0 || n < count {
		var m any
		select {
		case <-ctx.Done():
			return
		case <-a.ps.Done():
			return
		case m = <-msgs:
		}
		line, isMsg := tailLine(m)
		if out.write(line) != nil {
			return
		}
		if env, ok := m.(*Envelope); ok && env.DeliveryID != 0 {
			if _, err := a.ps.Ack(sess.ID(), env.DeliveryID); err != nil {
				return
			}
		}
		if isMsg {
			n++
		}
		if _, closed := m.(*messages.SessionClosed); closed {
			return
		}
	}
}

// tailLine renders what a tail's session owner received.
func tailLine(m any) (AdminLine, bool) {
	if env, ok := m.(*Envelope); ok {
		line := AdminLine{Kind: "message", Topic: env.Topic, Cursor: env.Cursor, Replayed: env.Replayed, Type: env.PayloadType}
		if env.Event != nil {
			line.Payload = protoJSON(env.Event)
		}
		return line, true
	}
	line := AdminLine{Kind: "notice", Type: strings.TrimPrefix(fmt.Sprintf("%T", m), "*")}
	if pm, ok := m.(proto.Message); ok {
		line.Type = string(pm.ProtoReflect().Descriptor().FullName())
		line.Notice = protoJSON(pm)
	} else if b, err := json.Marshal(m); err == nil {
		line.Notice = b
	}
	return line, false
}

func protoJSON(m proto.Message) json.RawMessage {
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return nil
	}
	return b
}

// decodeRow renders a stored payload: protojson when this binary knows
// its type, else base64.
func decodeRow(line *AdminLine, typ string, payload []byte) {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(typ))
	if err == nil {
		m := mt.New().Interface()
		if proto.Unmarshal(payload, m) == nil {
			if b := protoJSON(m); b != nil {
				line.Payload = b
				return
			}
		}
	}
	line.PayloadBase64 = base64.StdEncoding.EncodeToString(payload)
}

// replayPage is how many rows replay reads at a time.
const replayPage = 256

func (a *admin) replay(w http.ResponseWriter, r *http.Request) {
	stream := r.URL.Query().Get("stream")
	from, _, err := queryUint(r, "from")
	to, hasTo, err2 := queryUint(r, "to")
	if err = errors.Join(err, err2); err == nil && stream == "" {
		err = errors.New("echopubsub admin: replay needs stream")
	}
	if err == nil && hasTo && to < max(from, 1) {
		err = fmt.Errorf("echopubsub admin: to %d is below from %d", to, from)
	}
	if err != nil {
		adminError(w, http.StatusBadRequest, err)
		return
	}
	st := a.store()
	if st == nil {
		adminError(w, http.StatusNotFound, errors.New("echopubsub admin: this node has no store"))
		return
	}
	ctx := r.Context()
	from = max(from, 1)
	recs, next, err := st.Read(ctx, stream, from, replayPage)
	if err != nil {
		adminError(w, http.StatusBadRequest, fmt.Errorf("echopubsub admin: replay %q from %d: %w", stream, from, err))
		return
	}
	head := AdminLine{Kind: "replay", Stream: stream, From: from, To: to}
	if l, ok := st.(StreamLister); ok {
		if infos, err := l.Streams(ctx); err == nil {
			for _, info := range infos {
				if info.Stream == stream {
					head.Last = info.Last
				}
			}
		}
	}
	out := newLines(w)
	if out.write(head) != nil {
		return
	}
	want := from // the next cursor owed
	for {
		if first, truncated := store.Truncation(want, recs, next); truncated {
			// Rows below were removed (retention): never a silent gap.
			b, _ := json.Marshal(StreamTruncated{Stream: stream, From: want, FirstKept: first})
			if out.write(AdminLine{Kind: "notice", Type: "echopubsub.StreamTruncated", Stream: stream, Notice: b}) != nil {
				return
			}
		}
		for _, rec := range recs {
			if hasTo && rec.Cursor > to {
				return
			}
			if out.write(rowLine(rec)) != nil {
				return
			}
		}
		if len(recs) == 0 || hasTo && next > to {
			return
		}
		want = next
		if recs, next, err = st.Read(ctx, stream, next, replayPage); err != nil {
			_ = out.write(AdminLine{Kind: "error", Reason: err.Error()})
			return
		}
	}
}

func rowLine(rec Record) AdminLine {
	line := AdminLine{Kind: "row", Stream: rec.Stream, Cursor: rec.Cursor, Origin: rec.Origin}
	if !rec.Time.IsZero() {
		t := rec.Time
		line.Time = &t
	}
	if rec.Kind == RecordGap {
		line.Kind, line.Missed, line.Reason = "gap", rec.Missed, rec.Reason
		return line
	}
	line.Type = rec.PayloadType
	decodeRow(&line, rec.PayloadType, rec.Payload)
	return line
}

// maxPublishBody bounds a publish request's body.
const maxPublishBody = 1 << 20

func (a *admin) publishHandler(w http.ResponseWriter, r *http.Request) {
	if !a.o.publish {
		adminError(w, http.StatusForbidden, errors.New("echopubsub admin: publishing is not enabled on this node (WithAdminPublish)"))
		return
	}
	topic := r.URL.Query().Get("topic")
	typ := r.URL.Query().Get("type")
	if typ == "" {
		typ = string((&wrapperspb.StringValue{}).ProtoReflect().Descriptor().FullName())
	}
	if topic == "" {
		adminError(w, http.StatusBadRequest, errors.New("echopubsub admin: publish needs topic"))
		return
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(typ))
	if err != nil {
		adminError(w, http.StatusBadRequest, fmt.Errorf("echopubsub admin: type %q is not linked into this node: %w", typ, err))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxPublishBody+1))
	if err == nil && len(body) > maxPublishBody {
		err = fmt.Errorf("body over %d bytes", maxPublishBody)
	}
	m := mt.New().Interface()
	if err == nil {
		err = protojson.Unmarshal(body, m)
	}
	if err != nil {
		adminError(w, http.StatusBadRequest, fmt.Errorf("echopubsub admin: publish %q as %s: %w", topic, typ, err))
		return
	}
	if err := a.ps.BroadcastContext(r.Context(), nil, topic, m); err != nil {
		adminError(w, http.StatusServiceUnavailable, fmt.Errorf("echopubsub admin: publish %q: %w", topic, err))
		return
	}
	adminJSON(w, map[string]string{"topic": topic, "type": typ})
}

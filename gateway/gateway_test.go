package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/gateway"
	"github.com/echopubsub/echopubsub/test"
)

// The gateway tests use it as an application does: an httptest server
// serving the Gateway, and coder/websocket clients speaking JSON frames.

// serveGateway serves a gateway of nd's pubsub; closed (sockets first) when
// the test ends, before the node stops.
func serveGateway(t *testing.T, nd *test.Node, auth func(*http.Request) (string, error), cfg gateway.Config) (*gateway.Gateway, string) {
	t.Helper()
	if auth == nil {
		auth = gateway.AnyIdentity
	}
	gw, err := gateway.New(nd.PS, auth, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := gw.Close(ctx); err != nil {
			t.Errorf("gateway close: %v", err)
		}
		srv.Close()
	})
	return gw, "ws" + strings.TrimPrefix(srv.URL, "http")
}

// frame is a server frame as a client sees it.
type frame map[string]interface{}

func (f frame) str(k string) string { s, _ := f[k].(string); return s }
func (f frame) num(k string) uint64 { n, _ := f[k].(float64); return uint64(n) }
func (f frame) obj(k string) frame  { m, _ := f[k].(map[string]interface{}); return frame(m) }

type wsClient struct {
	t    *testing.T
	conn *websocket.Conn
	sid  string
	// hello is the first frame.
	hello frame
}

func dialGateway(t *testing.T, url string) *wsClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	conn.SetReadLimit(4 << 20)
	t.Cleanup(func() { _ = conn.CloseNow() })
	c := &wsClient{t: t, conn: conn}
	c.hello = c.next()
	if c.hello.str("type") != "hello" || c.hello.str("session_id") == "" {
		t.Fatalf("first frame %v, want hello with a session id", c.hello)
	}
	c.sid = c.hello.str("session_id")
	return c
}

func (c *wsClient) sendRaw(b string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.conn.Write(ctx, websocket.MessageText, []byte(b)); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *wsClient) send(cmd map[string]interface{}) {
	c.t.Helper()
	b, err := json.Marshal(cmd)
	if err != nil {
		c.t.Fatal(err)
	}
	c.sendRaw(string(b))
}

// read returns the next frame, or the read error (within 10 s).
func (c *wsClient) read() (frame, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, b, err := c.conn.Read(ctx)
	if err != nil {
		return nil, err
	}
	var f frame
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("server frame is not JSON: %q", b)
	}
	return f, nil
}

func (c *wsClient) next() frame {
	c.t.Helper()
	f, err := c.read()
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return f
}

// answer sends cmd (with id) and returns the result or error frame that
// answers it; envelopes and notices read meanwhile are returned too.
func (c *wsClient) answer(cmd map[string]interface{}) (frame, []frame) {
	c.t.Helper()
	id := fmt.Sprintf("c%d", time.Now().UnixNano())
	cmd["id"] = id
	c.send(cmd)
	var others []frame
	for {
		f := c.next()
		if (f.str("type") == "result" || f.str("type") == "error") && f.str("id") == id {
			return f, others
		}
		others = append(others, f)
	}
}

func (c *wsClient) ok(cmd map[string]interface{}) frame {
	c.t.Helper()
	f, _ := c.answer(cmd)
	if f.str("type") != "result" {
		c.t.Fatalf("%v answered %v", cmd, f)
	}
	return f.obj("result")
}

func (c *wsClient) refused(cmd map[string]interface{}, code string) frame {
	c.t.Helper()
	f, _ := c.answer(cmd)
	if f.str("type") != "error" || f.str("code") != code {
		c.t.Fatalf("%v answered %v, want error %s", cmd, f, code)
	}
	return f
}

// envelope reads until the next envelope (notices before it are skipped).
func (c *wsClient) envelope() frame {
	c.t.Helper()
	for {
		f := c.next()
		if f.str("type") == "envelope" {
			return f
		}
	}
}

func stampPayload(f frame) (publisher string, seq string) {
	p := f.obj("payload")
	return p.str("publisher"), p.str("seq")
}

func gatewayConfig(t *testing.T) echopubsub.Config {
	t.Helper()
	return sessionConfig(20, 100)
}

func smallGatewayConfig() gateway.Config {
	c := gateway.DefaultConfig()
	c.OutboundQueue = 512
	c.CloseTimeout = 5 * time.Second
	return c
}

// Every command on one socket: subscribe (durable, ephemeral, with
// context), envelopes in protojson, ack, ack_many, unsubscribe, and the
// refusals of each.
func TestGatewayCommands(t *testing.T) {
	nodes := test.StartCluster(t, 1, gatewayConfig(t))
	nd := nodes[0]
	_, url := serveGateway(t, nd, nil, smallGatewayConfig())
	c := dialGateway(t, url)
	if c.hello.str("node") != nd.Addr || c.hello.str("identity") != "anonymous" {
		t.Fatalf("hello %v", c.hello)
	}
	if id, ok := nd.PS.SessionIdentity(c.sid); !ok || id != "anonymous" {
		t.Fatalf("SessionIdentity = %q %v", id, ok)
	}

	c.ok(map[string]interface{}{"op": "subscribe", "topic": "room", "context": map[string]string{"room": "7"}})
	c.ok(map[string]interface{}{"op": "subscribe", "topic": "eph", "class": "ephemeral"})
	nd.Broadcast(t, "room", stamp(1))
	nd.Broadcast(t, "room", stamp(2))
	nd.Broadcast(t, "eph", stamp(3))
	for i, want := range []struct {
		id    uint64
		class string
		seq   string
	}{{1, "durable", "1"}, {2, "durable", "2"}, {0, "ephemeral", "3"}} {
		e := c.envelope()
		_, seq := stampPayload(e)
		if e.num("delivery_id") != want.id || e.str("class") != want.class || seq != want.seq ||
			e.str("session_id") != c.sid || e.str("payload_type") != "echopubsub.test.v1.Stamp" {
			t.Fatalf("envelope %d: %v, want %+v", i, e, want)
		}
		if i < 2 && (e.str("topic") != "room" || e.obj("context").str("room") != "7") {
			t.Fatalf("envelope %d topic/context: %v", i, e)
		}
	}
	if p := nd.PS.Pending(c.sid); p != 2 {
		t.Fatalf("pending %d, want 2 (the ephemeral one takes no reservation)", p)
	}
	if r := c.ok(map[string]interface{}{"op": "ack", "delivery_id": 1}); r.num("pending") != 1 {
		t.Fatalf("ack result %v", r)
	}
	if f := c.refused(map[string]interface{}{"op": "ack", "delivery_id": 1}, gateway.CodeUnknownDelivery); !strings.Contains(f.str("message"), "delivery 1 is not held by this session") {
		t.Fatalf("a second ack of delivery 1: %v, want the message to name the delivery", f)
	}
	r := c.ok(map[string]interface{}{"op": "ack_many", "delivery_ids": []uint64{2, 99}})
	if r.num("acked") != 1 || r.num("pending") != 0 || fmt.Sprint(r["unknown"]) != "[99]" {
		t.Fatalf("ack_many result %v", r)
	}
	c.refused(map[string]interface{}{"op": "ack_many", "delivery_ids": make([]uint64, 1001)}, gateway.CodeTooManyItems)

	// Unsubscribed: the next "room" broadcast is not delivered; the "eph"
	// one after it (same producer, so in order after it) is.
	c.ok(map[string]interface{}{"op": "unsubscribe", "topic": "room"})
	nd.Broadcast(t, "room", stamp(4))
	nd.Broadcast(t, "eph", stamp(5))
	if e := c.envelope(); e.str("topic") != "eph" {
		t.Fatalf("after unsubscribe got %v", e)
	}
	c.ok(map[string]interface{}{"op": "unsubscribe", "topic": "never-subscribed"})

	c.refused(map[string]interface{}{"op": "subscribe", "topic": echopubsub.SessionInboxPrefix + c.sid}, gateway.CodeInvalidArgument)
	c.refused(map[string]interface{}{"op": "publish", "topic": "room", "type": "echopubsub.test.v1.Stamp", "payload": map[string]string{}},
		gateway.CodePublishDisabled)
	c.refused(map[string]interface{}{"op": "replay", "stream": "room", "limit": 10}, gateway.CodeReplayUnavailable)
	if p := nd.PS.Pending(c.sid); p != 0 {
		t.Fatalf("pending %d after the refusals", p)
	}
}

// Publish (when enabled) broadcasts the client's protojson message, after
// Authorize; a refused one is an "unauthorized" error frame.
func TestGatewayPublishAndAuthorize(t *testing.T) {
	nodes := test.StartCluster(t, 1, gatewayConfig(t))
	nd := nodes[0]
	cfg := smallGatewayConfig()
	cfg.Publish = true
	cfg.Authorize = func(a gateway.Access) error {
		if strings.HasPrefix(a.Topic, "secret") {
			return fmt.Errorf("%s may not %s %s", a.Identity, a.Op, a.Topic)
		}
		return nil
	}
	_, url := serveGateway(t, nd, func(r *http.Request) (string, error) { return r.URL.Query().Get("user"), nil }, cfg)
	c := dialGateway(t, url+"?user=ada")
	c.ok(map[string]interface{}{"op": "subscribe", "topic": "room"})
	f := c.refused(map[string]interface{}{"op": "subscribe", "topic": "secret"}, gateway.CodeUnauthorized)
	if !strings.Contains(f.str("message"), "ada may not subscribe secret") {
		t.Fatalf("refusal %v", f)
	}
	c.refused(map[string]interface{}{"op": "publish", "topic": "secret", "type": "echopubsub.test.v1.Stamp",
		"payload": map[string]string{"seq": "1"}}, gateway.CodeUnauthorized)
	c.refused(map[string]interface{}{"op": "publish", "topic": "room", "type": "no.such.Type", "payload": map[string]string{}},
		gateway.CodeUnknownType)
	c.refused(map[string]interface{}{"op": "publish", "topic": "room", "type": "echopubsub.test.v1.Stamp",
		"payload": map[string]string{"seq": "not a number"}}, gateway.CodeInvalidArgument)
	c.ok(map[string]interface{}{"op": "publish", "topic": "room", "type": "echopubsub.test.v1.Stamp",
		"payload": map[string]string{"publisher": "ada", "seq": "42"}})
	if pub, seq := stampPayload(c.envelope()); pub != "ada" || seq != "42" {
		t.Fatalf("published stamp came back as %s/%s", pub, seq)
	}
}

// The authentication hook refuses before the upgrade: 401, or 403 for an
// error wrapping ErrForbidden; no session is opened.
func TestGatewayAuthentication(t *testing.T) {
	nodes := test.StartCluster(t, 1, gatewayConfig(t))
	gw, url := serveGateway(t, nodes[0], func(r *http.Request) (string, error) {
		switch r.URL.Query().Get("token") {
		case "good":
			return "ada", nil
		case "banned":
			return "", fmt.Errorf("banned: %w", gateway.ErrForbidden)
		}
		return "", errors.New("no token")
	}, smallGatewayConfig())
	for token, want := range map[string]int{"": http.StatusUnauthorized, "banned": http.StatusForbidden} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, resp, err := websocket.Dial(ctx, url+"?token="+token, nil)
		cancel()
		if err == nil || resp == nil || resp.StatusCode != want {
			t.Fatalf("token %q: err %v, response %v, want HTTP %d", token, err, resp, want)
		}
	}
	if n := gw.Sockets(); n != 0 {
		t.Fatalf("%d sockets after refusals", n)
	}
	c := dialGateway(t, url+"?token=good")
	if c.hello.str("identity") != "ada" {
		t.Fatalf("hello %v", c.hello)
	}
}

// A client can never act on another session: a frame naming one (even a
// real one, on the same node) is refused and changes nothing, for either
// session.
func TestGatewayRefusesOtherSession(t *testing.T) {
	nodes := test.StartCluster(t, 1, gatewayConfig(t))
	nd := nodes[0]
	_, url := serveGateway(t, nd, nil, smallGatewayConfig())
	a, b := dialGateway(t, url), dialGateway(t, url)
	a.ok(map[string]interface{}{"op": "subscribe", "topic": "room"})
	b.ok(map[string]interface{}{"op": "subscribe", "topic": "room"})
	nd.Broadcast(t, "room", stamp(1))
	a.envelope()
	b.envelope()
	for _, cmd := range []map[string]interface{}{
		{"op": "ack", "delivery_id": 1, "session_id": b.sid},
		{"op": "ack_many", "delivery_ids": []uint64{1}, "session_id": b.sid},
		{"op": "subscribe", "topic": "other", "session_id": b.sid},
		{"op": "unsubscribe", "topic": "room", "session_id": b.sid},
		{"op": "replay", "stream": "room", "session_id": b.sid},
		{"op": "ack", "delivery_id": 1, "session_id": "bm9kZQ.AAAAAAAAAAAAAAAAAAAAAA"},
	} {
		a.refused(cmd, gateway.CodeForbiddenSession)
	}
	// A request cannot name its sender: from (a cursor, of subscribe and
	// replay) is a field request does not take.
	if f := a.refused(map[string]interface{}{"op": "request", "to": b.sid, "from": b.sid, "type": "echopubsub.test.v1.Stamp",
		"payload": map[string]string{}}, gateway.CodeInvalidArgument); f.str("message") != "op request takes no from" {
		t.Fatalf("a request naming its sender was refused with %v", f)
	}
	if pa, pb := nd.PS.Pending(a.sid), nd.PS.Pending(b.sid); pa != 1 || pb != 1 {
		t.Fatalf("pending a=%d b=%d after refused frames, want 1 and 1", pa, pb)
	}
	// Naming its own session is allowed.
	if r := a.ok(map[string]interface{}{"op": "ack", "delivery_id": 1, "session_id": a.sid}); r.num("pending") != 0 {
		t.Fatalf("own ack %v", r)
	}
	// Both sockets still receive.
	nd.Broadcast(t, "room", stamp(2))
	if e := b.envelope(); e.num("delivery_id") != 2 {
		t.Fatalf("b got %v", e)
	}
	if e := a.envelope(); e.num("delivery_id") != 2 {
		t.Fatalf("a got %v", e)
	}
}

// Malformed frames and unknown commands get an error frame each; the
// socket and the node go on.
func TestGatewayMalformedFrames(t *testing.T) {
	nodes := test.StartCluster(t, 1, gatewayConfig(t))
	nd := nodes[0]
	_, url := serveGateway(t, nd, nil, smallGatewayConfig())
	c := dialGateway(t, url)
	for raw, code := range map[string]string{
		``:                                gateway.CodeMalformedFrame,
		`null`:                            gateway.CodeMalformedFrame,
		`[1,2]`:                           gateway.CodeMalformedFrame,
		`{"op":"ack"`:                     gateway.CodeMalformedFrame,
		`{"op":"ack","delivery_id":1} {}`: gateway.CodeMalformedFrame,
		`{"op":"ack","delivery_id":-1}`:   gateway.CodeMalformedFrame,
		`{"op":"ack","delivery_id":1.5}`:  gateway.CodeMalformedFrame,
		`{"op":"ack","delivery_id":"1"}`:  gateway.CodeMalformedFrame,
		`{"op":"ack","bogus":1}`:          gateway.CodeMalformedFrame,
		"{\"op\":\"ack\xff\"}":            gateway.CodeMalformedFrame,
		`{}`:                              gateway.CodeMalformedFrame,
		`{"op":"teleport"}`:               gateway.CodeUnknownOp,
		`{"op":"ack"}`:                    gateway.CodeInvalidArgument,
		`{"op":"ack","delivery_id":0}`:    gateway.CodeInvalidArgument,
		`{"op":"ack","delivery_id":1,"topic":"x"}`:                                             gateway.CodeInvalidArgument,
		`{"op":"subscribe","topic":"x","class":"forever"}`:                                     gateway.CodeInvalidArgument,
		`{"op":"subscribe","topic":"x","context":{"a":1}}`:                                     gateway.CodeInvalidArgument,
		`{"op":"replay","stream":"x","limit":0}`:                                               gateway.CodeInvalidArgument,
		`{"op":"subscribe","topic":"x","from":-1}`:                                             gateway.CodeInvalidArgument,
		`{"op":"subscribe","topic":"x","from":"7"}`:                                            gateway.CodeInvalidArgument,
		`{"op":"subscribe","topic":"x","class":"ephemeral","from":0}`:                          gateway.CodeInvalidArgument,
		`{"op":"request","to":"x","type":"echopubsub.test.v1.Stamp","payload":[]}`:             gateway.CodeInvalidArgument,
		`{"op":"reply","delivery_id":5,"type":"echopubsub.test.v1.Stamp","payload":{}}`:        gateway.CodeUnknownDelivery,
		`{"op":"request","to":"not-a-session","type":"echopubsub.test.v1.Stamp","payload":{}}`: gateway.CodeUnknownSession,
	} {
		c.sendRaw(raw)
		f := c.next()
		if f.str("type") != "error" || f.str("code") != code || f.str("message") == "" {
			t.Fatalf("frame %q answered %v, want error %s", raw, f, code)
		}
	}
	c.sendRaw(`{"op":"subscribe","topic":"` + strings.Repeat("x", 2000) + `"}`)
	if f := c.next(); f.str("code") != gateway.CodeInvalidArgument {
		t.Fatalf("long topic answered %v", f)
	}
	c.ok(map[string]interface{}{"op": "subscribe", "topic": "room"})
	nd.Broadcast(t, "room", stamp(1))
	if e := c.envelope(); e.num("delivery_id") != 1 {
		t.Fatalf("after bad frames: %v", e)
	}
	if err := nd.PS.Err(); err != nil {
		t.Fatal(err)
	}
}

// A frame over ReadLimit closes the socket with 1009; the node goes on.
func TestGatewayReadLimit(t *testing.T) {
	nodes := test.StartCluster(t, 1, gatewayConfig(t))
	cfg := smallGatewayConfig()
	cfg.ReadLimit = 1024
	gw, url := serveGateway(t, nodes[0], nil, cfg)
	c := dialGateway(t, url)
	c.sendRaw(`{"op":"subscribe","topic":"` + strings.Repeat("x", 2000) + `"}`)
	_, err := c.read()
	if websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Fatalf("read after an oversized frame: %v, want close 1009", err)
	}
	test.Eventually(t, 10*time.Second, func() bool { return gw.Sockets() == 0 }, test.Sprintf("socket still open"))
	if _, ok := nodes[0].PS.SessionIdentity(c.sid); ok {
		t.Fatal("the socket's session is still open")
	}
}

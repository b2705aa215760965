package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	// The payload types this test publishes, linked into the test binary
	// (the gateway resolves types from the program's registry).
	_ "google.golang.org/protobuf/types/known/durationpb"
	_ "google.golang.org/protobuf/types/known/structpb"
	_ "google.golang.org/protobuf/types/known/timestamppb"
	_ "google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/gateway"
	"github.com/echopubsub/echopubsub/test"
)

// closedWith reads until the socket fails and returns its close frame; a
// frame that answers a command before it fails the test.
func closedWith(t *testing.T, c *wsClient) websocket.CloseError {
	t.Helper()
	for {
		f, err := c.read()
		if err == nil {
			if f.str("type") == "result" || f.str("type") == "error" {
				t.Fatalf("a command was answered before the socket closed: %v", f)
			}
			continue
		}
		var ce websocket.CloseError
		if !asCloseError(err, &ce) {
			t.Fatalf("socket failed without a close frame: %v", err)
		}
		return ce
	}
}

// A binary message is refused unread, even one holding a valid command:
// the protocol is one JSON object per text message (close 1003).
func TestGatewayRefusesBinaryMessages(t *testing.T) {
	nodes := test.StartCluster(t, 1, gatewayConfig(t))
	_, url := serveGateway(t, nodes[0], nil, smallGatewayConfig())
	c := dialGateway(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.conn.Write(ctx, websocket.MessageBinary, []byte(`{"op":"subscribe","topic":"room","id":"b1"}`)); err != nil {
		t.Fatal(err)
	}
	ce := closedWith(t, c)
	if ce.Code != websocket.StatusUnsupportedData || !strings.Contains(ce.Reason, "text message") {
		t.Fatalf("after a binary message: close %d %q, want 1003 saying why", ce.Code, ce.Reason)
	}
	test.Eventually(t, 10*time.Second, func() bool { _, open := nodes[0].PS.SessionIdentity(c.sid); return !open },
		test.Sprintf("the socket's session is still open"))
}

// A frame over ReadLimit closes with 1009 and the documented reason.
func TestGatewayReadLimitReason(t *testing.T) {
	nodes := test.StartCluster(t, 1, gatewayConfig(t))
	cfg := smallGatewayConfig()
	cfg.ReadLimit = 1024
	_, url := serveGateway(t, nodes[0], nil, cfg)
	c := dialGateway(t, url)
	c.sendRaw(`{"op":"subscribe","topic":"` + strings.Repeat("x", 2000) + `"}`)
	if ce := closedWith(t, c); ce.Code != websocket.StatusMessageTooBig || ce.Reason != "frame over ReadLimit" {
		t.Fatalf("after an oversized frame: close %d %q, want 1009 \"frame over ReadLimit\"", ce.Code, ce.Reason)
	}
	// Exactly ReadLimit is still a frame.
	c2 := dialGateway(t, url)
	cmd := `{"op":"subscribe","topic":"`
	c2.sendRaw(cmd + strings.Repeat("y", 1024-len(cmd)-2) + `"}`)
	if f := c2.next(); f.str("type") != "result" && f.str("type") != "error" {
		t.Fatalf("a frame of exactly ReadLimit was answered %v, want it read as a command", f)
	}
}

// publish takes every valid protojson form of its type, not only objects:
// well-known types are JSON strings, numbers, arrays.
func TestGatewayPublishWellKnownTypes(t *testing.T) {
	nodes := test.StartCluster(t, 1, gatewayConfig(t))
	cfg := smallGatewayConfig()
	cfg.Publish = true
	_, url := serveGateway(t, nodes[0], nil, cfg)
	c := dialGateway(t, url)
	c.ok(map[string]interface{}{"op": "subscribe", "topic": "room"})
	for _, p := range []struct {
		typ     string
		payload interface{}
	}{
		{"google.protobuf.StringValue", "hello"},
		{"google.protobuf.Int64Value", "42"},
		{"google.protobuf.BoolValue", true},
		{"google.protobuf.Timestamp", "2026-12-03T10:00:00Z"},
		{"google.protobuf.Duration", "1.5s"},
		{"google.protobuf.ListValue", []interface{}{1, "a"}},
		{"google.protobuf.Struct", map[string]interface{}{"k": "v"}},
	} {
		c.ok(map[string]interface{}{"op": "publish", "topic": "room", "type": p.typ, "payload": p.payload})
		if e := c.envelope(); e.str("payload_type") != p.typ || e["payload"] == nil {
			t.Fatalf("published %s came back as %v", p.typ, e)
		}
	}
	c.refused(map[string]interface{}{"op": "publish", "topic": "room", "type": "google.protobuf.Timestamp", "payload": "yesterday"},
		gateway.CodeInvalidArgument)
}

// With Publish on and no Authorize hook, a client that learned a victim's
// session id cannot publish a reply into its inbox.
func TestGatewayRefusesPublishToSessionInbox(t *testing.T) {
	nodes := test.StartCluster(t, 1, gatewayConfig(t))
	cfg := smallGatewayConfig()
	cfg.Publish = true
	_, url := serveGateway(t, nodes[0], func(r *http.Request) (string, error) { return r.URL.Query().Get("user"), nil }, cfg)
	victim := dialGateway(t, url+"?user=victim")
	attacker := dialGateway(t, url+"?user=attacker")
	f := attacker.refused(map[string]interface{}{"op": "publish", "topic": echopubsub.SessionInboxPrefix + victim.sid,
		"type": "echopubsub.v1.SessionMessage", "payload": map[string]interface{}{"to_session": victim.sid,
			"from_session": attacker.sid, "request_id": "1", "kind": "SESSION_MESSAGE_KIND_REPLY",
			"message": map[string]interface{}{"@type": "type.googleapis.com/google.protobuf.StringValue", "value": "forged"}}},
		gateway.CodeInvalidArgument)
	if !strings.Contains(f.str("message"), "reserved") {
		t.Fatalf("refusal %v does not say the topic is reserved", f)
	}
	// The victim's socket got nothing: its next frame answers its own command.
	victim.ok(map[string]interface{}{"op": "subscribe", "topic": "room"})
}

package gateway_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/gateway"
	"github.com/echopubsub/echopubsub/test"
)

// nextFrame reads the next frame that is not a result (the answers to
// acks sent without waiting).
func (c *wsClient) nextFrame() frame {
	c.t.Helper()
	for {
		if f := c.next(); f.str("type") != "result" {
			return f
		}
	}
}

// subscribe with from: the stored rows, then exactly one caught_up notice
// with the last stored row's cursor, then live rows, in that order.
func TestGatewayCaughtUpNotice(t *testing.T) {
	nodes := test.StartCluster(t, 1, sessionConfig(50, 200), test.WithMemStore(), echopubsub.WithDurableTopics("room"))
	nd := nodes[0]
	_, url := serveGateway(t, nd, nil, smallGatewayConfig())
	for i := uint64(1); i <= 5; i++ {
		nd.Broadcast(t, "room", stamp(i))
	}
	c := dialGateway(t, url)
	res, early := c.answer(map[string]interface{}{"op": "subscribe", "topic": "room", "from": 3})
	if res.str("type") != "result" {
		t.Fatalf("subscribe from 3 answered %v", res)
	}
	var seen []string
	describe := func(f frame) string {
		if f.str("type") == "envelope" {
			c.send(map[string]interface{}{"op": "ack", "delivery_id": f.num("delivery_id")})
			return fmt.Sprintf("row %d", f.num("cursor"))
		}
		n := f.obj("notice")
		if f.str("kind") == "caught_up" {
			if n.str("stream") != "room" || n.str("session_id") != c.sid {
				t.Errorf("caught_up notice %v, want stream room of session %s", f, c.sid)
			}
			return fmt.Sprintf("caught_up %d", n.num("cursor"))
		}
		return fmt.Sprintf("%s %v", f.str("kind"), n)
	}
	for _, f := range early {
		seen = append(seen, describe(f))
	}
	for len(seen) < 4 {
		seen = append(seen, describe(c.nextFrame()))
	}
	nd.Broadcast(t, "room", stamp(6))
	seen = append(seen, describe(c.nextFrame()))
	if g, want := fmt.Sprint(seen), "[row 3 row 4 row 5 caught_up 5 row 6]"; g != want {
		t.Fatalf("frames %s, want %s", g, want)
	}
}

// A socket that holds a delivery and acks nothing for StallAfter gets one
// session_stalled notice; its ack brings one session_resumed.
func TestGatewayStallNotices(t *testing.T) {
	cfg := sessionConfig(50, 200)
	cfg.StallAfter = 300 * time.Millisecond
	nodes := test.StartCluster(t, 1, cfg, test.WithMemStore(), echopubsub.WithDurableTopics("room"))
	nd := nodes[0]
	_, url := serveGateway(t, nd, func(*http.Request) (string, error) { return "ada", nil }, smallGatewayConfig())
	c := dialGateway(t, url)
	c.ok(map[string]interface{}{"op": "subscribe", "topic": "room"})
	nd.Broadcast(t, "room", stamp(1))
	env := c.envelope() // not acked: the session stalls
	f := c.next()
	if f.str("type") != "notice" || f.str("kind") != "session_stalled" {
		t.Fatalf("after an unacked delivery got %v, want a session_stalled notice", f)
	}
	if n := f.obj("notice"); n.str("session_id") != c.sid || n.num("pending") != 1 || n.num("quiet_ms") < 300 {
		t.Fatalf("session_stalled %v, want session %s, pending 1, quiet_ms >= 300", n, c.sid)
	}
	c.send(map[string]interface{}{"op": "ack", "delivery_id": env.num("delivery_id")})
	f = c.nextFrame()
	if f.str("type") != "notice" || f.str("kind") != "session_resumed" {
		t.Fatalf("after the ack got %v, want one session_resumed notice (and no second session_stalled)", f)
	}
	if n := f.obj("notice"); n.str("session_id") != c.sid || n.num("pending") != 0 {
		t.Fatalf("session_resumed %v, want session %s, pending 0", n, c.sid)
	}
}

// subscribe with consumer: a named durable consumer. The first socket
// gets rows 1..4 live and acks 1 and 2; a second socket with the same
// name is refused while the first holds it (consumer_busy). Once the
// first socket is gone, the second resumes after the committed cursor:
// rows 3 and 4 (row 3 unacked, so it comes again), then caught_up.
func TestGatewayConsumer(t *testing.T) {
	nodes := test.StartCluster(t, 1, sessionConfig(50, 200), test.WithMemStore(), echopubsub.WithDurableTopics("room"))
	nd := nodes[0]
	_, url := serveGateway(t, nd, nil, smallGatewayConfig())
	a := dialGateway(t, url)
	a.refused(map[string]interface{}{"op": "subscribe", "topic": "room", "consumer": "web", "class": "ephemeral"}, gateway.CodeInvalidArgument)
	if f := a.refused(map[string]interface{}{"op": "subscribe", "topic": "room", "consumer": "a b"}, gateway.CodeInvalidArgument); !strings.Contains(f.str("message"), `"a b"`) {
		t.Fatalf("bad consumer name: %v, want the name in the message", f)
	}
	a.ok(map[string]interface{}{"op": "subscribe", "topic": "room", "consumer": "web"})
	for i := uint64(1); i <= 4; i++ {
		nd.Broadcast(t, "room", stamp(i))
	}
	for i := 1; i <= 4; i++ {
		if env := a.envelope(); i <= 2 {
			a.send(map[string]interface{}{"op": "ack", "delivery_id": env.num("delivery_id")})
		}
	}
	b := dialGateway(t, url)
	b.refused(map[string]interface{}{"op": "subscribe", "topic": "room", "consumer": "web"}, gateway.CodeConsumerBusy)
	test.Eventually(t, 5*time.Second, func() bool {
		cs, err := nd.PS.Consumers("room")
		return err == nil && len(cs) == 1 && cs[0].Cursor == 2 && cs[0].Lag == 2
	}, test.Sprintf("consumer web: want cursor 2, lag 2"))
	_ = a.conn.CloseNow()
	// The socket's session closes when the gateway sees the socket go: a
	// client retries consumer_busy until then.
	test.Eventually(t, 5*time.Second, func() bool {
		f, _ := b.answer(map[string]interface{}{"op": "subscribe", "topic": "room", "consumer": "web"})
		if f.str("type") == "error" && f.str("code") != gateway.CodeConsumerBusy {
			t.Fatalf("subscribe: %v", f)
		}
		return f.str("type") == "result"
	}, test.Sprintf("the name web stayed busy after its socket closed"))
	var seen []string
	for len(seen) < 3 {
		f := b.nextFrame()
		if f.str("type") == "envelope" {
			seen = append(seen, fmt.Sprintf("row %d", f.num("cursor")))
		} else {
			seen = append(seen, fmt.Sprintf("%s %d", f.str("kind"), f.obj("notice").num("cursor")))
		}
	}
	if g, want := fmt.Sprint(seen), "[row 3 row 4 caught_up 4]"; g != want {
		t.Fatalf("resumed by name: %s, want %s", g, want)
	}
}

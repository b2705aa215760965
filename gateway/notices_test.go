package gateway_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub"
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

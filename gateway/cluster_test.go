package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/gateway"
	"github.com/echopubsub/echopubsub/test"
)

// A socket that stops reading (and so stops acking) is a slow consumer:
// its session reaches HardQueue, SlowConsumerAction closes it, and the
// gateway closes the socket with a close frame saying why. What it was
// sent before is intact and in order, then the notices, then the close. A
// healthy socket on the same node gets everything; the node goes on.
func TestGatewaySlowSocketIsClosedWithReason(t *testing.T) {
	for _, action := range []echopubsub.SlowConsumerAction{echopubsub.SlowConsumerDisconnect, echopubsub.SlowConsumerExitOwner} {
		t.Run(action.String(), func(t *testing.T) { testSlowSocket(t, action) })
	}
}

func testSlowSocket(t *testing.T, action echopubsub.SlowConsumerAction) {
	const soft, hard, total = 5, 20, 60
	cfg := sessionConfig(soft, hard)
	cfg.SlowConsumerAction = action
	nodes := test.StartCluster(t, 1, cfg)
	nd := nodes[0]
	gw, url := serveGateway(t, nd, nil, smallGatewayConfig())
	slow, healthy := dialGateway(t, url), dialGateway(t, url)
	slow.ok(map[string]interface{}{"op": "subscribe", "topic": "room"})
	healthy.ok(map[string]interface{}{"op": "subscribe", "topic": "room"})

	// From here the slow client neither reads nor acks; the healthy one
	// reads and acks each message as it comes.
	for i := uint64(1); i <= total; i++ {
		nd.Broadcast(t, "room", stamp(i))
		e := healthy.envelope()
		if _, seq := stampPayload(e); seq != fmt.Sprint(i) || e.num("delivery_id") != i {
			t.Fatalf("healthy socket: envelope %v, want seq %d", e, i)
		}
		healthy.ok(map[string]interface{}{"op": "ack", "delivery_id": i}) // waits for the answer: acks keep up
	}
	// Polls the public view of the slow session: closed by the hard queue.
	test.Eventually(t, 10*time.Second, func() bool {
		_, open := nd.PS.SessionIdentity(slow.sid)
		return !open
	}, test.Sprintf("slow session still open, pending %d", nd.PS.Pending(slow.sid)))

	// Now the slow client reads what it was sent: envelopes 1..hard in
	// order, the pressure notice, the closed notice, then the close frame.
	var seqs []string
	var kinds []string
	var closeErr error
	for closeErr == nil {
		f, err := slow.read()
		if err != nil {
			closeErr = err
			break
		}
		switch f.str("type") {
		case "envelope":
			_, seq := stampPayload(f)
			seqs = append(seqs, seq)
		case "notice":
			kinds = append(kinds, f.str("kind"))
			if f.str("kind") == "session_closed" && f.obj("notice").str("reason") != "SESSION_CLOSE_REASON_HARD_QUEUE" {
				t.Fatalf("closed notice %v", f)
			}
		}
	}
	var want []string
	for i := 1; i <= hard; i++ {
		want = append(want, fmt.Sprint(i))
	}
	if strings.Join(seqs, ",") != strings.Join(want, ",") {
		t.Fatalf("slow socket got seqs %v, want 1..%d", seqs, hard)
	}
	if strings.Join(kinds, ",") != "session_pressure,session_closed" {
		t.Fatalf("slow socket notices %v", kinds)
	}
	var ce websocket.CloseError
	if !asCloseError(closeErr, &ce) || ce.Code != websocket.StatusPolicyViolation || !strings.HasPrefix(ce.Reason, "slow consumer") {
		t.Fatalf("slow socket ended with %v, want close 1008 \"slow consumer...\"", closeErr)
	}
	test.Eventually(t, 10*time.Second, func() bool { return gw.Sockets() == 1 }, test.Sprintf("%d sockets, want 1", gw.Sockets()))

	// The node is unharmed: the healthy socket still gets new messages.
	nd.Broadcast(t, "room", stamp(total+1))
	if e := healthy.envelope(); e.num("delivery_id") != total+1 {
		t.Fatalf("healthy after: %v", e)
	}
	if err := nd.PS.Err(); err != nil {
		t.Fatal(err)
	}
}

// A socket whose transport backs up with ephemeral deliveries (nothing to
// ack, so no hard queue) is closed when its outbound queue fills.
func TestGatewayOutboundQueueFullClosesSocket(t *testing.T) {
	nodes := test.StartCluster(t, 1, sessionConfig(5, 20))
	nd := nodes[0]
	cfg := smallGatewayConfig()
	cfg.OutboundQueue = 21
	gw, url := serveGateway(t, nd, nil, cfg)
	c := dialGateway(t, url)
	c.ok(map[string]interface{}{"op": "subscribe", "topic": "eph", "class": "ephemeral",
		"context": map[string]string{"pad": strings.Repeat("p", 4000)}})
	// Enough to fill the socket's TCP buffers and then the queue: the
	// client does not read. Polls the session's public state between
	// broadcasts: the gateway closes it the moment the queue overflows.
	open := func() bool { _, ok := nd.PS.SessionIdentity(c.sid); return ok }
	for i := uint64(1); open(); i++ {
		if i > 100000 {
			t.Fatal("the socket's session is still open after 100000 unread messages")
		}
		nd.Broadcast(t, "eph", stamp(i))
	}
	// The client reads again: what was written, then the close frame.
	var err error
	for err == nil {
		_, err = c.read()
	}
	var ce websocket.CloseError
	if !asCloseError(err, &ce) || ce.Code != websocket.StatusPolicyViolation || ce.Reason != "slow consumer: outbound queue full" {
		t.Fatalf("socket ended with %v, want 1008 slow consumer: outbound queue full", err)
	}
	test.Eventually(t, 10*time.Second, func() bool { return gw.Sockets() == 0 }, test.Sprintf("socket still open"))
	if err := nd.PS.Err(); err != nil {
		t.Fatal(err)
	}
}

func asCloseError(err error, ce *websocket.CloseError) bool { return errors.As(err, ce) }

// A socket on node A receives what node B broadcasts.
func TestGatewayReceivesBroadcastFromOtherNode(t *testing.T) {
	nodes := test.StartCluster(t, 2, gatewayConfig(t))
	_, url := serveGateway(t, nodes[0], nil, smallGatewayConfig())
	c := dialGateway(t, url)
	c.ok(map[string]interface{}{"op": "subscribe", "topic": "room"})
	for i := uint64(1); i <= 5; i++ {
		nodes[1].Broadcast(t, "room", stamp(i))
	}
	for i := uint64(1); i <= 5; i++ {
		e := c.envelope()
		if _, seq := stampPayload(e); seq != fmt.Sprint(i) || e.num("delivery_id") != i {
			t.Fatalf("envelope %v, want seq %d", e, i)
		}
	}
}

// Request and reply between two sockets on two nodes: the request carries
// who asked, the reply goes back to that session only, both are acked
// like any delivery.
func TestGatewayRequestReplyBetweenSockets(t *testing.T) {
	nodes := test.StartCluster(t, 2, gatewayConfig(t))
	_, urlA := serveGateway(t, nodes[0], nil, smallGatewayConfig())
	_, urlB := serveGateway(t, nodes[1], nil, smallGatewayConfig())
	a, b := dialGateway(t, urlA), dialGateway(t, urlB)

	r := a.ok(map[string]interface{}{"op": "request", "to": b.sid, "type": "echopubsub.test.v1.Stamp",
		"payload": map[string]string{"publisher": "question", "seq": "6"}})
	rid := r.num("request_id")
	if rid == 0 {
		t.Fatalf("request result %v", r)
	}
	q := b.envelope()
	req := q.obj("request")
	if req.str("from") != a.sid || req.str("to") != b.sid || req.num("request_id") != rid || req["reply"] != false {
		t.Fatalf("request envelope %v", q)
	}
	if pub, seq := stampPayload(q); pub != "question" || seq != "6" {
		t.Fatalf("request payload %v", q)
	}
	// Replying to a delivery that is not a request is refused.
	b.refused(map[string]interface{}{"op": "reply", "delivery_id": q.num("delivery_id") + 1, "type": "echopubsub.test.v1.Stamp",
		"payload": map[string]string{}}, gateway.CodeUnknownDelivery)
	b.ok(map[string]interface{}{"op": "reply", "delivery_id": q.num("delivery_id"), "type": "echopubsub.test.v1.Stamp",
		"payload": map[string]string{"publisher": "answer", "seq": "60"}})
	b.ok(map[string]interface{}{"op": "ack", "delivery_id": q.num("delivery_id")})
	// A request is answered once.
	b.refused(map[string]interface{}{"op": "reply", "delivery_id": q.num("delivery_id"), "type": "echopubsub.test.v1.Stamp",
		"payload": map[string]string{}}, gateway.CodeUnknownDelivery)

	ans := a.envelope()
	rep := ans.obj("request")
	if rep.str("from") != b.sid || rep.str("to") != a.sid || rep.num("request_id") != rid || rep["reply"] != true {
		t.Fatalf("reply envelope %v", ans)
	}
	if pub, seq := stampPayload(ans); pub != "answer" || seq != "60" {
		t.Fatalf("reply payload %v", ans)
	}
	if p := nodes[0].PS.Pending(a.sid); p != 1 {
		t.Fatalf("asker pending %d, want 1 (the reply, not yet acked)", p)
	}
	a.ok(map[string]interface{}{"op": "ack", "delivery_id": ans.num("delivery_id")})
	if p := nodes[1].PS.Pending(b.sid); p != 0 {
		t.Fatalf("callee pending %d", p)
	}
}

// New's errors name the field and the value.
func TestGatewayConfigValidation(t *testing.T) {
	nodes := test.StartCluster(t, 1, sessionConfig(5, 20))
	for _, c := range []struct {
		mod  func(*gateway.Config)
		want string
	}{
		{func(c *gateway.Config) { c.WriteTimeout = 0 }, "WriteTimeout must be > 0, got 0s"},
		{func(c *gateway.Config) { c.ReadLimit = 10 }, "ReadLimit must be >= 512 bytes, got 10"},
		{func(c *gateway.Config) { c.MaxFrameSize = 5 }, "MaxFrameSize must be >= 1024 bytes, got 5"},
		{func(c *gateway.Config) { c.OutboundQueue = 20 }, "OutboundQueue must be above the pubsub's HardQueue (20), got 20"},
		{func(c *gateway.Config) { c.MaxSubscriptions = -1 }, "MaxSubscriptions must be > 0, got -1"},
		{func(c *gateway.Config) { c.PingInterval = 0 }, "PingInterval must be > 0, got 0s"},
		{func(c *gateway.Config) { c.DefaultReplayLimit = 5000 }, "DefaultReplayLimit must be in 1..MaxReplayLimit (1000), got 5000"},
		{func(c *gateway.Config) { c.CloseTimeout = -time.Second }, "CloseTimeout must be > 0, got -1s"},
		{func(c *gateway.Config) { c.Resolver = nil }, "Resolver must not be nil"},
		{func(c *gateway.Config) { c.ReceiptTimeout = 0 }, "ReceiptTimeout must be > 0, got 0s"},
		{func(c *gateway.Config) { c.OriginPatterns = []string{"app.example.com", "["} },
			`OriginPatterns[1] must be a path.Match pattern, got "["`},
	} {
		cfg := gateway.DefaultConfig()
		c.mod(&cfg)
		if _, err := gateway.New(nodes[0].PS, gateway.AnyIdentity, cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New error %v, want %q", err, c.want)
		}
	}
	if _, err := gateway.New(nodes[0].PS, nil, gateway.DefaultConfig()); err == nil || !strings.Contains(err.Error(), "authenticate") {
		t.Errorf("nil authenticate: %v", err)
	}
	if _, err := gateway.New(nodes[0].PS, gateway.AnyIdentity, gateway.DefaultConfig()); err != nil {
		t.Errorf("defaults refused: %v", err)
	}
	nodes[0].StopPubSub(t)
	_, err := gateway.New(nodes[0].PS, gateway.AnyIdentity, gateway.DefaultConfig())
	if err == nil || !strings.Contains(err.Error(), `pubsub "`+nodes[0].PS.Config().Name+`" is stopped`) || !errors.Is(err, echopubsub.ErrStopped) {
		t.Errorf("New on a stopped pubsub: %v, want an error naming it, wrapping ErrStopped", err)
	}
}

// Closing the gateway closes its sockets (1001) and their sessions;
// stopping the pubsub closes sockets too ("pubsub stopped"). No goroutine
// of the gateway, its sockets or their owners is left.
func TestGatewayCloseLeavesNoGoroutines(t *testing.T) {
	log := test.Logger(t, 0)
	system, r := test.StartRemote(t, log)
	defer func() { r.Shutdown(false); system.Shutdown() }()
	before := goleak.IgnoreCurrent()
	ps, err := echopubsub.Start(system, sessionConfig(5, 20), echopubsub.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	nd := &test.Node{System: system, PS: ps, Addr: system.Address()}
	gw, err := gateway.New(ps, gateway.AnyIdentity, smallGatewayConfig())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	url := "ws" + strings.TrimPrefix(srv.URL, "http")
	a, b := dialGateway(t, url), dialGateway(t, url)
	a.ok(map[string]interface{}{"op": "subscribe", "topic": "room"})
	b.ok(map[string]interface{}{"op": "subscribe", "topic": "room"})
	nd.Broadcast(t, "room", stamp(1))
	a.envelope()
	b.envelope()

	// The pubsub stops: each socket is told, then closed.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ps.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*wsClient{a, b} {
		var last error
		for last == nil {
			_, last = c.read()
		}
		if websocket.CloseStatus(last) != websocket.StatusGoingAway || !strings.Contains(last.Error(), "pubsub stopped") {
			t.Fatalf("socket ended with %v, want 1001 pubsub stopped", last)
		}
	}
	if err := gw.Close(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	test.VerifyNoLeaks(t, before)
}

// The replay command: pages of a durable stream from the node's store,
// redelivered to the socket's own session as replayed envelopes with their
// cursor, through the pubsub's authorizer (which sees the socket's
// identity) and the session's pressure rules (a page stops at SoftQueue and
// resumes where it stopped).
func TestGatewayReplay(t *testing.T) {
	var ps *echopubsub.PubSub
	authorizer := func(sessionID, stream string) error {
		if id, _ := ps.SessionIdentity(sessionID); id != "ada" {
			return fmt.Errorf("%q may not replay %s", id, stream)
		}
		return nil
	}
	nodes := test.StartCluster(t, 1, sessionConfig(5, 20), test.WithMemStore(),
		echopubsub.WithDurableTopics("room"), echopubsub.WithAuthorizer(authorizer))
	nd := nodes[0]
	ps = nd.PS
	_, url := serveGateway(t, nd, func(r *http.Request) (string, error) { return r.URL.Query().Get("user"), nil }, smallGatewayConfig())
	for i := uint64(1); i <= 12; i++ {
		nd.Broadcast(t, "room", stamp(i))
	}
	bob := dialGateway(t, url+"?user=bob")
	if f := bob.refused(map[string]interface{}{"op": "replay", "stream": "room"}, gateway.CodeUnauthorized); !strings.Contains(f.str("message"), `"bob" may not replay room`) {
		t.Fatalf("refusal %v", f)
	}
	c := dialGateway(t, url+"?user=ada")
	c.refused(map[string]interface{}{"op": "replay", "stream": "not-durable"}, gateway.CodeReplayUnavailable)
	c.refused(map[string]interface{}{"op": "replay", "stream": "room", "from": 99}, gateway.CodeCursorBeyondEnd)
	c.refused(map[string]interface{}{"op": "replay", "stream": "room", "limit": 5000}, gateway.CodeInvalidArgument)

	// Page 1: 3 rows from the start.
	res, envs := c.answer(map[string]interface{}{"op": "replay", "stream": "room", "limit": 3})
	st := res.obj("result")
	if res.str("type") != "result" || st.num("resume_cursor") != 4 || st.num("next_cursor") != 4 || st.num("delivered") != 3 || st["stopped"] != false {
		t.Fatalf("page 1: %v", res)
	}
	checkReplayed := func(envs []frame, from, to uint64) {
		t.Helper()
		var got []string
		for _, e := range envs {
			if e.str("type") == "envelope" {
				_, seq := stampPayload(e)
				got = append(got, fmt.Sprintf("%d:%s:%v", e.num("cursor"), seq, e["replayed"]))
			}
		}
		var want []string
		for i := from; i <= to; i++ {
			want = append(want, fmt.Sprintf("%d:%d:true", i, i))
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("replayed %v, want %v", got, want)
		}
	}
	checkReplayed(envs, 1, 3)
	// Page 2 asks for everything left while 3 are unacked: pending may
	// reach SoftQueue (5) only, so it stops after 2 more rows, at cursor 6.
	res, envs = c.answer(map[string]interface{}{"op": "replay", "stream": "room", "from": 4, "limit": 100})
	st = res.obj("result")
	if st.num("resume_cursor") != 6 || st.num("next_cursor") != 13 || st.num("delivered") != 2 || st["stopped"] != true || st.num("dropped") != 7 {
		t.Fatalf("page 2: %v", res)
	}
	checkReplayed(envs, 4, 5)
	c.ok(map[string]interface{}{"op": "ack_many", "delivery_ids": []uint64{1, 2, 3, 4, 5}})
	// Page 3 resumes where page 2 stopped: nothing skipped.
	res, envs = c.answer(map[string]interface{}{"op": "replay", "stream": "room", "from": 6, "limit": 5})
	if st = res.obj("result"); st.num("resume_cursor") != 11 || st.num("delivered") != 5 || st["stopped"] != false {
		t.Fatalf("page 3: %v", res)
	}
	checkReplayed(envs, 6, 10)
}

// A peer that no longer answers pings (gone without a close) is closed
// after PingInterval + WriteTimeout, and its session with it.
func TestGatewayClosesUnresponsivePeer(t *testing.T) {
	nodes := test.StartCluster(t, 1, sessionConfig(5, 20))
	cfg := smallGatewayConfig()
	cfg.PingInterval, cfg.WriteTimeout = 100*time.Millisecond, 300*time.Millisecond
	gw, url := serveGateway(t, nodes[0], nil, cfg)
	// This client reads the hello, then nothing more: coder/websocket
	// answers pings only inside Read, so it never answers.
	c := dialGateway(t, url)
	test.Eventually(t, 10*time.Second, func() bool { return gw.Sockets() == 0 }, test.Sprintf("socket still open"))
	if _, open := nodes[0].PS.SessionIdentity(c.sid); open {
		t.Fatal("the silent peer's session is still open")
	}
	// A client that reads answers pings and stays.
	d := dialGateway(t, url)
	done := make(chan struct{})
	go func() { // the test's reader; ends when the socket closes at cleanup
		defer close(done)
		for {
			if _, err := d.read(); err != nil {
				return
			}
		}
	}()
	test.Never(t, time.Second, func() bool { return gw.Sockets() != 1 }, test.Sprintf("a responsive socket was closed"))
	_ = d.conn.Close(websocket.StatusNormalClosure, "")
	<-done
}

// subscribe with from: the stream's stored rows from that cursor (replayed,
// with their cursor), then live, with no gap and no duplicate at the
// handover; without from, live only. A from the pubsub refuses is an error
// frame naming why, and the socket goes on.
func TestGatewaySubscribeFrom(t *testing.T) {
	var ps *echopubsub.PubSub
	authorizer := func(sessionID, stream string) error {
		if id, _ := ps.SessionIdentity(sessionID); id != "ada" {
			return fmt.Errorf("%q may not read %s", id, stream)
		}
		return nil
	}
	nodes := test.StartCluster(t, 1, sessionConfig(50, 200), test.WithMemStore(),
		echopubsub.WithDurableTopics("room"), echopubsub.WithAuthorizer(authorizer))
	nd := nodes[0]
	ps = nd.PS
	_, url := serveGateway(t, nd, func(r *http.Request) (string, error) { return r.URL.Query().Get("user"), nil }, smallGatewayConfig())
	// The broadcasts are asynchronous: a subscriber that joins right after
	// them may still get rows 1..5 live. A user who wants "from now on" to
	// mean "after row 5" waits until a subscriber of its own has row 5.
	seen := nd.Subscribe(t, "room")
	for i := uint64(1); i <= 5; i++ {
		nd.Broadcast(t, "room", stamp(i))
	}
	test.Eventually(t, 10*time.Second, func() bool { return seen.Len() >= 5 }, test.Sprintf("a local subscriber got %d of rows 1..5", seen.Len()))
	bob := dialGateway(t, url+"?user=bob")
	bob.refused(map[string]interface{}{"op": "subscribe", "topic": "room", "from": 0}, gateway.CodeUnauthorized)
	bob.ok(map[string]interface{}{"op": "subscribe", "topic": "room"}) // live only: the authorizer guards the store

	c := dialGateway(t, url+"?user=ada")
	c.refused(map[string]interface{}{"op": "subscribe", "topic": "other", "from": 0}, gateway.CodeReplayUnavailable)
	c.refused(map[string]interface{}{"op": "subscribe", "topic": "room", "from": 99}, gateway.CodeCursorBeyondEnd)
	c.refused(map[string]interface{}{"op": "subscribe", "topic": "room", "from": -1}, gateway.CodeInvalidArgument)
	c.ok(map[string]interface{}{"op": "subscribe", "topic": "room", "from": 3})
	got := func(n int) []string {
		t.Helper()
		var out []string
		var ids []uint64
		for len(out) < n {
			e := c.envelope()
			_, seq := stampPayload(e)
			out = append(out, fmt.Sprintf("%d:%s:%v", e.num("cursor"), seq, e["replayed"] == true))
			ids = append(ids, e.num("delivery_id"))
		}
		c.ok(map[string]interface{}{"op": "ack_many", "delivery_ids": ids})
		return out
	}
	if g := strings.Join(got(3), ","); g != "3:3:true,4:4:true,5:5:true" {
		t.Fatalf("from 3: %s, want the stored rows 3..5, replayed", g)
	}
	nd.Broadcast(t, "room", stamp(6))
	if g := strings.Join(got(1), ","); g != "6:6:false" {
		t.Fatalf("then live: %s, want row 6 live", g)
	}
	// bob, live only, got row 6 and nothing stored.
	if e := bob.envelope(); e.num("cursor") != 6 || e["replayed"] == true {
		t.Fatalf("live-only subscriber got %v first, want row 6 live", e)
	}
}

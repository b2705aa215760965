package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// Issue 37, item 6: clients that ack promptly (every 64 envelopes) beside
// clients that never read and clients that never ack, all on one topic of
// 2 KB messages, more than the gateway can write at once. Frames wait in
// the gateway's own outbound queue; that time is the server's, not the
// client's: every prompt client gets every message, in order, and is never
// closed, while each bad one is closed as a slow consumer (1008).
func TestGatewayPromptClientsNeverClosedAsSlow(t *testing.T) {
	const (
		prompt, neverRead, neverAck = 50, 5, 5
		messages                    = 600
		rate                        = 1500 // messages per second
		ackEvery                    = 64
		soft, hard                  = 128, 512
	)
	// One P: the gateway falls behind here as on a busy node, however many
	// cores this machine has free (frames then wait in its queues).
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	cfg := sessionConfig(soft, hard)
	cfg.RoomWait = 150 * time.Millisecond
	nodes := test.StartCluster(t, 1, cfg)
	nd := nodes[0]
	gcfg := smallGatewayConfig()
	gcfg.OutboundQueue = hard + 256
	gcfg.WriteTimeout = time.Second
	gw, url := serveGateway(t, nd, nil, gcfg)

	dial := func() *wsClient {
		c := dialGateway(t, url)
		c.ok(map[string]interface{}{"op": "subscribe", "topic": "room"})
		return c
	}
	var prompts, readers, silent []*wsClient
	for i := 0; i < prompt; i++ {
		prompts = append(prompts, dial())
	}
	for i := 0; i < neverAck; i++ {
		readers = append(readers, dial())
	}
	for i := 0; i < neverRead; i++ {
		silent = append(silent, dial())
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	promptRes := make([]promptResult, prompt)
	for i, c := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			promptRes[i] = readPrompt(ctx, c, messages, ackEvery)
			promptRes[i].at = time.Now()
		}()
	}
	neverAckEnd := make([]error, neverAck)
	for i, c := range readers {
		wg.Add(1)
		go func() { defer wg.Done(); neverAckEnd[i] = readUntilClosed(ctx, c) }()
	}

	pad := make([]byte, 2048)
	start := time.Now()
	for i := uint64(1); i <= messages; i++ {
		if d := time.Until(start.Add(time.Duration(i) * time.Second / rate)); d > 0 {
			time.Sleep(d) // the publishing rate
		}
		msg := &testpb.Stamp{Publisher: "t", Seq: i, Pad: pad}
		for {
			err := nd.PS.Broadcast(nil, "room", msg)
			if err == nil {
				break
			}
			if !errors.Is(err, echopubsub.ErrBusy) {
				t.Fatalf("broadcast %d: %v", i, err)
			}
			time.Sleep(time.Millisecond) // what a producer does on ErrBusy
		}
	}
	t.Logf("published %d messages in %v", messages, time.Since(start))
	wg.Wait()
	t.Logf("every client reader ended %v after the start", time.Since(start))
	last := start
	for _, r := range promptRes {
		if r.at.After(last) {
			last = r.at
		}
	}
	t.Logf("the last prompt client was done %v after the start", last.Sub(start))

	for i, r := range promptRes {
		if r.err != nil || r.got != messages {
			t.Errorf("prompt client %d: %d of %d messages, then %v", i, r.got, messages, r.err)
		}
		if _, open := nd.PS.SessionIdentity(prompts[i].sid); !open {
			t.Errorf("prompt client %d: its session was closed", i)
		}
	}
	for i, err := range neverAckEnd {
		var ce websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation ||
			ce.Reason != fmt.Sprintf("slow consumer: pending would exceed HardQueue %d", hard) {
			t.Errorf("never-acking client %d ended with %v, want 1008 slow consumer: pending would exceed HardQueue %d", i, err, hard)
		}
	}
	// The clients that never read: their sessions are closed (HardQueue,
	// or a write that timed out) and their sockets with them.
	test.Eventually(t, 15*time.Second, func() bool { // a write timeout, then the close handshake (up to 5 s)
		for _, c := range append(append([]*wsClient{}, silent...), readers...) {
			if _, open := nd.PS.SessionIdentity(c.sid); open {
				return false
			}
		}
		return gw.Sockets() == prompt
	}, func() string { return fmt.Sprintf("%d sockets open, want the %d prompt ones", gw.Sockets(), prompt) })
	t.Logf("the bad clients' sockets closed %v after the start", time.Since(start))
}

type promptResult struct {
	got int // envelopes received in order
	at  time.Time
	err error
}

// readPrompt reads until want envelopes came, in order (seq 1..want), and
// acks each group of ackEvery with one ack_many as soon as it is complete,
// without waiting for the answer. It reads the two fields it needs from
// the frame's bytes instead of decoding the JSON: sixty clients share this
// process's CPU with the gateway, and a client is only as prompt as its
// goroutine gets to run.
func readPrompt(ctx context.Context, c *wsClient, want, ackEvery int) promptResult {
	var res promptResult
	var ids []uint64
	for res.got < want {
		_, b, err := c.conn.Read(ctx)
		if err != nil {
			res.err = err
			return res
		}
		switch {
		case bytes.HasPrefix(b, []byte(`{"type":"error"`)):
			res.err = fmt.Errorf("error frame %s", b)
			return res
		case bytes.HasPrefix(b, []byte(`{"type":"envelope"`)):
			id, seq := jsonUint(b, `"delivery_id":`), jsonUint(b, `"seq":"`)
			if seq != uint64(res.got+1) || id == 0 {
				res.err = fmt.Errorf("envelope delivery %d seq %d, want seq %d", id, seq, res.got+1)
				return res
			}
			res.got++
			ids = append(ids, id)
			if len(ids) == ackEvery {
				cmd, _ := json.Marshal(map[string]interface{}{"op": "ack_many", "delivery_ids": ids})
				if err := c.conn.Write(ctx, websocket.MessageText, cmd); err != nil {
					res.err = fmt.Errorf("ack_many: %w", err)
					return res
				}
				ids = ids[:0]
			}
		}
	}
	return res
}

// jsonUint reads the decimal digits right after the first key in b; 0 when
// there is none.
func jsonUint(b []byte, key string) uint64 {
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return 0
	}
	var n uint64
	for _, d := range b[i+len(key):] {
		if d < '0' || d > '9' {
			break
		}
		n = 10*n + uint64(d-'0')
	}
	return n
}

// readUntilClosed reads every frame and acks none; it returns how the
// socket ended.
func readUntilClosed(ctx context.Context, c *wsClient) error {
	for {
		if _, _, err := c.conn.Read(ctx); err != nil {
			return err
		}
	}
}

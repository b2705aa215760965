package gateway_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/echopubsub/echopubsub/gateway"
	"github.com/echopubsub/echopubsub/test"
)

// FuzzGatewaySocket sends arbitrary frames over one real socket: each gets
// exactly one answer (a result or an error frame), the socket stays open
// and the node keeps running. The seeds run in every `go test`.
func FuzzGatewaySocket(f *testing.F) {
	for _, s := range []string{
		`{"op":"subscribe","id":"1","topic":"room"}`, `{"op":"ack","delivery_id":1}`, `{"op":"ack_many","delivery_ids":[]}`,
		`{"op":"replay","stream":"room"}`, `{"op":"publish","topic":"t","type":"x","payload":{}}`,
		`{"op":"request","to":"a.b","type":"echopubsub.test.v1.Stamp","payload":{"seq":"x"}}`,
		`{"op":"reply","delivery_id":9,"type":"echopubsub.test.v1.Stamp","payload":{}}`,
		`{"op":"unsubscribe","topic":"room","session_id":"x"}`, `{"op":"nope"}`, `not json`, ``, "\xff", `{"op":"ack"} {}`,
	} {
		f.Add([]byte(s))
	}
	nodes := test.StartCluster(f, 1, sessionConfig(5, 20))
	cfg := gateway.DefaultConfig()
	cfg.OutboundQueue = 512
	gw, err := gateway.New(nodes[0].PS, gateway.AnyIdentity, cfg)
	if err != nil {
		f.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	f.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = gw.Close(ctx)
		srv.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	cancel()
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = conn.CloseNow() })
	read := func() (map[string]interface{}, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, b, err := conn.Read(ctx)
		if err != nil {
			return nil, err
		}
		var m map[string]interface{}
		return m, json.Unmarshal(b, &m)
	}
	if _, err := read(); err != nil { // hello
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > int(cfg.ReadLimit) {
			return // closes the socket by design (TestGatewayReadLimit)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := conn.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatalf("write: %v", err)
		}
		for {
			m, err := read()
			if err != nil {
				t.Fatalf("frame %q: no answer: %v", b, err)
			}
			if typ := m["type"]; typ == "result" || typ == "error" {
				break // envelopes and notices may come first; this one answers
			}
		}
		if err := nodes[0].PS.Err(); err != nil {
			t.Fatal(err)
		}
	})
}

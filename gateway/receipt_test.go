package gateway_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub/gateway"
	"github.com/echopubsub/echopubsub/test"
)

// receiptStatuses is a publish result's receipt as node -> status.
func receiptStatuses(t *testing.T, res frame) (map[string]string, frame) {
	t.Helper()
	r := res.obj("receipt")
	nodes, ok := r["nodes"].([]interface{})
	if !ok {
		t.Fatalf("publish result without a receipt: %v", res)
	}
	out := map[string]string{}
	for _, n := range nodes {
		nf := frame(n.(map[string]interface{}))
		out[nf.str("node")] = nf.str("status")
	}
	return out, r
}

// A publish with "receipt": true answers with a receipt once every member
// delivered the message; with a member cut off it answers after
// ReceiptTimeout with "complete": false, the cut member unreachable. A
// receipt that is not a boolean is refused.
func TestGatewayPublishReceipt(t *testing.T) {
	nodes := test.StartCluster(t, 2, gatewayConfig(t))
	cfg := smallGatewayConfig()
	cfg.Publish = true
	cfg.ReceiptTimeout = time.Second
	_, url := serveGateway(t, nodes[0], nil, cfg)
	c := dialGateway(t, url)
	remote := nodes[1].Subscribe(t, "room")
	pub := func(seq int) frame {
		return c.ok(map[string]interface{}{"op": "publish", "topic": "room", "type": "echopubsub.test.v1.Stamp",
			"payload": map[string]string{"publisher": "t", "seq": fmt.Sprint(seq)}, "receipt": true})
	}

	st, r := receiptStatuses(t, pub(1))
	if r["complete"] != true || st[nodes[0].Addr] != "delivered" || st[nodes[1].Addr] != "delivered" || len(st) != 2 ||
		r.str("node") != nodes[0].Addr || r.str("incarnation") == "" {
		t.Fatalf("receipt of a publish to 2 healthy nodes: %v", r)
	}
	wantSeqs(t, remote, 1)

	test.Partition(nodes, 1)
	st, r = receiptStatuses(t, pub(2))
	if r["complete"] != false || st[nodes[0].Addr] != "delivered" || st[nodes[1].Addr] != "unreachable" {
		t.Fatalf("receipt of a publish with node 1 cut: %v", r)
	}
	test.Heal(nodes)
	wantSeqs(t, remote, 1, 2)

	c.refused(map[string]interface{}{"op": "publish", "topic": "room", "type": "echopubsub.test.v1.Stamp",
		"payload": map[string]string{}, "receipt": "yes"}, gateway.CodeMalformedFrame)
	c.refused(map[string]interface{}{"op": "subscribe", "topic": "other", "receipt": true}, gateway.CodeInvalidArgument)
}

// wantSeqs waits until c received exactly the Stamps seqs.
func wantSeqs(t *testing.T, c *test.Collector, seqs ...uint64) {
	t.Helper()
	want := fmt.Sprint(seqs)
	test.Eventually(t, 10*time.Second, func() bool { return fmt.Sprint(c.Stamps()) == want },
		func() string { return "want stamps " + want + ", got " + c.Describe() })
}

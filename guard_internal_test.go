package echopubsub

import (
	"crypto/x509"
	"net"
	"net/url"
	"testing"

	"github.com/echopubsub/echopubsub/internal/prop"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/messages"
)

// TestScanRequestAgreesWithProto: what the guard reads from a request's
// bytes is what the worker will decode from them, also for concatenated
// messages (protobuf merges them: the last singular field wins, repeated
// fields append), so a peer cannot show the guard one node and the worker
// another.
func TestScanRequestAgreesWithProto(t *testing.T) {
	batch := func(t *prop.T, label string) *messages.Batch {
		b := &messages.Batch{ProtocolVersion: 1, PubsubName: "scores",
			ProducerNode: prop.SampledFrom([]string{"", "a:1", "b:2"}).Draw(t, label+"node")}
		for i, n := 0, prop.IntRange(0, 20).Draw(t, label+"n"); i < n; i++ {
			b.Add("t", "x.Y", make([]byte, prop.IntRange(0, 300).Draw(t, label+"size")), "", "", 0)
		}
		return b
	}
	prop.Check(t, func(t *prop.T) {
		var data []byte
		for i, n := 0, prop.IntRange(1, 3).Draw(t, "parts"); i < n; i++ {
			b, err := proto.Marshal(batch(t, string(rune('a'+i))))
			if err != nil {
				t.Fatal(err)
			}
			data = append(data, b...)
		}
		var want messages.Batch
		if err := proto.Unmarshal(data, &want); err != nil {
			t.Fatal(err)
		}
		node, entries, size, err := scanRequest(data, typeBatch)
		if err != nil || node != want.ProducerNode || entries != len(want.PayloadSize) || size != len(want.Payloads) {
			t.Fatalf("scan: node %q entries %d bytes %d err %v; proto: node %q entries %d bytes %d",
				node, entries, size, err, want.ProducerNode, len(want.PayloadSize), len(want.Payloads))
		}
	})
	for _, m := range []proto.Message{
		&messages.Register{ProducerNode: "r:1", NextCursor: 5}, &messages.Expire{ProducerNode: "e:1", Missed: 3},
		&messages.BatchAck{WorkerNode: "w:1", Error: "x"}, &messages.RegisterAck{WorkerNode: "w:2", NextCursor: 9},
	} {
		b, _ := proto.Marshal(m)
		node, _, _, err := scanRequest(b, typeName(m))
		want := ""
		switch v := m.(type) {
		case *messages.Register:
			want = v.ProducerNode
		case *messages.Expire:
			want = v.ProducerNode
		case *messages.BatchAck:
			want = v.WorkerNode
		case *messages.RegisterAck:
			want = v.WorkerNode
		}
		if err != nil || node != want {
			t.Errorf("%s: scanned %q (%v), want %q", typeName(m), node, err, want)
		}
	}
	if _, _, _, err := scanRequest([]byte{0x1a, 0x05, 'a'}, typeBatch); err == nil {
		t.Error("a truncated field was not an error")
	}
}

func TestCertAllows(t *testing.T) {
	strict := &x509.Certificate{URIs: []*url.URL{NodeURI("10.0.0.1:8090")}, IPAddresses: []net.IP{net.ParseIP("10.0.0.1")}}
	byIP := &x509.Certificate{IPAddresses: []net.IP{net.ParseIP("10.0.0.1")}}
	byDNS := &x509.Certificate{DNSNames: []string{"node1.cluster.local"}}
	cases := []struct {
		cert *x509.Certificate
		addr string
		want bool
	}{
		{strict, "10.0.0.1:8090", true},
		{strict, "10.0.0.1:8091", false}, // URI SANs name exact addresses
		{byIP, "10.0.0.1:8091", true},
		{byIP, "10.0.0.2:8090", false},
		{byDNS, "node1.cluster.local:8090", true},
		{byDNS, "node2.cluster.local:8090", false},
		{byDNS, "node1.cluster.local", false}, // not host:port
		{byIP, "", false},
		{nil, "10.0.0.1:8090", false},
	}
	for _, c := range cases {
		if got := certAllows(c.cert, c.addr); got != c.want {
			t.Errorf("certAllows(%v, %q) = %v, want %v", c.cert, c.addr, got, c.want)
		}
	}
}

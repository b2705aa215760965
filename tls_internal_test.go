package echopubsub

import (
	"context"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/echopubsub/echopubsub/internal/devca"
)

// TestTLSDialChecksServerNode: a dial made with WithTLS accepts a server
// only if its certificate stands for the address dialed, to the port when
// the certificate has a NodeURI SAN; the host check of TLS alone would let
// a node answer for another node on the same host.
func TestTLSDialChecksServerNode(t *testing.T) {
	ca, err := devca.New("dial test CA")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	loop := []net.IP{net.ParseIP("127.0.0.1")}
	cases := []struct {
		name   string
		server devca.Identity
		ok     bool
	}{
		{"certificate for the address dialed", devca.Identity{Name: "right", URIs: []*url.URL{NodeURI(addr)}, IPs: loop}, true},
		{"certificate for the host only", devca.Identity{Name: "host", IPs: loop}, true},
		{"certificate for another node on the host", devca.Identity{Name: "other", URIs: []*url.URL{NodeURI("127.0.0.1:1")}, IPs: loop}, false},
	}
	client, err := ca.TLSConfig(devca.Identity{Name: "client", IPs: loop})
	if err != nil {
		t.Fatal(err)
	}
	rc := &remote.Config{}
	WithTLS(client)(rc)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, err := ca.TLSConfig(tc.server)
			if err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(st)))
			done := make(chan struct{})
			go func() { defer close(done); _ = srv.Serve(ln) }()
			defer func() { srv.Stop(); <-done }()
			conn, err := grpc.Dial(addr, rc.DialOptions...) //nolint:staticcheck // grpc v1.60 has no NewClient
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err = conn.Invoke(ctx, "/no.Such/Method", &remote.RemoteMessage{}, &remote.RemoteMessage{})
			switch {
			case tc.ok && status.Code(err) != codes.Unimplemented:
				t.Fatalf("want the call to reach the server (Unimplemented), got %v", err)
			case !tc.ok && (status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "is not for node")):
				t.Fatalf("want the dial refused (server certificate is not for node), got %v", err)
			}
		})
	}
}

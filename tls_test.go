package echopubsub_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/internal/devca"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// tlsHost is node i's loopback address: each node has its own IP, so that a
// certificate (IP SAN) stands for one node only.
func tlsHost(i int) string { return fmt.Sprintf("127.0.0.%d", 21+i) }

// outsiderHost is the address of certificates that belong to no node.
const outsiderHost = "127.0.0.29"

// startTLSTarget starts n nodes over mutual TLS with certificates from ca,
// each subscribed to "match".
func startTLSTarget(t *testing.T, ca *devca.CA, n int) *hostileTarget {
	log, logs := test.CapturingLogger(t, zerolog.InfoLevel)
	h := &hostileTarget{logs: logs}
	var addrs []string
	for i := 0; i < n; i++ {
		tc, err := ca.TLSConfig(devca.Identity{Name: fmt.Sprintf("node%d", i), IPs: []net.IP{net.ParseIP(tlsHost(i))}})
		if err != nil {
			t.Fatal(err)
		}
		system := actor.NewActorSystem(echopubsub.ActorSystemLogger(log.Level(zerolog.WarnLevel)))
		r := remote.NewRemote(system, echopubsub.RemoteConfig(tlsHost(i), 0, log, echopubsub.WithTLS(tc)))
		r.Start()
		nd := &test.Node{System: system, Remote: r, Addr: system.Address(), Faults: test.NewFaults(), Log: log}
		h.nodes = append(h.nodes, nd)
		addrs = append(addrs, nd.Addr)
	}
	for _, nd := range h.nodes {
		nd.Start(t, fastConfig(), echopubsub.WithMembership(cluster.NewStatic(addrs...)))
		h.cs = append(h.cs, nd.Subscribe(t, "match", echopubsub.WithMetadata()))
	}
	waitJoined(t, h.nodes)
	return h
}

// TestTLSThreeNodes: three nodes over mutual TLS deliver every broadcast,
// from every node, to every subscriber in order, with no notice.
func TestTLSThreeNodes(t *testing.T) {
	ca, err := devca.New("echopubsub test cluster")
	if err != nil {
		t.Fatal(err)
	}
	h := startTLSTarget(t, ca, 3)
	const per = 50
	for s := 1; s <= per; s++ {
		for i, nd := range h.nodes {
			if err := nd.PS.Broadcast(nil, "match", &testpb.Stamp{Publisher: fmt.Sprint(i), Seq: uint64(s)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, c := range h.cs {
		test.Eventually(t, 10*time.Second, func() bool { return c.Len() == 3*per },
			func() string { return fmt.Sprintf("node %d: %s", i, c.Describe()) })
		next := map[string]uint64{}
		for _, m := range c.All() {
			d, ok := m.(*messages.Delivery)
			if !ok {
				t.Fatalf("node %d got %T: %s", i, m, c.Describe())
			}
			st := d.Message.(*testpb.Stamp)
			if st.Seq != next[st.Publisher]+1 {
				t.Fatalf("node %d: from publisher %s got %d after %d", i, st.Publisher, st.Seq, next[st.Publisher])
			}
			next[st.Publisher] = st.Seq
		}
	}
}

// tlsConnect opens protoactor's stream to addr with creds and sends a
// connect request claiming address claim. It returns nil when the node
// answered the handshake, else how the connection or stream failed.
func tlsConnect(t *testing.T, addr string, creds credentials.TransportCredentials, claim string) error {
	t.Helper()
	conn, err := grpc.Dial(addr, grpc.WithTransportCredentials(creds)) //nolint:staticcheck // grpc v1.60 has no NewClient
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := remote.NewRemotingClient(conn).Receive(ctx)
	if err != nil {
		return err
	}
	err = stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_ConnectRequest{
		ConnectRequest: &remote.ConnectRequest{ConnectionType: &remote.ConnectRequest_ServerConnection{
			ServerConnection: &remote.ServerConnection{SystemId: "outsider", Address: claim}}}}})
	if err != nil {
		return err
	}
	res, err := stream.Recv()
	if err != nil {
		return err
	}
	if res.GetConnectResponse() == nil {
		return fmt.Errorf("handshake answered %v", res)
	}
	return nil
}

// TestTLSRefusesOutsiders: with WithTLS, only a certificate from the
// cluster CA gets in, and only for the node it names.
func TestTLSRefusesOutsiders(t *testing.T) {
	ca, err := devca.New("echopubsub test cluster")
	if err != nil {
		t.Fatal(err)
	}
	h := startTLSTarget(t, ca, 2)
	addr := h.nodes[0].Addr
	outsider := devca.Identity{Name: "outsider", IPs: []net.IP{net.ParseIP(outsiderHost)}}
	member, err := ca.TLSConfig(outsider) // a valid cluster certificate, for outsiderHost
	if err != nil {
		t.Fatal(err)
	}
	other, err := devca.New("another CA")
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.TLSConfig(outsider)
	if err != nil {
		t.Fatal(err)
	}
	foreign.RootCAs = ca.Pool() // it trusts the cluster; the cluster does not trust it
	own := outsiderHost + ":1"

	t.Run("cluster certificate for its own address connects", func(t *testing.T) {
		if err := tlsConnect(t, addr, credentials.NewTLS(member), own); err != nil {
			t.Fatalf("refused: %v", err)
		}
	})
	refused := []struct {
		name  string
		creds credentials.TransportCredentials
		claim string
		code  codes.Code
	}{
		{"no TLS", insecure.NewCredentials(), own, codes.Unavailable},
		{"no certificate", credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}), own, codes.Unavailable},
		{"another CA's certificate", credentials.NewTLS(foreign), own, codes.Unavailable},
		{"cluster certificate claiming another node", credentials.NewTLS(member), h.nodes[1].Addr, codes.PermissionDenied},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			err := tlsConnect(t, addr, tc.creds, tc.claim)
			if err == nil {
				t.Fatal("the node accepted the connection")
			}
			if status.Code(err) != tc.code {
				t.Errorf("refused with %v, want code %v", err, tc.code)
			}
			h.intact(t)
		})
	}
	t.Run("cluster certificate sending as another node", func(t *testing.T) {
		// A Register under nodes[1]'s name and address with a new
		// incarnation: were it let through, node 0's subscribers would be
		// told nodes[1]'s producer restarted.
		conn, err := grpc.Dial(addr, grpc.WithTransportCredentials(credentials.NewTLS(member))) //nolint:staticcheck // grpc v1.60 has no NewClient
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stream, err := remote.NewRemotingClient(conn).Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		victim := h.nodes[1].Addr
		reg := payload(t, &messages.Register{ProtocolVersion: 1, PubsubName: "scores", ProducerNode: victim, ProducerIncarnation: 7})
		err = stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: &remote.MessageBatch{
			TypeNames: []string{"echopubsub.v1.Register"}, Targets: []*actor.PID{workerPID(addr)},
			Senders:   []*actor.PID{actor.NewPID(victim, "future$1")},
			Envelopes: []*remote.MessageEnvelope{{TypeId: 0, MessageData: reg, Target: 0, Sender: 1}}}}})
		if err != nil {
			t.Fatal(err)
		}
		h.intact(t)
		test.Eventually(t, 5*time.Second, func() bool { return h.logs.Contains("sender address the peer's certificate is not for") },
			test.Sprintf("the node did not log the forged sender"))
	})
}

package echopubsub

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"

	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

const uriScheme = "echopubsub"

// NodeURI is the URI SAN (echopubsub://host:port) that makes a node
// certificate stand for exactly the node at addr, its advertised remote
// address. Without such a SAN a certificate stands for every port of the
// hosts in its IP and DNS SANs (see certAllows).
func NodeURI(addr string) *url.URL { return &url.URL{Scheme: uriScheme, Host: addr} }

// WithTLS makes the remote speak mutual TLS with c, on its server and on its
// dials. Pass it to RemoteConfig:
//
//	tc, err := echopubsub.LoadTLS("ca.pem", "node.pem", "node-key.pem")
//	r := remote.NewRemote(system, echopubsub.RemoteConfig(host, port, zlog, echopubsub.WithTLS(tc)))
//
// c holds this node's certificate (Certificates) and the cluster CA
// (RootCAs; ClientCAs defaults to it). The server requires and verifies a
// client certificate from ClientCAs whatever c.ClientAuth says, so a process
// without a certificate from the cluster CA cannot connect at all; dials
// verify the server's certificate against RootCAs and that it stands for
// the dialed address (certAllows: to the port, with a NodeURI SAN).
// RemoteConfig's guard then checks that every address a peer claims (its
// senders, its connect handshake, the node in its requests and acks) is one
// its certificate stands for (certAllows). A nil c fails every connection.
func WithTLS(c *tls.Config) remote.ConfigOption {
	if c == nil {
		c = &tls.Config{}
	}
	server, client := c.Clone(), c.Clone()
	server.ClientAuth = tls.RequireAndVerifyClientCert
	if server.ClientCAs == nil {
		server.ClientCAs = server.RootCAs
	}
	if server.ClientCAs == nil {
		server.ClientCAs = x509.NewCertPool() // no CA: nothing verifies
	}
	for _, t := range []*tls.Config{server, client} {
		if t.MinVersion < tls.VersionTLS12 {
			t.MinVersion = tls.VersionTLS12
		}
	}
	return func(rc *remote.Config) {
		rc.ServerOptions = append(rc.ServerOptions, grpc.Creds(credentials.NewTLS(server)))
		// Appended after RemoteConfig's insecure default: the last transport
		// credentials given win.
		rc.DialOptions = append(rc.DialOptions, grpc.WithTransportCredentials(nodeCreds{credentials.NewTLS(client)}))
	}
}

// nodeCreds checks, after the TLS handshake of a dial, that the server's
// certificate stands for the address dialed, not only for its host.
type nodeCreds struct {
	credentials.TransportCredentials
}

func (c nodeCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil {
		return nil, nil, err
	}
	ti, ok := info.(credentials.TLSInfo)
	if !ok || len(ti.State.PeerCertificates) == 0 {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("echopubsub: server at %q showed no certificate", authority)
	}
	if cert := ti.State.PeerCertificates[0]; !certAllows(cert, authority) {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("echopubsub: server certificate %s is not for node %q", certName(cert), authority)
	}
	return conn, info, nil
}

func (c nodeCreds) Clone() credentials.TransportCredentials {
	return nodeCreds{c.TransportCredentials.Clone()}
}

// LoadTLS builds the tls.Config WithTLS needs from PEM files: the cluster
// CA certificate, this node's certificate and its private key.
func LoadTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("echopubsub: TLS CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("echopubsub: TLS CA file %q holds no PEM certificate", caFile)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("echopubsub: TLS certificate %q with key %q: %w", certFile, keyFile, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}, nil
}

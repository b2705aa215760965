package main

import (
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/internal/devca"
	"github.com/echopubsub/echopubsub/internal/proc"
	"github.com/echopubsub/echopubsub/test"
)

// TestServeTLS: two nodes with mutual TLS between them (tls.*), TLS on the
// public HTTP server (http.tls_*) and on the admin endpoint with client
// certificates (admin.client_ca): they find each other, /readyz and the
// gateway's client answer over https, and the commands authenticate with
// a client certificate alone.
func TestServeTLS(t *testing.T) {
	ports, err := proc.FreePorts(6)
	if err != nil {
		t.Fatal(err)
	}
	peers := []string{"127.0.0.1:" + strconv.Itoa(ports[0]), "127.0.0.1:" + strconv.Itoa(ports[3])}
	ca, err := devca.New("serve test CA")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	loopback := []net.IP{net.IPv4(127, 0, 0, 1)}
	ids := []devca.Identity{{Name: "operator"}}
	for i, p := range peers {
		ids = append(ids, devca.Identity{Name: "node" + strconv.Itoa(i+1), URIs: []*url.URL{echopubsub.NodeURI(p)}, IPs: loopback})
	}
	if err := ca.WriteFiles(dir, ids...); err != nil {
		t.Fatal(err)
	}
	file := func(name string) string { return filepath.Join(dir, name) }
	extra := func(i int) []string {
		cert, key := file("node"+strconv.Itoa(i+1)+".pem"), file("node"+strconv.Itoa(i+1)+"-key.pem")
		return []string{"--tls-ca", file("ca.pem"), "--tls-cert", cert, "--tls-key", key,
			"--http-tls-cert", cert, "--http-tls-key", key,
			"--admin-tls-cert", cert, "--admin-tls-key", key, "--admin-client-ca", file("ca.pem")}
	}
	client := []string{"--ca", file("ca.pem"), "--cert", file("operator.pem"), "--key", file("operator-key.pem")}
	var nodes []*node
	// After the nodes stopped (cleanups run last first): a healthy start
	// and a normal stop log no warning or error, and every line is one
	// JSON object without a duplicate key.
	t.Cleanup(func() {
		for _, nd := range nodes {
			b, err := os.ReadFile(nd.log)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				if err := test.CheckLogLine([]byte(l)); err != nil {
					t.Errorf("%s: %v: %s", nd.p.Name(), err, l)
				}
				var e struct{ Level string }
				if json.Unmarshal([]byte(l), &e) == nil && (e.Level == "warn" || e.Level == "error") {
					t.Errorf("%s logged at %s on a healthy start or stop: %s", nd.p.Name(), e.Level, l)
				}
			}
		}
	})
	nodes = startNodes(t, ports, peers, 64, "https", extra, client)

	// The commands with a client certificate and no token.
	var h echopubsub.Health
	r := runEnv(t, nodes[0], []string{"ECHOPUBSUB_ADMIN_TOKEN="}, "", "peers", "--json")
	if r.err != nil || json.Unmarshal([]byte(r.out), &h) != nil || len(h.Peers) != 1 || !h.Peers[0].Registered || h.Peers[0].Node != peers[1] {
		t.Fatalf("peers over mTLS: %v %q %s", r.err, r.out, r.errOut)
	}
	// Without a certificate or a token: refused.
	nodes[0].clientArgs = []string{"--ca", file("ca.pem")}
	r = runEnv(t, nodes[0], []string{"ECHOPUBSUB_ADMIN_TOKEN="}, "", "sessions")
	if r.err == nil || !strings.Contains(r.errOut, "401") {
		t.Errorf("sessions with neither certificate nor token: %v %q", r.err, r.errOut)
	}

	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	defer hc.CloseIdleConnections()
	for _, path := range []string{"/readyz", "/healthz", "/echopubsub.js", "/metrics"} {
		resp, err := hc.Get("https://" + nodes[1].http + path)
		if err != nil {
			t.Fatalf("GET %s over TLS: %v", path, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s over TLS: %s", path, resp.Status)
		}
	}
}

package echopubsub_test

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/internal/devca"
	"github.com/echopubsub/echopubsub/test"
)

// TestAdminHandlerMounted: AdminHandler mounted by an application under a
// prefix, with mTLS: a client certificate the server verified is
// authenticated, none is refused; with no credentials configured every
// request is refused; publish is refused unless enabled; streams of a
// store that cannot list them says which store.
func TestAdminHandlerMounted(t *testing.T) {
	nd := test.StartCluster(t, 1, test.FastConfig(), test.WithMemStore(), echopubsub.WithDurableTopics("room:*"))[0]
	ca, err := devca.New("admin test CA")
	if err != nil {
		t.Fatal(err)
	}
	serverTLS, err := ca.TLSConfig(devca.Identity{Name: "admin", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	serverTLS.ClientCAs, serverTLS.ClientAuth = ca.Pool(), tls.VerifyClientCertIfGiven
	clientTLS, err := ca.TLSConfig(devca.Identity{Name: "operator"})
	if err != nil {
		t.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.Handle("/admin/", http.StripPrefix("/admin", echopubsub.AdminHandler(nd.PS, echopubsub.WithAdminClientCerts())))
	mux.Handle("/open/", http.StripPrefix("/open", echopubsub.AdminHandler(nd.PS)))
	srv := httptest.NewUnstartedServer(mux)
	srv.TLS = serverTLS
	srv.StartTLS()
	defer srv.Close()

	withCert := &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS}}
	noCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	defer withCert.CloseIdleConnections()
	defer noCert.CloseIdleConnections()
	for _, tc := range []struct {
		name   string
		c      *http.Client
		method string
		path   string
		code   int
		body   string
	}{
		{"client certificate", withCert, http.MethodGet, "/admin/peers", http.StatusOK, `"live":true`},
		{"sessions", withCert, http.MethodGet, "/admin/sessions", http.StatusOK, `"sessions":[]`},
		{"no client certificate", noCert, http.MethodGet, "/admin/peers", http.StatusUnauthorized, "no verified client certificate"},
		{"nothing configured", withCert, http.MethodGet, "/open/peers", http.StatusUnauthorized, "no authentication configured"},
		{"publish not enabled", withCert, http.MethodPost, "/admin/publish?topic=room:1", http.StatusForbidden, "publishing is not enabled"},
		{"store without StreamLister", withCert, http.MethodGet, "/admin/streams", http.StatusNotImplemented, "*test.MemStore does not list its streams"},
		{"replay without stream", withCert, http.MethodGet, "/admin/replay?from=1", http.StatusBadRequest, "replay needs stream"},
		{"tail from 0", withCert, http.MethodGet, "/admin/tail?topic=room:1&from=0", http.StatusBadRequest, "cursors start at 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(`"x"`))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := tc.c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var b strings.Builder
			_, _ = io.Copy(&b, resp.Body)
			if resp.StatusCode != tc.code || !strings.Contains(b.String(), tc.body) {
				t.Errorf("%s %s: %s %s, want %d with %q", tc.method, tc.path, resp.Status, b.String(), tc.code, tc.body)
			}
		})
	}
}

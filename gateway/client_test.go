package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/echopubsub/echopubsub/gateway"
)

// ClientHandler serves client/echopubsub.js as it is in the module, as a
// JavaScript module (browsers refuse a module of another content type).
func TestClientHandlerServesTheModule(t *testing.T) {
	want, err := os.ReadFile("client/echopubsub.js")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gateway.ClientHandler())
	defer srv.Close()
	res, err := http.Get(srv.URL + "/echopubsub.js")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	got, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/javascript; charset=utf-8" || string(got) != string(want) {
		t.Fatalf("GET: %d %q, %d bytes (want %d)", res.StatusCode, res.Header.Get("Content-Type"), len(got), len(want))
	}
}

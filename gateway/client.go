package gateway

import (
	"bytes"
	_ "embed" // the JavaScript client
	"net/http"
	"time"
)

// clientModule is client/echopubsub.js: the gateway's JavaScript client.
//
//go:embed client/echopubsub.js
var clientModule []byte

// ClientHandler serves the gateway's JavaScript client, client/echopubsub.js
// of this module: one ES module with no build step and no dependencies
// (docs/gateway.md, "JavaScript client"). Serve it beside the gateway, for
// example http.Handle("GET /echopubsub.js", gateway.ClientHandler()), and
// import it from a page:
//
//	import { GatewayClient } from "/echopubsub.js";
//
// It answers every request with the module (conditional and range requests
// as http.ServeContent does); browsers revalidate it on each load.
func ClientHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeContent(w, r, "echopubsub.js", time.Time{}, bytes.NewReader(clientModule))
	})
}

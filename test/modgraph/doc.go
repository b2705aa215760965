// Package modgraph holds the tests about this repository's modules as
// others get them: what `go get github.com/echopubsub/echopubsub` brings
// into an adopter's module (only what the root package imports: no bbolt,
// no coder/websocket, nothing of the test/e2e module's NATS and chromedp,
// and no module the root go.mod requires for its tests alone), and that
// every released module can be got and built from outside the repository,
// and is tidy; and the boundaries between packages: no package under
// internal/ imports the root, and no store builds with another module's
// internal package (boundaries_test.go).
//
// It is a module of its own (test/modgraph, run with GOWORK=off) so that
// its golang.org/x/mod (module zips for the test proxy) stays out of the
// library's go.mod.
package modgraph

// Package modgraph holds one test, about what `go get
// github.com/echopubsub/echopubsub` brings into an adopter's module: only
// what the library imports. The benchmark harness and the browser tests
// live in the test/e2e module, with NATS and chromedp; they must not come
// back into the library's go.mod.
package modgraph

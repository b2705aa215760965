// Package test is EchoPubSub's test kit: in-process clusters on loopback,
// fault injection, a collector actor, a delivery checker that states the
// guarantee as code, and polling helpers that fail at their deadline.
//
// It is imported by tests only; nothing in the library depends on it.
//
// # Where tests live
//
// One rule: a test sits beside the code it tests, in a file named after
// that code's file, unless it needs more than a go test of that package
// can give it.
//
//   - Unit tests: in the package, `<file>_test.go` for `<file>.go`
//     (guard.go: guard_test.go, guard_peers_test.go; store.go's backends:
//     store/bolt, store/postgres). Package-internal tests end in
//     `_internal_test.go`; helpers shared by a package's tests in
//     `*_helpers_test.go`. Examples in `example_*_test.go`.
//   - Integration tests (several nodes in one process, through this kit):
//     in the package whose API they use as a user would (the root package,
//     gateway, store/...), named after what they test (replay_test.go,
//     gateway/cluster_test.go). A test needing a real outside server
//     brings it up itself (store/postgres/pgtest, the Consul agent here).
//     Durable tests of the root package run on MemStore, a node-local
//     store in memory (the root module links no storage backend); a test
//     that needs a backend's files across processes lives in that
//     backend's module (store/bolt/restart_process_test.go).
//   - Tests of what others get: module graphs, go get, the README's
//     main.go: the test/modgraph module and readme_test.go.
//   - Property tests: internal/prop's Check (rapid's API without the
//     dependency: the root go.mod requires no module only tests use).
//   - Browser and end-to-end tests, benchmarks against other systems: the
//     test/e2e module (chromedp, NATS stay out of the library's go.mod).
//   - Soak and chaos tests of real processes: test/chaos (short soaks in
//     go test, planted defects) and test/soak (the long run, make
//     soak-long); sessions on a durable topic with store/bolt or
//     store/postgres: test/e2e/sessionsoak (the backends stay out of the
//     root module; it reuses test/chaos's cluster, faults, soak runner,
//     record and session checker; make soak-sessions for the long run).
//   - Child processes (child nodes of the root's tests, storetest's
//     store nodes, the chaos and session nodes, the benchmark's nodes)
//     speak internal/proc's JSON lines: the parent through proc.Start
//     and Call, the child through proc.Child and proc.Commands.
package test

# The README's two set-up commands are `go run ./cmd/demo` and `make test`.

GO ?= go
# Modules. The library (the root) and the modules released beside it,
# which require released versions of it and one another with no replace
# (go get sees what a user gets; this checkout's go.work takes each from
# here): gateway (the WebSocket gateway: coder/websocket), store/bolt (the
# embedded store: bbolt), store/postgres (pgx), cmd/demo, cmd/echopubsub (the server and its
# inspecting commands: cobra). And test/e2e:
# the benchmark harness, the demo's browser tests and the checks of
# deploy/ with their dependencies (NATS, chromedp, the Kubernetes API
# types), never released. And test/modgraph: the
# tests of what an adopter's `go get` brings (module graphs, go get, tidy),
# a module of its own so that its golang.org/x/mod stays out of the
# library's go.mod (run with GOWORK=off, like the root). `./...` does not
# enter a nested module: every target that means "all of it" runs each.
#
# The root runs with GOWORK=off: against its own go.mod alone, the
# versions a user who imports only the root package builds with (the
# workspace would raise shared dependencies to the other modules'
# versions).
ROOT = env GOWORK=off $(GO)
MODS = gateway store/bolt cmd/demo cmd/echopubsub
E2E = test/e2e
PG = store/postgres
# test/outsidestore: a store written as one outside the repository would
# be (its own module on the public contract only, with a go.work of its
# own), run through store/storetest. Never released.
OUTSIDE = test/outsidestore
MODGRAPH = test/modgraph
# Packages whose tests run one node per process: race-checked here. Tests
# with several nodes in one process cannot be (protoactor's remote.Start
# races on grpclog's global logger); the chaos soak race-checks multi-node
# runs instead, with each node a race-built process (ECHOPUBSUB_CHAOS_RACE;
# test/e2e's session soak too).
RACE_PKGS = ./ringbuf/... ./messages/... ./cluster/... ./supervision/... ./actors/... ./internal/session/...

# Each phase says what it does, how long its last run took, and beats every
# minute while it runs (a fresh machine builds Consul for minutes).
PHASE = $(CURDIR)/.ci/phase

.PHONY: test lint vet tidy deps soak-long soak-plant soak-sessions bench bench-memory bench-scale bench-durable bench-presence

# test installs what the tests need (first run only) and runs every test,
# in every module.
test: deps
	@ECHOPUBSUB_CONSUL="$$(.ci/deps)" && export ECHOPUBSUB_CONSUL && \
	$(PHASE) "test: race-checked packages (one node per process)" $(ROOT) test -race -count=1 -timeout 15m $(RACE_PKGS) && \
	ECHOPUBSUB_CHAOS_RACE=1 $(PHASE) "test: the library (root module: pubsub, sessions, chaos soak)" \
		$(ROOT) test -count=1 -p 1 -timeout 30m ./... && \
	cd $(CURDIR)/$(MODGRAPH) && $(PHASE) "test: test/modgraph (an adopter's module graph, go get, tidy, package boundaries)" \
		$(ROOT) test -count=1 -timeout 15m ./... && cd $(CURDIR) && \
	$(PHASE) "test: modules gateway, store/bolt, cmd/demo, cmd/echopubsub, test/outsidestore" sh -c 'for m in $(MODS) $(OUTSIDE); do (cd $$m && $(GO) test -count=1 -p 1 -timeout 15m ./...) || exit 1; done' && \
	cd $(CURDIR)/$(E2E) && ECHOPUBSUB_CHAOS_RACE=1 $(PHASE) "test: test/e2e (browser demos, promtool, deploy manifests and Dockerfile, benchmark harness, session soak)" \
		$(GO) test -count=1 -p 1 -timeout 15m ./... && \
	cd $(CURDIR)/$(PG) && $(PHASE) "test: store/postgres (a real PostgreSQL 15)" $(GO) test -count=1 -p 1 -timeout 10m ./...

# lint: staticcheck (pinned in .ci/deps) over every module; any finding fails.
lint: deps
	@sc="$$(.ci/deps --staticcheck)" && \
	$(PHASE) "lint: staticcheck v0.8.2, every module" sh -c "GOWORK=off $$sc ./... && for m in $(MODS) $(PG) $(E2E) $(OUTSIDE); do (cd \$$m && $$sc ./...) || exit 1; done && cd $(MODGRAPH) && GOWORK=off $$sc ./..."

deps:
	@.ci/deps >/dev/null

# vet: gofmt, go vet and go mod tidy -diff over every module (what .ci/run
# checks before the tests). The released modules' tidy check is a test
# (test/modgraph: tidy ignores go.work, so it runs against a module
# proxy built from the checkout).
vet:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
	if [ -n "$$unformatted" ]; then echo "not gofmt-formatted:"; echo "$$unformatted"; exit 1; fi
	$(ROOT) vet ./...
	for m in $(MODS) $(PG) $(E2E) $(OUTSIDE); do (cd $$m && $(GO) vet ./...) || exit 1; done
	cd $(MODGRAPH) && $(ROOT) vet ./...
	$(ROOT) mod tidy -diff
	cd $(E2E) && $(GO) mod tidy -diff
	cd $(OUTSIDE) && $(GO) mod tidy -diff
	cd $(MODGRAPH) && $(ROOT) mod tidy -diff
	cd $(MODGRAPH) && $(ROOT) test -count=1 -run 'TestModulesTidy' .

# tidy: go mod tidy in every module (the released ones through the same proxy).
tidy:
	$(ROOT) mod tidy
	cd $(E2E) && $(GO) mod tidy
	cd $(OUTSIDE) && $(GO) mod tidy
	cd $(MODGRAPH) && $(ROOT) mod tidy
	cd $(MODGRAPH) && ECHOPUBSUB_TIDY_WRITE=1 $(ROOT) test -count=1 -run 'TestModulesTidy' .

# The long soak behind docs/reliability.md (as root: namespaces and iptables).
soak-long:
	nice -n 5 $(ROOT) run ./test/soak -messages 1000000 -slow-subscribers 1

# The session soak behind docs/reliability.md "Sessions under chaos" (as
# root): sessions on a durable topic, a bolt file per node and then a shared
# PostgreSQL, 150,000 messages each (make test runs the same at 15,000).
soak-sessions:
	cd $(E2E) && uptime && ECHOPUBSUB_SESSION_SOAK_MESSAGES=150000 nice -n 5 $(GO) test -count=1 -v -timeout 90m \
		-run 'TestSessionSoak$$' ./sessionsoak

# Every planted defect (internal/plant) must fail a short soak (CI runs two).
soak-plant:
	ECHOPUBSUB_PLANT_ALL=1 $(ROOT) test -count=1 -v -run TestSoakCatchesPlantedDefects ./test/chaos

# The benchmark run behind docs/benchmarks.md (the harness is in test/e2e).
bench:
	cd $(E2E) && $(GO) run ./bench -full -doc ../../docs/benchmarks.md

# Node 0's memory with BufferSize 2,000,000 full, at 10 B and 200 B, with
# no GOMEMLIMIT, with Config.MemoryLimit's and with 64 MiB more: the section
# "Producer memory" of docs/benchmarks.md (issue 26 item 4; ~3 minutes).
bench-memory:
	cd $(E2E) && $(GO) run ./bench -memory -memlimit off,auto,auto+64MiB -doc ../../docs/benchmarks.md

# The cost of presence at 100,000 presences over 3 nodes (docs/benchmarks.md,
# "Presence"): one run, about a minute.
bench-presence:
	@uptime; $(ROOT) test -run '^$$' -bench Presence100k -benchtime 1x -timeout 10m ./presence/ | grep -v 'logger.go'

# The cost of a large cluster (docs/scaling.md): N full-mesh nodes in one process.
bench-scale:
	ECHOPUBSUB_SCALE_NODES=4,8,16,32 $(GO) test -run '^$$' -bench ClusterScale -benchtime 20000x -timeout 30m .

# The durable-stream benchmarks behind docs/benchmarks.md "Durable streams"
# (Go benchmarks, one node in one process): the segmented log
# (store/seglog) and bbolt (store/bolt), each with this disk's fdatasync
# probe in the same run and directory (storetest.BenchLocalDurable), then
# JetStream with file storage and fsync per message. The load average is
# printed before each.
BENCH_DURABLE = -run '^$$' -benchtime 2s -count 3
bench-durable:
	@uptime; $(ROOT) test $(BENCH_DURABLE) -bench . ./store/seglog | grep -v 'logger.go'
	@uptime; cd store/bolt && $(GO) test $(BENCH_DURABLE) -bench . . | grep -v 'logger.go'
	@uptime; cd $(E2E) && $(GO) test $(BENCH_DURABLE) -bench 'JetStreamFilePublish/fsync_each=true' ./jetstream/ | grep -v 'logger.go'

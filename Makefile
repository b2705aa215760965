# The README's two set-up commands are `go run ./cmd/demo` and `make test`.

GO ?= go
# Three modules: the library (.); store/postgres, the PostgreSQL store
# (go-gettable: it requires a released root version, and its go.work takes
# the root from this checkout); and test/e2e, which holds the benchmark
# harness and the demo's browser tests with their dependencies (NATS,
# chromedp), so that `go get` of the library pulls none of them. `./...`
# does not enter a nested module: every target that means "all of it"
# runs each.
E2E = test/e2e
PG = store/postgres
# Packages whose tests run one node per process: race-checked here. Tests
# with several nodes in one process cannot be (protoactor's remote.Start
# races on grpclog's global logger); the chaos soak race-checks multi-node
# runs instead, with each node a race-built process (ECHOPUBSUB_CHAOS_RACE).
RACE_PKGS = ./ringbuf/... ./messages/... ./cluster/... ./supervision/... ./actors/... ./internal/session/...

# Each phase says what it does, how long its last run took, and beats every
# minute while it runs (a fresh machine builds Consul for minutes).
PHASE = $(CURDIR)/.ci/phase

.PHONY: test lint vet tidy deps soak-long soak-plant bench

# test installs what the tests need (first run only) and runs every test,
# in every module (root, test/e2e, store/postgres).
test: deps
	@ECHOPUBSUB_CONSUL="$$(.ci/deps)" && export ECHOPUBSUB_CONSUL && \
	$(PHASE) "test: race-checked packages (one node per process)" $(GO) test -race -count=1 -timeout 15m $(RACE_PKGS) && \
	ECHOPUBSUB_CHAOS_RACE=1 $(PHASE) "test: library module (root, gateway, stores, chaos soak), one package at a time" \
		$(GO) test -count=1 -p 1 -timeout 30m ./... && \
	cd $(E2E) && $(PHASE) "test: test/e2e (browser demos, promtool, benchmark harness)" $(GO) test -count=1 -p 1 -timeout 15m ./... && \
	cd $(CURDIR)/$(PG) && $(PHASE) "test: store/postgres (a real PostgreSQL 15)" $(GO) test -count=1 -p 1 -timeout 10m ./...

# lint: staticcheck (pinned in .ci/deps) over every module; any finding fails.
lint: deps
	@sc="$$(.ci/deps --staticcheck)" && \
	$(PHASE) "lint: staticcheck v0.8.2, every module" sh -c "$$sc ./... && cd $(E2E) && $$sc ./... && cd $(CURDIR)/$(PG) && $$sc ./..."

deps:
	@.ci/deps >/dev/null

# vet: gofmt, go vet and go mod tidy -diff over every module (what .ci/run
# checks before the tests). store/postgres's tidy check is a test
# (internal/modgraph: tidy ignores go.work, so it runs against a module
# proxy built from the checkout).
vet:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
	if [ -n "$$unformatted" ]; then echo "not gofmt-formatted:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	cd $(E2E) && $(GO) vet ./...
	$(GO) mod tidy -diff
	cd $(E2E) && $(GO) mod tidy -diff
	cd $(PG) && $(GO) vet ./...
	$(GO) test -count=1 -run 'TestPostgresModuleTidy' ./internal/modgraph

# tidy: go mod tidy in every module (store/postgres through the same proxy).
tidy:
	$(GO) mod tidy
	cd $(E2E) && $(GO) mod tidy
	ECHOPUBSUB_TIDY_WRITE=1 $(GO) test -count=1 -run 'TestPostgresModuleTidy' ./internal/modgraph

# The long soak behind docs/reliability.md (as root: namespaces and iptables).
soak-long:
	nice -n 5 $(GO) run ./test/soak -messages 1000000 -slow-subscribers 1

# Every planted defect (internal/plant) must fail a short soak (CI runs two).
soak-plant:
	ECHOPUBSUB_PLANT_ALL=1 $(GO) test -count=1 -v -run TestSoakCatchesPlantedDefects ./test/chaos

# The benchmark run behind docs/benchmarks.md (the harness is in test/e2e).
bench:
	cd $(E2E) && $(GO) run ./bench -full -doc ../../docs/benchmarks.md

# The README's two set-up commands are `go run ./cmd/demo` and `make test`.

GO ?= go
# Packages whose tests run one node per process: race-checked here. Tests
# with several nodes in one process cannot be (protoactor's remote.Start
# races on grpclog's global logger); the chaos soak race-checks multi-node
# runs instead, with each node a race-built process (ECHOPUBSUB_CHAOS_RACE).
RACE_PKGS = ./ringbuf/... ./messages/... ./cluster/... ./supervision/... ./actors/...

.PHONY: test deps soak-long soak-plant bench

# test installs what the tests need (first run only) and runs every test,
# the PostgreSQL store's module (cluster/pgstore, its own go.mod) included.
test: deps
	ECHOPUBSUB_CONSUL="$$(.ci/deps)" && export ECHOPUBSUB_CONSUL && \
	$(GO) test -race -count=1 -timeout 15m $(RACE_PKGS) && \
	ECHOPUBSUB_CHAOS_RACE=1 $(GO) test -count=1 -p 1 -timeout 30m ./... && \
	cd cluster/pgstore && $(GO) test -count=1 -p 1 -timeout 10m ./...

deps:
	@.ci/deps >/dev/null

# The long soak behind docs/reliability.md (as root: namespaces and iptables).
soak-long:
	nice -n 5 $(GO) run ./test/soak -messages 1000000 -slow-subscribers 1

# Every planted defect (internal/plant) must fail a short soak (CI runs two).
soak-plant:
	ECHOPUBSUB_PLANT_ALL=1 $(GO) test -count=1 -v -run TestSoakCatchesPlantedDefects ./test/chaos

# The benchmark run behind docs/benchmarks.md.
bench:
	$(GO) run ./test/bench -full -doc docs/benchmarks.md

# The README's two set-up commands are `go run ./cmd/demo` and `make test`.

GO ?= go
# Packages whose tests run one node per process: race-checked.
RACE_PKGS = ./ringbuf/... ./messages/... ./cluster/... ./supervision/... ./actors/...

.PHONY: test deps race all-tests

# test installs what the tests need (first run only) and runs every test.
test: deps
	ECHOPUBSUB_CONSUL="$$(.ci/deps)" && export ECHOPUBSUB_CONSUL && \
	$(GO) test -race -count=1 -timeout 15m $(RACE_PKGS) && \
	$(GO) test -count=1 -p 1 -timeout 30m ./...

deps:
	@.ci/deps >/dev/null

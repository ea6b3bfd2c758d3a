# outbox-canary: `make help` lists the targets.
SHELL := /bin/bash
# pipefail: `go test | tee` must fail when the tests fail.
.SHELLFLAGS := -eo pipefail -c
GO ?= go
PKG := github.com/outbox-canary/outbox-canary
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X $(PKG)/internal/version.Version=$(VERSION) -X $(PKG)/internal/version.Revision=$(REVISION)
BIN := bin

.DEFAULT_GOAL := help

-include deploy/local/stack.mk

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | sort | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-12s %s\n", $$1, $$2}'

.PHONY: build
build: ## build bin/outbox-canary and bin/outbox-relay
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/outbox-canary ./cmd/outbox-canary
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/outbox-relay ./cmd/outbox-relay

.PHONY: test
# Tests named TestDisruptive* stop or restart the shared servers, so they run
# after the others, one package at a time.
test: stack-up ## start the local stack (installing what it needs) and run every test on it
	$(GO) vet ./...
	@echo "== promtool: generated rules checked, scenario suites (quiet vs stalled, routing, tickets, dead man, recovery) =="
	$(GO) test -count=1 -v ./alerts/
	@echo "== every other package, on the local stack =="
	$(GO) test -count=1 -timeout 15m -skip 'TestDisruptive' $$($(GO) list ./... | grep -v '/alerts$$')
	@echo "== tests that stop or restart the shared servers, one package at a time =="
	$(GO) test -count=1 -timeout 10m -p 1 -run 'TestDisruptive' ./...

.PHONY: test-unit
test-unit: ## run the tests that need no servers (integration tests skip)
	OUTBOX_CANARY_STACK_ENV=/nonexistent $(GO) test -count=1 ./...

.PHONY: bench
bench: ## run the benchmarks and write the figures to docs/benchmarks.txt
	$(GO) test -run '^$$' -bench . -benchmem ./... | tee docs/benchmarks.txt

.PHONY: generate
generate: ## rewrite the generated files (example rules, dashboards, docs/metrics.md, docs/configuration.md)
	$(GO) run ./cmd/outbox-canary rules --config.file examples/outbox-canary.yml --format rules --out examples/rules/outbox-canary.rules.yml
	$(GO) run ./cmd/outbox-canary rules --config.file examples/outbox-canary.yml --format prometheusrule --out examples/rules/outbox-canary.prometheusrule.yml
	$(GO) run ./cmd/outbox-canary rules --config.file examples/outbox-canary.yml --format alertmanager --out examples/rules/outbox-canary.alertmanager.yml
	$(GO) run ./cmd/outbox-canary dashboards --config.file examples/outbox-canary.yml --out examples/dashboards
	$(GO) test ./cmd/outbox-canary/ -run TestMetricsDoc -update
	$(GO) test ./dashboards/ -update
	$(GO) test ./internal/config/ -run TestConfigurationReference -update

.PHONY: lint
lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change: $$out"; exit 1; fi
	$(GO) vet ./...

.PHONY: demo
demo: stack-up build ## three live pipelines (two polling relays, one Debezium) and the prober: a line per canary until Ctrl-C
	deploy/local/demo.sh

# outbox-canary: `make help` lists the targets.
SHELL := /bin/bash
# pipefail: `go test | tee` must fail when the tests fail.
.SHELLFLAGS := -eo pipefail -c
GO ?= go
PKG := github.com/outbox-canary/outbox-canary
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
# -s -w: no symbol table or DWARF (stack traces keep their names): the
# binary is 2/3 of its size. The same flags as
# .goreleaser.yaml and deploy/Dockerfile (through this target).
LDFLAGS := -s -w -X $(PKG)/internal/version.Version=$(VERSION) -X $(PKG)/internal/version.Revision=$(REVISION)
# Build tags that leave out code the binaries never run, 2.0 MB of the
# 23.8 MB binary (docs/image.md): net/http's bundled HTTP/2 (the servers
# and clients here speak HTTP/1.1; a scrape over TLS negotiates it) and
# pgx's table of Go types for arguments of unknown type, which only the
# exec and simple-protocol query modes consult and internal/postgres
# registers for the types the prober sends. The same tags in
# .goreleaser.yaml and internal/stacktest (deploy/check compares them).
TAGS := nethttpomithttp2,nopgxregisterdefaulttypes
BIN := bin
# TEST_OUTPUT keeps what tests save for people to look at (go test -outputdir):
# the status page's screenshot during a stall, e2e/statuspage_test.go.
TEST_OUTPUT := $(CURDIR)/test-output

.DEFAULT_GOAL := help

-include deploy/local/stack.mk

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | sort | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-12s %s\n", $$1, $$2}'

.PHONY: build
# Static, without cgo, as the image builds it: nothing here needs libc, and
# a static binary runs on any Linux host the systemd unit lands on.
# -trimpath: no build machine paths in the binary (and reproducible builds).
build: export CGO_ENABLED = 0
build: ## build bin/outbox-canary and bin/outbox-relay
	$(GO) build -trimpath -tags '$(TAGS)' -ldflags '$(LDFLAGS)' -o $(BIN)/outbox-canary ./cmd/outbox-canary
	$(GO) build -trimpath -tags '$(TAGS)' -ldflags '$(LDFLAGS)' -o $(BIN)/outbox-relay ./cmd/outbox-relay

.PHONY: test
# Tests named TestDisruptive* stop or restart the shared servers, so they run
# after the other packages, one package at a time.
# SUBMAKE is $(MAKE) under a name make does not look for: a recipe line that
# names $(MAKE) runs even under make -n, and this one runs every test.
SUBMAKE = $(MAKE)
# The image test (e2e/image_test.go) runs the image `make image` built.
test: export OUTBOX_CANARY_IMAGE = $(IMAGE)
test: stack-up ## start the local stack (installing what it needs), build the image and run every test on it
	@mkdir -p $(TEST_OUTPUT)
	@# The promtool suites (alerts/) are CPU and need no server but their
	@# own Alertmanagers: they start first and run beside everything else
	@# (the deploy checks, the image build, vet, the packages on the stack,
	@# and the disruptive tests, which restart servers alerts/ does not
	@# use), so make test takes about the longer of the two, not their
	@# sum, and the CPU the stack's tests leave idle while they wait on
	@# servers goes to promtool. -parallel 8: the Alertmanager tests wait
	@# on real time beside the promtool runs, which
	@# alerts/promtool_test.go holds to one per CPU. -p 4 for the packages
	@# on the stack: their tests mostly wait on servers and real time, so
	@# e2e, prober and cmd/outbox-canary overlap instead of queueing two
	@# at a time behind GOMAXPROCS.
	@echo "== $$(date +%T) alerts/ (promtool: generated rules checked, scenario suites; Alertmanager routing) in the background: $(TEST_OUTPUT)/alerts.log =="
	@set +e; \
	$(GO) test -count=1 -timeout 30m -parallel 8 -v ./alerts/ >$(TEST_OUTPUT)/alerts.log 2>&1 & alerts=$$!; \
	trap 'kill $$alerts 2>/dev/null' INT TERM; \
	$(SUBMAKE) --no-print-directory IMAGE=$(IMAGE) test-deploy image && \
	$(GO) vet ./... && \
	echo "== $$(date +%T) every other package, on the local stack (what tests save, such as the status page's screenshot: $(TEST_OUTPUT)/) ==" && \
	$(GO) test -count=1 -timeout 15m -p 4 -skip 'TestDisruptive' -outputdir $(TEST_OUTPUT) $$($(GO) list ./... | grep -v '/alerts$$') && \
	echo "== $$(date +%T) tests that stop or restart the shared servers, one package at a time ==" && \
	$(GO) test -count=1 -timeout 10m -p 1 -run 'TestDisruptive' $$($(GO) list ./... | grep -v '/alerts$$'); rc=$$?; \
	echo "== $$(date +%T) waiting for alerts/ =="; \
	wait $$alerts; alerts_rc=$$?; \
	echo "== $$(date +%T) alerts/ (the whole log: $(TEST_OUTPUT)/alerts.log) =="; \
	if [ $$alerts_rc -ne 0 ]; then cat $(TEST_OUTPUT)/alerts.log; else grep -E '^(--- |ok|PASS)' $(TEST_OUTPUT)/alerts.log; fi; \
	[ $$rc -eq 0 ] && [ $$alerts_rc -eq 0 ]

.PHONY: test-deploy
# deploy/check is a Go module of its own, so Helm and client-go never reach
# the service's module. It needs no server; systemd-analyze comes from
# Debian's systemd package, installed here when missing.
test-deploy: ## check deploy/: the Helm chart (lint, strict decoding, Pod Security, kube-score), the systemd unit, the Dockerfile
	@command -v systemd-analyze >/dev/null || { \
		echo "== installing Debian's systemd package (systemd-analyze) =="; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get -o DPkg::Lock::Timeout=300 -q update >/dev/null && \
		apt-get -o DPkg::Lock::Timeout=300 -q install -y --no-install-recommends systemd >/dev/null; }
	@echo "== deploy/: Helm chart, kube-score, systemd unit, Dockerfile =="
	cd deploy/check && $(GO) vet ./... && $(GO) test -count=1 -v ./...

.PHONY: release-check
# GoReleaser is built from the Go module proxy (v2.16.0: the last release
# whose go.mod accepts Go 1.26 and whose modules the proxy serves here); the
# first build takes about 4 minutes, later runs about 2 s. Not part of test.
release-check: ## validate .goreleaser.yaml with goreleaser check
	$(GO) run github.com/goreleaser/goreleaser/v2@v2.16.0 check

# IMAGE is what `make image` tags; the Helm chart's image.registry,
# image.repository and image.tag are its parts (docs/image.md).
IMAGE ?= localhost/outbox-canary:$(VERSION)

.PHONY: image
image: ## build the container image from the static binary on an empty base, no registry needed (podman or docker; installs Debian's podman where neither runs)
	VERSION=$(VERSION) REVISION=$(REVISION) IMAGE=$(IMAGE) deploy/image.sh build

.PHONY: image-scan
image-scan: ## list what is in the image `make image` built: files, user, labels, size; fails on a shell or a package manager
	IMAGE=$(IMAGE) deploy/image.sh scan

.PHONY: image-release
image-release: ## build the image from deploy/Dockerfile (needs a registry: GOLANG_DIGEST and DISTROLESS_DIGEST, see there)
	@if [ -z "$(GOLANG_DIGEST)" ] || [ -z "$(DISTROLESS_DIGEST)" ]; then \
		echo "image-release: set GOLANG_DIGEST=sha256:... and DISTROLESS_DIGEST=sha256:... (deploy/Dockerfile says how to read them)"; exit 1; fi
	$(or $(CONTAINER_ENGINE),docker) build -f deploy/Dockerfile \
		--build-arg GOLANG_DIGEST=$(GOLANG_DIGEST) --build-arg DISTROLESS_DIGEST=$(DISTROLESS_DIGEST) \
		--build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) --build-arg CREATED=$$(git log -1 --format=%cI) \
		-t $(or $(RELEASE_IMAGE),ghcr.io/outbox-canary/outbox-canary:$(VERSION)) .

.PHONY: detect
# Not part of test: it takes over an hour, and it stops and restarts the
# stack's Kafka Connect worker and Kafka, so run it on a stack of your own
# (STACK_DIR=$$PWD/.stack-detect PG_PORT_BASE=... KAFKA_PORT_BASE=...
# CONNECT_PORT_BASE=..., see deploy/local/stack.sh). DETECT_SCENARIOS picks
# scenarios, separated by spaces or commas (relay-stall, connect-stopped,
# relay-delay, pause-20s, second-stall, quiet-30m, kafka-down,
# connector-paused, flapping-relay); the others' results in
# docs/detection.json are kept.
DETECT_SCENARIOS ?= all
detect_comma := ,
detect_space := $(subst ,, )
DETECT_LIST = $(subst $(detect_space),$(detect_comma),$(strip $(DETECT_SCENARIOS)))
DETECT_COMMAND = $(strip $(foreach v,STACK_DIR PG_PORT_BASE KAFKA_PORT_BASE CONNECT_PORT_BASE MYSQL_PORT_BASE,$(if $($(v)),$(v)=$($(v)))) make detect $(if $(filter-out all,$(DETECT_LIST)),DETECT_SCENARIOS=$(DETECT_LIST)))
detect: stack-up ## measure detection at production settings (over an hour; stops the stack's Kafka Connect and Kafka) and write docs/detection.md
	OUTBOX_CANARY_STACK_ENV=$(abspath $(or $(STACK_DIR),.stack))/env OUTBOX_CANARY_DETECT='$(DETECT_LIST)' \
	OUTBOX_CANARY_DETECT_COMMAND='$(DETECT_COMMAND)' \
	$(GO) test -count=1 -v -timeout 0 -run '^TestDetect$$' ./e2e/

.PHONY: test-unit
test-unit: ## run the tests that need no servers (integration tests skip)
	OUTBOX_CANARY_STACK_ENV=/nonexistent $(GO) test -count=1 ./...

.PHONY: fuzz-judge
fuzz-judge: ## run the judge's model test on 100,000 random schedules (make test runs 2,000), and fuzz the decoders
	$(GO) test -count=1 -timeout 60m -run 'TestModel' ./prober/judge/ -model.runs=100000 -v
	$(GO) test -run '^$$' -fuzz FuzzSignerDecode -fuzztime 60s ./prober/
	$(GO) test -run '^$$' -fuzz FuzzLoad -fuzztime 60s ./internal/config/

.PHONY: bench
# The load averages go in as benchstat configuration lines: on a shared
# machine they say how far to trust the figures.
bench: ## run the benchmarks and write the figures to docs/benchmarks.txt
	{ echo "loadavg-before: $$(cut -d' ' -f1-3 /proc/loadavg)"; \
	$(GO) test -run '^$$' -bench . -benchmem $$(git grep -l '^func Benchmark' -- '*_test.go' | xargs -n1 dirname | sort -u | sed 's,^,./,'); \
	echo "loadavg-after: $$(cut -d' ' -f1-3 /proc/loadavg)"; } | tee docs/benchmarks.txt

.PHONY: bench-rules
# Not part of test: the generated rules of 300 pipelines (the example's four
# repeated), this revision's and BENCH_RULES_BEFORE's (default 6360987, the
# last with rules per SLO), each on a Prometheus of its own, both fed the
# same prober's real series, for about 6 minutes; then both revisions' rule
# count and size at BENCH_RULES_SIZES pipelines (default 3,300,3000; none
# skips it); BENCH_RULES_HISTORY (e.g. 24h, at BENCH_RULES_HISTORY_STEP,
# default 15s) backfills the series the long windows read first. Needs no
# stack: Prometheus and promtool from PATH. Writes docs/benchmarks.md
# (e2e/benchrules_test.go).
BENCH_RULES_COMMAND = $(strip $(foreach v,BENCH_RULES_BEFORE BENCH_RULES_SIZES BENCH_RULES_PIPELINES BENCH_RULES_WARMUP_CYCLES BENCH_RULES_CYCLES BENCH_RULES_HISTORY BENCH_RULES_HISTORY_STEP,$(if $($(v)),$(v)=$($(v)))) make bench-rules)
bench-rules: ## measure rule-group evaluation of 300 pipelines' rules on a real Prometheus (about 6 min) and write docs/benchmarks.md
	OUTBOX_CANARY_BENCH_RULES=1 OUTBOX_CANARY_BENCH_RULES_COMMAND='$(BENCH_RULES_COMMAND)' \
	$(GO) test -tags '$(TAGS)' -count=1 -v -timeout 0 -run '^TestBenchRule(Evaluation|Size)$$' ./e2e/

.PHONY: bench-service
# Not part of test: at its defaults it runs about 40 minutes (10 pipelines at
# @every 1s for 15 minutes, 300 at @every 10s for 12, 2 M foreign messages)
# and loads the machine, so run it on a stack of your own, started first
# (STACK_DIR=$$PWD/.stack-bench PG_PORT_BASE=... KAFKA_PORT_BASE=...
# CONNECT_PORT_BASE=... deploy/local/stack.sh up); it refuses when that
# stack is not up. BENCH_SCENARIOS picks scenarios (steady, scale, foreign,
# consume: the prober's consume stamp against kcat, about 10 minutes);
# the others' results in docs/benchmarks.json are kept. Sizes and durations:
# BENCH_PIPELINES, BENCH_MINUTES, BENCH_SCHEDULE, BENCH_RELAYS,
# BENCH_SCALE_PIPELINES, BENCH_SCALE_MINUTES, BENCH_SCALE_SCHEDULE,
# BENCH_SCALE_RELAYS, BENCH_PARTITIONS, BENCH_WINDOW_MINUTES, BENCH_WARMUP,
# BENCH_STRACE_SECONDS, BENCH_SCRAPE_EVERY, BENCH_CANARY_BIN (another build's prober),
# BENCH_CANARY_REVISION, BENCH_FOREIGN_MESSAGES, BENCH_CONSUME_CANARIES,
# BENCH_CONSUME_SCALE_PIPELINES, BENCH_CONSUME_MEASURED, BENCH_CONSUME_SCHEDULE
# (e2e/benchservice_test.go, e2e/benchconsume_test.go).
BENCH_SCENARIOS ?= all
BENCH_STACK_ENV = $(abspath $(or $(STACK_DIR),.stack))/env
BENCH_COMMAND = $(strip $(foreach v,STACK_DIR BENCH_PIPELINES BENCH_MINUTES BENCH_SCHEDULE BENCH_RELAYS BENCH_SCALE_PIPELINES BENCH_SCALE_MINUTES BENCH_SCALE_SCHEDULE BENCH_SCALE_RELAYS BENCH_PARTITIONS BENCH_SCRAPE_EVERY BENCH_CANARY_REVISION BENCH_FOREIGN_MESSAGES BENCH_CONSUME_CANARIES BENCH_CONSUME_SCALE_PIPELINES BENCH_CONSUME_MEASURED BENCH_CONSUME_SCHEDULE,$(if $($(v)),$(v)=$($(v)))) make bench-service $(if $(filter-out all,$(BENCH_SCENARIOS)),BENCH_SCENARIOS=$(BENCH_SCENARIOS)))
bench-service: ## run the whole service with N pipelines and relays on a running stack (about 40 min) and write docs/benchmarks.md
	@STACK_DIR=$(abspath $(or $(STACK_DIR),.stack)) bash deploy/local/stack.sh status >/dev/null 2>&1 || { \
		echo "bench-service: the stack of $(BENCH_STACK_ENV) is not up; start it first, on ports of its own, e.g."; \
		echo "  STACK_DIR=\$$PWD/.stack PG_PORT_BASE=58320 KAFKA_PORT_BASE=59092 CONNECT_PORT_BASE=58083 deploy/local/stack.sh up"; exit 1; }
	OUTBOX_CANARY_STACK_ENV=$(BENCH_STACK_ENV) OUTBOX_CANARY_BENCH_SERVICE='$(BENCH_SCENARIOS)' \
	OUTBOX_CANARY_BENCH_SERVICE_COMMAND='$(BENCH_COMMAND)' \
	$(GO) test -count=1 -v -timeout 0 -run '^TestBenchService$$' ./e2e/

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
demo: stack-up build ## four live pipelines (two polling relays, Debezium on PostgreSQL and on MariaDB) and the prober: a line per canary until Ctrl-C
	deploy/local/demo.sh

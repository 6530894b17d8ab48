# taskport: `make run` starts the local stack, `make test` runs every test.
# Both install what they need first (`make tools`).

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO          ?= go
GOBIN       := $(shell $(GO) env GOPATH)/bin
TEMPORAL    := $(GOBIN)/temporal
STATICCHECK := $(GOBIN)/staticcheck
FLOWCHECK   := $(GOBIN)/flowcheck
# The Temporal CLI (dev server + UI) from the Go module proxy, built from
# tools/temporalcli: its go.mod pins the CLI (v1.5.1; v1.9.1's go.mod has a
# replace directive, which the proxy's build refuses) and raises the dev
# server's SQLite driver, modernc.org/sqlite, from v1.34.1 to TEMPORAL_CLI_SQLITE.
# v1.34.1 can interrupt a statement that started after the canceled one ended;
# the in-memory database's single connection then failed every statement
# ("interrupted (9)") and the server lost its namespace mid-suite. It is built
# once into GOPATH/bin, outside the clone, and reused while its embedded
# module list names that driver version (`go version -m`).
TEMPORAL_CLI_MODULE := tools/temporalcli
TEMPORAL_CLI_SQLITE := v1.51.0
# The production-shaped server of the tests (internal/testkit/temporalserver):
# temporal-server and its SQL schema tool from the same module version.
# `go install` names them after their folders (server, sql), so they are
# built into a temporary GOBIN and renamed; installing them also leaves the
# module's source (schema/, config/) in GOMODCACHE, where the tests read it.
TEMPORAL_SERVER_VERSION := v1.32.0
TEMPORAL_SERVER   := $(GOBIN)/temporal-server
TEMPORAL_SQL_TOOL := $(GOBIN)/temporal-sql-tool
STATICCHECK_VERSION  := v0.8.2
# Debian packages: the downloader end-to-end test (qbittorrent-nox,
# mktorrent), the image (ca-certificates: the CA bundle it ships), the
# pod rehearsal (runc: runs the image as the manifests say) and the admin's
# browser test (chromium).
APT_PACKAGES := qbittorrent-nox mktorrent ca-certificates runc chromium

# Tests use this server when it answers (CI: the local server); otherwise
# leave TEST_DATABASE_URL unset and testcontainers starts Postgres in Docker.
LOCAL_PG := postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable
TEST_DATABASE_URL ?= $(shell pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null && echo '$(LOCAL_PG)')
export TEST_DATABASE_URL

TEST_FLAGS ?= -race -count=1 -timeout 40m
# Separate Go modules (deploy checks, tools, the DBOS comparison) keep their
# heavy dependencies out of the main module's go.mod. bench/ holds no tests:
# it is vetted by lint and run on demand (`make bench`).
SUBMODULES := $(filter-out ./$(TEMPORAL_CLI_MODULE),$(shell find . -mindepth 2 -name go.mod -not -path './.cache/*' -exec dirname {} \; | sort))
TEST_SUBMODULES := $(filter-out ./bench,$(SUBMODULES))

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  make %-8s %s\n", $$1, $$2}'

.PHONY: tools
tools: temporal-cli $(TEMPORAL_SERVER) $(TEMPORAL_SQL_TOOL) temporal-server-source $(STATICCHECK) apt-packages ## install the Temporal CLI, temporal-server + its SQL tool, staticcheck and the Debian packages the tests need

# A binary built before the driver was raised is rebuilt, not reused.
.PHONY: temporal-cli
temporal-cli:
	@if ! $(GO) version -m $(TEMPORAL) 2>/dev/null | grep -qE '^\s+dep\s+modernc.org/sqlite\s+$(TEMPORAL_CLI_SQLITE)\s'; then \
	  echo "building the Temporal CLI ($(TEMPORAL_CLI_MODULE)/go.mod) into $(GOBIN) (several minutes, once)"; \
	  cd $(TEMPORAL_CLI_MODULE) && GOFLAGS= $(GO) build -o $(TEMPORAL) github.com/temporalio/cli/cmd/temporal; \
	fi

$(TEMPORAL_SERVER) $(TEMPORAL_SQL_TOOL) &:
	@echo "building temporal-server and temporal-sql-tool $(TEMPORAL_SERVER_VERSION) into $(GOBIN) (10-15 minutes, once)"
	tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	GOFLAGS= GOBIN="$$tmp" $(GO) install go.temporal.io/server/cmd/server@$(TEMPORAL_SERVER_VERSION) go.temporal.io/server/cmd/tools/sql@$(TEMPORAL_SERVER_VERSION); \
	mv "$$tmp/server" $(TEMPORAL_SERVER); mv "$$tmp/sql" $(TEMPORAL_SQL_TOOL)

# The binaries may outlive a cleaned module cache; the schema and base
# config come from the module's source (a no-op when it is there).
.PHONY: temporal-server-source
temporal-server-source:
	@GOFLAGS= $(GO) mod download go.temporal.io/server@$(TEMPORAL_SERVER_VERSION)

$(STATICCHECK):
	GOFLAGS= $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

.PHONY: apt-packages
apt-packages:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else echo "missing Debian packages:$$missing (sudo apt-get install$$missing)"; exit 1; fi; \
	fi

.PHONY: test
test: tools ## run every test against real Postgres, a Temporal dev server and qBittorrent
	@if [ -z "$$TEST_DATABASE_URL" ]; then echo "TEST_DATABASE_URL unset and no server on 127.0.0.1:5432: tests will try testcontainers"; fi
	$(GO) test $(TEST_FLAGS) ./...
	@for m in $(TEST_SUBMODULES); do echo "== $$m"; (cd $$m && $(GO) test -count=1 ./...); done

.PHONY: lint
lint: $(STATICCHECK) ## gofmt, go vet, staticcheck, flowcheck (handler determinism)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...
	@for m in $(SUBMODULES); do echo "== vet $$m"; (cd $$m && $(GO) vet ./...); done
	cd tools/flowcheck && $(GO) build -o $(FLOWCHECK) ./cmd/flowcheck
	$(FLOWCHECK) ./workflows/...

# `make run` keeps its state (library, downloads, Temporal history) in
# .cache/run and its business tables in the taskport database, created on
# first use.
DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/taskport?sslmode=disable
export DATABASE_URL

.PHONY: bench
bench: ## benchmarks: lease engine, lease engine at backlogs of 1k/100k/1M scheduled runs (TASKPORT_BACKLOG_SIZES), claim and queue depth beside 1M ready runs nobody serves (TASKPORT_UNSERVED_ROWS), Temporal adapter vs raw SDK (closed loop in one process; open loop with each side its own cold process, on the dev server and the Postgres-persisted server), outbox latency, table sizes under retention (TASKPORT_STEADY_MINUTES=30 for the long run), lease engine vs DBOS in closed and open loop and burning down a backlog, EnqueueMany vs Enqueue vs River InsertMany, EnqueueMany with keys already taken, EnqueueMany vs River InsertManyFast each in its own process, lease engine vs River burning down 50k no-op jobs (at the default claim batch, and configured for a drain as River's bench configures River), Temporal takeover after SIGKILL/SIGSTOP on servers with default settings (prints tables)
	$(GO) test -run '^$$' -bench 'Throughput|EnqueueToFirstStep|EnqueueToLastStep|SignalToWake' -benchtime 2000x ./leaseadapter/
	$(GO) test -run '^$$' -bench Backlog -benchtime 1x -timeout 30m ./leaseadapter/
	$(GO) test -run '^$$' -bench ClaimBesideUnserved -benchtime 1x -timeout 20m ./leaseadapter/
	$(GO) test -run '^$$' -bench 'AdapterVsRawSDK$$' -benchtime 7x ./temporaladapter/
	cd bench && $(GO) run ./cmd/adaptervsraw -server dev -runs 320 -rounds 5 -db "$$TEST_DATABASE_URL"
	cd bench && $(GO) run ./cmd/adaptervsraw -server pg -runs 320 -rounds 3 -db "$$TEST_DATABASE_URL"
	$(GO) test -run '^$$' -bench CommitToRunStart -benchtime 200x ./outbox/ ./app/
	$(GO) test -run '^$$' -bench SteadyRetention -benchtime 1x -timeout 60m ./retention/
	cd bench && $(GO) run ./cmd/compare -n 3000 -rounds 5 -modes closed,open,burndown -db "$$TEST_DATABASE_URL"
	cd bench && $(GO) run ./cmd/compare enqueue -n 20000 -batch 1000 -rounds 5 -db "$$TEST_DATABASE_URL"
	cd bench && $(GO) run ./cmd/compare enqueue -separate 'lease EnqueueMany,river InsertManyFast' -n 100000 -batch 1000 -rounds 3 -db "$$TEST_DATABASE_URL"
	TASKPORT_SERVER_DEFAULTS=1 TASKPORT_SOAK=5 $(GO) test -count=1 -timeout 30m -run 'TestFaults/^(temporal|temporal-pg)$$/^(kill_worker_mid_step|sigstop_past_lease_commit_fenced)$$' -v ./test/ | grep -v '^time='
	cd bench && $(GO) run ./cmd/compare taken -batches 20 -batch 1000 -rounds 5 -db "$$TEST_DATABASE_URL"
	cd bench && $(GO) run ./cmd/compare burndown -n 50000 -rounds 3 -db "$$TEST_DATABASE_URL"
	cd bench && $(GO) run ./cmd/compare burndown -n 50000 -rounds 3 -concurrency 512 -claim-batch 256 -db "$$TEST_DATABASE_URL"

# `make image` writes build/image/oci (OCI layout) and
# build/image/taskport.tar (`docker load`), offline, from Go.
.PHONY: image
image: ## build the worker image from Go, offline: build/image/oci and build/image/taskport.tar
	cd deploy && $(GO) run ./cmd/image -repo .. -out ../build/image

.PHONY: run
run: temporal-cli apt-packages ## start the local stack: Temporal dev server + UI, worker, dispatcher, admin, and a demo
	$(GO) run ./cmd/taskport-dev --temporal-cli $(TEMPORAL) $(RUN_ARGS)

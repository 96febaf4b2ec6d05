# proxy-operator. `make help` lists the targets; `make demo` runs the quickstart; `make run` starts
# the operator with the mock provider; `make test` runs every test.
# Go 1.27.3: the go command fetches this toolchain from the module proxy when the machine's Go is older.
export GOTOOLCHAIN ?= go1.27.3
GO            ?= go
CONTROLLER_GEN = $(GO) run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.21.0
BIN           ?= bin/proxy-operator
IMG           ?= proxy-operator:dev
PYTHON        ?= /usr/bin/python3
# -discovery-insecure: make run serves discovery and the gateway on 127.0.0.1 only, without a token;
# a shared address needs one. -gateway-addr: the crawlers' proxy gateway (curl -x 127.0.0.1:8091).
# -demo-proxies 3: a fleet of mock proxies the process defines and syncs itself, no cluster
# needed, beside the demo site on 127.0.0.1:8092 (-demo-site-addr), a rate-limited crawl target;
# -fleet-warmup 0s: without a cluster there is no fleet to wait for after a restart.
# RUN_EXTRA adds flags without retyping RUN_ARGS: make run RUN_EXTRA='-log-level debug'.
RUN_ARGS      ?= -hook-addr 127.0.0.1:8080 -hooks-insecure -discovery-addr 127.0.0.1:8090 -discovery-insecure -console -gateway-addr 127.0.0.1:8091 -gateway-socks-addr 127.0.0.1:8093 -log-format text -fleet-warmup 0s -gc-min-age 1m -demo-proxies 3
RUN_EXTRA     ?=
# GO_TAGS leaves the cloud providers' client libraries out of a local build (decision 0282): the
# mock and kubernetes providers need none, and the cold build takes a quarter less time. An entry
# of an omitted type fails at start, saying so; `make build GO_TAGS=` builds every provider, as
# the container image (Dockerfile) does.
GO_TAGS       ?= omit_aws,omit_gcp,omit_hetzner
# GO_BUILD is the one way the binary is built: make build, make run and make demo
# (scripts/quickstart.sh spells the same flags out), so none rebuilds what another built.
GO_BUILD      = CGO_ENABLED=0 $(GO) build -trimpath -tags '$(GO_TAGS)'

.PHONY: help build run demo test test-go test-python generate verify vet fmt bench bench-probes bench-discovery bench-gateway bench-crawl bench-crawl-score bench-scrapy bench-naive docker-build fuzz load scale attack

## help: list the targets and what each does
help:
	@echo 'Targets (variables: BIN=$(BIN) IMG=$(IMG) RUN_ARGS="..." RUN_EXTRA="..." FUZZTIME=$(FUZZTIME) LOAD_SECONDS=$(LOAD_SECONDS)):'
	@sed -n 's/^## \([a-z-]*\): \(.*\)/\1|\2/p' $(MAKEFILE_LIST) | awk -F'|' '{ printf "  %-17s %s\n", $$1, $$2 }'

## build: bin/proxy-operator, static
build:
	$(GO_BUILD) -o $(BIN) .

## run: build, then exec the binary with RUN_ARGS and RUN_EXTRA (a demo fleet of 3 mock proxies and a demo site on 127.0.0.1:8092; hooks on :8080, discovery on :8090 with the web console at http://127.0.0.1:8090/ui/, gateway on :8091, its SOCKS5 listener on :8093); Ctrl-C or kill stops it and its mock proxies
# run is the no-cluster quickstart: KUBECONFIG is cleared, since its Proxies exist in no cluster
# and, with a client, GC would take their mock instances for orphans. exec (through env): the
# binary replaces the recipe's shell, so make's SIGTERM and the terminal's Ctrl-C reach it.
run: build
	exec env KUBECONFIG= $(BIN) $(RUN_ARGS) $(RUN_EXTRA)

## demo: the README quickstart (scripts/quickstart.sh): build, start with a demo fleet, lease a proxy, fetch through it, stop
demo:
	BIN=$(BIN) GO_TAGS=$(GO_TAGS) bash scripts/quickstart.sh

## test: every test: the Go tests with -race (test-go), then the Python client's (test-python); what CI runs after make verify
test: test-go test-python

## test-go: go test -race ./... (25 min timeout per package: the operator simulations in test/sim take 3-8 min under -race on 2 busy cores), then their largest without -race, then the providers with GO_TAGS
test-go:
	$(GO) test -race -count=1 -timeout 25m ./...
	$(GO) test -count=1 -timeout 25m -run 'TestSteadyFleetJitteringLatency|TestBringUpModelMatchesMeasurement' ./test/sim/
	$(GO) test -count=1 -tags '$(GO_TAGS)' ./providers/...

## test-python: the Python client and its Scrapy middleware against the real binary (pytest)
# With Debian's python3-scrapy,
# python3-pytest and python3-requests; the tests build and run the real operator binary.
test-python:
	cd clients/python && PYTHONDONTWRITEBYTECODE=1 GO="$(GO)" $(PYTHON) -m pytest -q -p no:cacheprovider

# The install kustomization gets its own copy of the CRD: kustomize refuses files outside its root.
## generate: crds/ and metacontroller/install/crd.yaml from api/v1alpha1 (controller-gen)
generate:
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=crds
	cp crds/crawl.example.com_proxies.yaml metacontroller/install/crd.yaml
	cp crds/crawl.example.com_proxypools.yaml metacontroller/install/crd-proxypools.yaml

# verify fails when the committed CRD is stale, code is unformatted or vet complains.
## verify: generated CRDs unchanged, gofmt clean, go vet clean, layering (no domain package imports chi or server/)
verify: generate
	@git diff --exit-code -- crds/ metacontroller/install/crd.yaml metacontroller/install/crd-proxypools.yaml || (echo "crds/, metacontroller/install/crd.yaml or metacontroller/install/crd-proxypools.yaml is stale: run 'make generate' and commit" && exit 1)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1)
	$(GO) vet ./...
	$(GO) test -count=1 -run '^(TestLayering|TestMainIsFlagsAndDispatch)$$' ./test/

## bench: every benchmark, 2 s each
bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s ./...

# bench-probes schedules 10,000 proxies at 10 s against loopback stub proxies for 60 s (about
# 80 s in all); it is not part of `make test` or `make bench`.
## bench-probes: 10,000 proxies probed at 10 s for 60 s (about 80 s)
bench-probes:
	PROBE_BENCH_SECONDS=$${PROBE_BENCH_SECONDS:-60} $(GO) test -run '^$$' -bench BenchmarkProbeScheduler -benchtime 1x -timeout 10m ./health/

# bench-discovery: lease+release cycles over loopback HTTP (64 clients, 1,000 and 10,000
# proxies) on the in-memory store and on the Redis store (a local redis-server) against no-op
# handlers on the same server; then 2 `proxy-operator discovery` processes sharing one Redis;
# then the index against a fleet scan and the two stores under 64 goroutines without HTTP
# (about 2 minutes in all; needs redis-server).
# Then the Redis topologies (single, Sentinel with and without WAIT, a 3-primary Cluster) and
# 1 against 3 discovery processes on one Cluster (about 1 min more; needs redis-sentinel).
## bench-discovery: lease+release over loopback HTTP on the in-memory and the Redis store, 2 discovery processes on one Redis, Sentinel and Cluster, 3 processes on one Cluster, the lease index (about 3 min; needs redis-server, redis-sentinel)
bench-discovery:
	$(GO) test -run '^$$' -bench 'BenchmarkDiscoveryLease|BenchmarkDiscoveryRedisReplicas|BenchmarkDiscoveryRedisTopologies|BenchmarkDiscoveryClusterReplicas' -benchtime 3x -timeout 20m ./server/discovery/
	$(GO) test -run '^$$' -bench BenchmarkAcquireRelease -benchtime 1s ./lease/ ./lease/redisstore/

# bench-gateway: the same clients through the gateway and straight to the same mock upstream
# (with its credential), in one run: 64 clients of small GETs, 64 opening CONNECT tunnels, 16
# fetching 1 MiB bodies; phases alternate twice, GATEWAY_BENCH_SECONDS each (default 3). Then
# SOCKS5 against HTTP CONNECT through the same gateway (BenchmarkGatewaySOCKS: tunnels/s and an
# idle tunnel's memory, as ratios).
## bench-gateway: gateway vs straight to the upstream (requests/s, CONNECTs/s, 1 MiB bytes/s, added p99), one replica vs three over one Redis, SOCKS5 vs CONNECT (tunnels/s, idle memory) (about 2 minutes; needs redis-server)
bench-gateway:
	$(GO) test -run '^$$' -bench BenchmarkGateway -benchtime 1x -timeout 10m ./server/gateway/

# bench-crawl: one crawl job (4,000 URLs over 8 loopback sites, 6 strict; 16 workers; 16 mock
# proxies) with the random, rotating and leases strategies, each on a fresh operator and farm,
# at most 90 s each (about 5 minutes in all). Prints the table of docs/performance.md;
# CRAWL_ARGS passes flags (go run ./test/crawl/cmd/crawlbench -h). make test runs a short version.
CRAWL_ARGS ?= -v
## bench-crawl: one crawl job with the random, rotating, leases and gateway strategies (about 7 minutes)
bench-crawl:
	$(GO) run ./test/crawl/cmd/crawlbench $(CRAWL_ARGS)

# bench-crawl-score: the same job on a farm where every site refuses 4 of the 16 proxies as
# datacenter addresses and answers 4 others 1 s late (their probes too); 6 workers, a fresh lease every 5 pages; leases
# with the quality score (the default) and without it (-lease-by-quality=false). About 4 minutes.
## bench-scrapy: the Scrapy middleware at its defaults with the demo fleet's 3 proxies against one polite IP, on the crawl farm's strict site (about 2 minutes)
bench-scrapy:
	cd clients/python && GO="$(GO)" $(PYTHON) tests/bench_scrapy.py $(SCRAPY_PAGES)

## bench-naive: a curl loop, requests in 4 threads and Scrapy's defaults through the gateway on issue 31's rate-limited site, 3 and 16 demo proxies, 17 s of ideal crawl each (NAIVE_SECONDS; about 4 minutes)
bench-naive:
	cd clients/python && GO="$(GO)" $(PYTHON) tests/bench_naive.py $(NAIVE_SECONDS)

## bench-crawl-score: leases with and without the quality score on a farm with datacenter and slow proxies (about 4 minutes)
bench-crawl-score:
	$(GO) run ./test/crawl/cmd/crawlbench -degraded $(CRAWL_ARGS)

# fuzz runs every fuzz target in the module for FUZZTIME each, one after another (go test
# -fuzz takes one target per run). CI runs it with FUZZTIME=10s; a crash is saved under the
# package's testdata/fuzz/ and fails the run.
FUZZTIME ?= 20s
## fuzz: every fuzz target for FUZZTIME each
fuzz:
	@set -e; for f in $$(grep -rl --include='*_test.go' '^func Fuzz' . | sort); do \
	  for name in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
	    echo "== fuzz $$name in $$(dirname $$f) for $(FUZZTIME)"; \
	    $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$(dirname $$f); \
	  done; \
	done

# load: the discovery API under 64 crawlers for LOAD_SECONDS (60) while probes flip health and
# syncs arrive; prints p50/p99 of both servers (make test runs the same test for 5 s, with -race).
# attack: the hostile-input suite (test/reliability/attack_test.go) against the operator binary in a
# child process, each flood for ATTACK_SECONDS (60); prints peak RSS and the legitimate calls'
# p99 per attack (make test runs it with 2 s floods). Then the forged hooks with a stolen token,
# against an in-process operator that has a real kube-apiserver (server.TestForgedHooksChangeNothing;
# skipped without KUBEBUILDER_ASSETS).
ATTACK_SECONDS ?= 60
## attack: the hostile-input suite against the operator binary, ATTACK_SECONDS per flood; peak RSS and p99
attack:
	ATTACK_SECONDS=$(ATTACK_SECONDS) $(GO) test -run '^(TestHostileInput|TestDiscoveryRefusesToStartWithoutToken|TestGatewayReachesNothingInside)$$' -count=1 -v -timeout 30m ./test/reliability/
	$(GO) test -run '^TestForgedHooksChangeNothing$$' -count=1 -v -timeout 10m ./server/

LOAD_SECONDS ?= 60
## load: the discovery API under 64 crawlers for LOAD_SECONDS while probes flip and syncs arrive
load:
	LOAD_SECONDS=$(LOAD_SECONDS) $(GO) test -run '^TestLoad$$' -count=1 -v -timeout 10m ./test/reliability/

# Needs a Docker engine; IMG names the image (default proxy-operator:dev, what metacontroller/install/ deploys).
## docker-build: the container image IMG (needs a Docker engine)
docker-build:
	docker build -t $(IMG) .

# scale: the fleet-scale scenarios of test/sim under Metacontroller's modelled
# client budget and the machine's API server limit, at 1,000 and 10,000 proxies:
# health-transition latency (flapping) at the recommended and the default settings,
# apply-to-all-Ready, and the bring-up model checked against the measured runs (about an
# hour on a busy 2-core machine; make test runs the same scenarios at 200, 100 and 1,000
# proxies). MC_QPS, MC_BURST, MC_WORKERS, MC_RESYNC, MC_IGNORE_STATUS and MC_SERVER_RATE
# override the recommended settings.
SCALE_PROXIES ?= 1000,10000
## scale: the fleet-scale simulations (test/sim) and the bring-up model check at SCALE_PROXIES (about an hour)
scale:
	SCALE_PROXIES=$(SCALE_PROXIES) $(GO) test -run 'TestHealthTransitionLatency|TestTimeToReady|TestBringUpModelMatchesMeasurement' -count=1 -v -timeout 120m ./test/sim/

# idem — make help lists the targets.
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
FUZZTIME ?= 10s

.PHONY: help run build test lint race-cluster bench bench-scale fuzz cluster cluster-tls chaos chaos-ci clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

run: build ## start a one-node store on 127.0.0.1:7070 with data in ./idem-data
	@# the binary itself, not go run: Ctrl-C then reaches the node, which drains and logs "stopped" (make itself then exits 130)
	./bin/idem serve $(ARGS)

build: ## build bin/idem
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/idem ./cmd/idem

test: lint ## run every test (real Pebble, real raft, real processes)
	@# The two longest packages (13-14 min each) first, so they run side by
	@# side from the start: listed in go's order, raftfsm began only after
	@# api and the end-to-end tests, some 8 minutes in. A third package at
	@# a time (-p 3) runs the rest (api, the end-to-end tests: 8 minutes
	@# together) beside them, where with two it ran after them: the whole
	@# CI took 28.5 minutes of its 30 on 2026-12-07. Most of these tests
	@# wait on timers and processes, not on the two cores.
	$(GO) test -p 3 -count=1 -timeout 20m ./raftfsm ./cmd/idem ./api ./internal/e2e/middleware ./...
	cd bench/compare && $(GO) test -count=1 ./...
	@# Under the race detector too: Pebble takes other paths in its race
	@# builds, where a restore's range deletion from the empty key was lost.
	$(GO) test -race -count=1 -run 'TestRestoreOverAStateLeavesNothingOfIt|TestDerivedStateFollowsAModel' ./engine

# Cluster tests whose nodes, proxies and bench clients are race-built
# (IDEM_TEST_RACE=1): load batched and not, through followers and a proxy,
# kill -9 of the leader, encryption at rest and snapshot save, SIGHUP reloads
# of certificates and of the auth file. Not the catch-up by snapshot under
# load: with --trailing-logs 16 a race-built follower (several times slower)
# can keep installing snapshots and not catch up in the test's 15 s (ci-48).
RACE_CLUSTER_TESTS := TestKill9DuringBatchedLoadKeepsAcknowledgedClaims|TestBatchThroughAFollower|TestBenchBatchedChecksCorrectness|TestForwardDuringCleanLeaderStopNeverSaysUnknown|TestEncryptionAtRestNothingPlainOnDisk|TestProxyFailsOverBetweenStores|TestProxyConcurrentRetryAndStreaming|TestTLSReloadOnSIGHUPAndRequiredClientCerts|TestServeAuthFileRolesAndReload
race-cluster: ## a few cmd/idem cluster tests with the idem processes built with -race (~1.5 min); any race report fails
	IDEM_TEST_RACE=1 $(GO) test -count=1 -timeout 6m -run '^($(RACE_CLUSTER_TESTS))$$' ./cmd/idem

lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd bench/compare && $(GO) vet ./...

cluster: ## three local nodes on 127.0.0.1/2/3 in the foreground (Ctrl-C stops all)
	./scripts/cluster.sh

cluster-tls: ## the same three nodes with TLS everywhere: HTTPS, mutual TLS on raft (a dev CA and certificates in cluster-data/tls)
	./scripts/cluster-tls.sh

bench: ## FSM apply benchmarks (batches of 1, 64, 512) and an HTTP run of idem bench
	$(GO) test -run '^$$' -bench . -benchtime 20000x ./raftfsm
	./scripts/bench-http.sh

SCALE_SIZES ?= 1M,10M,50M
SCALE_DROP  ?= 10M
SCALE_DIR   ?= scale-data
bench-scale: build ## scale benchmark: claims, memory, disk per record at SCALE_SIZES live records, and a SCALE_DROP-record bucket drop (~10 GB per 50 M in SCALE_DIR)
	bin/idem bench scale --sizes $(SCALE_SIZES) --drop-records $(SCALE_DROP) --dir $(SCALE_DIR) --out $(SCALE_DIR)/results.md

fuzz: ## run every fuzzer for FUZZTIME each (default 10s)
	@for pkg in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

CHAOS_DURATION ?= 30m
CHAOS_ONE_DURATION ?= 10m
# The disk nemesis (each node on a loop-mounted filesystem of its own) where
# it can run: as root, with mkfs.ext4 and loop devices. CHAOS_DISK= leaves it out.
CHAOS_DISK ?= $(shell [ "$$(id -u)" = 0 ] && command -v mkfs.ext4 >/dev/null 2>&1 && [ -e /dev/loop-control ] && echo ,disk)
chaos: build ## long failure test: 3 nodes, every nemesis (disk too as root), CHAOS_DURATION (30m); then one node stopped up to a minute at a time, CHAOS_ONE_DURATION (10m); results in chaos-out/
	bin/idem chaos --duration $(CHAOS_DURATION) --nemesis all$(CHAOS_DISK) --out chaos-out/three
	@# A lone leader stopped past the clock's 5 s rewind bound: only a one-node
	@# store shows it (a cluster elects another leader, which follows the log).
	bin/idem chaos --nodes 1 --nemesis all$(CHAOS_DISK) --pause-max 60s --duration $(CHAOS_ONE_DURATION) --out chaos-out/one

chaos-ci: build ## short failure test (~5 min): a broken build must be caught, then every nemesis at least once on a sound one, TLS, and a one-node store paused
	@echo "== chaos-ci 1/4: --inject-bug skip-uniqueness must be caught (exit 1 with violations)"
	@rc=0; bin/idem chaos --quiet --duration 30s --nemesis kill --interval 4s --seed 11 \
	  --inject-bug skip-uniqueness --inject-into all --out chaos-out/ci-broken > chaos-out-broken.txt 2>&1 || rc=$$?; \
	cat chaos-out-broken.txt; \
	if [ $$rc -ne 1 ] || ! grep -q '^VIOLATIONS' chaos-out-broken.txt; then \
	  rm -f chaos-out-broken.txt; echo "chaos-ci: the injected bug was NOT detected (exit $$rc)"; exit 1; fi; \
	rm -f chaos-out-broken.txt; echo "chaos-ci: the injected bug was detected, as it must be"
	@echo "== chaos-ci 2/4: every nemesis at least once (--every-nemesis runs past --duration until each has; disk too as root), no violation allowed"
	bin/idem chaos --duration 100s --nemesis all$(CHAOS_DISK) --every-nemesis --interval 3s --seed 42 --out chaos-out/ci
	@echo "== chaos-ci 3/4: the same faults that touch connections (kill, partition, snapshot) with TLS everywhere"
	bin/idem chaos --quiet --tls --duration 40s --nemesis kill,partition,snapshot --interval 4s --seed 7 --out chaos-out/ci-tls
	@echo "== chaos-ci 4/4: a one-node store killed and stopped for up to 30s, its leader staying leader (the pause that once expired records early)"
	bin/idem chaos --quiet --nodes 1 --nemesis pause,kill --pause-max 30s --duration 45s --interval 3s --seed 9 --out chaos-out/ci-one

clean: ## remove build output and the default data dir
	rm -rf bin idem-data cluster-data chaos-out

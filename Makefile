# queuey: the commands a developer and CI run.
GO          ?= go
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: test faults demo lint fmt cover bench benchmarks chaos fuzz cluster cluster-stop

# MODULES are the repository's modules: the library, then the modules that
# keep what only tests, examples and benchmarks need out of its
# requirements (the OpenTelemetry SDK, its exporters, the peers' clients).
# bench/peers has no tests; lint checks it with the others.
MODULES      := . trace/sdktest examples/ratelimit examples/metrics console/browsertest
LINT_MODULES := $(MODULES) bench/peers

# PARALLEL is how many tests of a package run at once: the cores. At 8
# the tests of broker/rabbitmq load the shared broker (on the same 2
# cores) enough that its timing tests fail now and then (a hold expiring
# 0.3 s late against a pause of 1.1 s; a block notice taken in after the
# next call), and make test was no faster (3 m 45 s to 5 m 15 s).
PARALLEL ?= 2

## test: vet, every module's tests with the race detector (both backends'
## conformance suites; RabbitMQ on 127.0.0.1:5672 or QUEUEY_AMQP_URL) and a
## short fuzz of the envelope codec. It leaves the broker as it found it:
## the tests that restart, stop, freeze or alarm it, or start a cluster,
## are the fault tests of `make faults`.
test:
	@for m in $(MODULES); do echo "go vet ($$m)"; (cd $$m && $(GO) vet ./...) || exit 1; done
	@for m in $(MODULES); do echo "go test -race ($$m)"; (cd $$m && $(GO) test -race -count=1 -parallel $(PARALLEL) ./...) || exit 1; done
	$(MAKE) --no-print-directory fuzz

## faults: the fault tests, alone: they restart, kill -9, stop, freeze
## and alarm the broker on 127.0.0.1:5672 and start the local cluster of
## `make cluster`, whose nodes they kill -9 (QUEUEY_CHAOS=full: the long
## faults and the 3-minute soak too). Run them on a broker of your own.
faults:
	QUEUEY_FAULTS=1 QUEUEY_CHAOS=full $(GO) test -race -count=1 -p 1 -timeout 60m -run '^TestFault' ./broker/rabbitmq/ ./chaos/

## fuzz: the envelope's fast decoder and encoder against the strict
## reference codec, FUZZTIME each (a failing input is kept under
## broker/testdata/fuzz, where the plain tests replay it). A count of
## inputs, not a duration: Go 1.26's fuzzing coordinator can fail a
## duration's run that found nothing, with "context deadline exceeded"
## as the time runs out (Go issue 75804, fixed in Go 1.27); 40000 inputs
## take about 3 to 5 s each here.
FUZZTIME ?= 40000x
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeEnvelopeFastPathMatchesReference$$' -fuzztime $(FUZZTIME) ./broker/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeEnvelopeFieldsMatchReference$$' -fuzztime $(FUZZTIME) ./broker/
	$(GO) test -run '^$$' -fuzz '^FuzzEncodeMatchesReference$$' -fuzztime $(FUZZTIME) ./broker/

## demo: the quick-start tour on the in-memory backend; no broker needed
demo:
	$(GO) run ./examples/quickstart

## lint: formatting, then vet, staticcheck and `go mod tidy -diff` of
## every module (a module's go.mod and go.sum hold exactly what it uses)
lint:
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	@for m in $(LINT_MODULES); do echo "lint ($$m)"; (cd $$m && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./... && $(GO) mod tidy -diff) || exit 1; done

## fmt: format the tree
fmt:
	gofmt -w .

## cover: test coverage per package
cover:
	@for m in $(MODULES); do (cd $$m && $(GO) test -count=1 -cover ./...) || exit 1; done

## bench: queuey against raw amqp091-go (RabbitMQ on 127.0.0.1:5672) and the
## memory backend against a bare channel pool, one table with ratios and
## goals; then the peers (machinery on RabbitMQ, asynq on Redis 127.0.0.1:6379).
## BENCH_FLAGS go to ./bench (see go run ./bench -h: -scenarios 1,2,...,
## -n, -count, -cpuprofile ...), PEERS_FLAGS to bench/peers (-n, -count, -systems).
BENCH_FLAGS ?= -count 3
PEERS_FLAGS ?= -count 3
bench:
	$(GO) run ./bench $(BENCH_FLAGS)
	cd bench/peers && GOFLAGS=-mod=mod $(GO) run . $(PEERS_FLAGS)

## benchmarks: BENCHMARKS.md and the README's summary (between its
## bench:summary markers) written from one run of everything: the peers
## (-json), the trace benchmarks of trace/sdktest (TRACE_BENCH), then
## ./bench with BENCH_FLAGS (-markdown, -peers, -gobench, -readme).
## Run it alone: about 6 minutes on 2 cores.
## (TRACE_DIR, BENCHMARKS_MD and README_MD move its inputs and outputs.)
TRACE_BENCH ?= -run '^$$' -bench 'Instrumentation/work50us|SDKFloor' -benchtime 60000x -count 3
TRACE_DIR ?= trace/sdktest
BENCHMARKS_MD ?= BENCHMARKS.md
README_MD ?= README.md
benchmarks:
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	(cd bench/peers && GOFLAGS=-mod=mod $(GO) run . $(PEERS_FLAGS) -json "$$tmp/peers.json") && \
	echo "command: cd $(TRACE_DIR) && go test $(TRACE_BENCH)" > "$$tmp/trace.txt" && \
	(cd $(TRACE_DIR) && $(GO) test $(TRACE_BENCH)) >> "$$tmp/trace.txt" && cat "$$tmp/trace.txt" && \
	$(GO) run ./bench $(BENCH_FLAGS) -markdown $(BENCHMARKS_MD) -peers "$$tmp/peers.json" -gobench "$$tmp/trace.txt" -readme $(README_MD)

## chaos: the fault-injection suite of package chaos alone, every fault,
## with each run's score printed (-v; results in RELIABILITY.md). It
## disturbs the broker: run it alone.
chaos:
	QUEUEY_FAULTS=1 QUEUEY_CHAOS=full $(GO) test -race -count=1 -v -timeout 60m -run '^TestFault' ./chaos/

## cluster: start (or complete) a local 3-node RabbitMQ cluster beside the
## broker on 5672, on 127.0.0.1:5701-5703, and print its QUEUEY_CLUSTER=...
## line (scripts/cluster.sh; QUEUEY_CLUSTER_DIR and QUEUEY_CLUSTER_PORTS
## move it)
cluster:
	scripts/cluster.sh start

## cluster-stop: stop the local cluster's nodes, keeping their data
## (scripts/cluster.sh stop --clean also deletes it)
cluster-stop:
	scripts/cluster.sh stop

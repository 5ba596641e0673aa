# queuey: the commands a developer and CI run.
GO          ?= go
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: test demo lint fmt cover bench benchmarks chaos fuzz cluster cluster-stop

## test: the whole suite with the race detector (what CI runs), a short
## fuzz of the envelope codec, then the fault tests (one of them starts
## the local cluster of `make cluster` and kills its nodes)
test:
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...
	$(MAKE) --no-print-directory fuzz
	@echo "fault tests (they restart the broker, so they run alone):"
	QUEUEY_FAULTS=1 $(GO) test -race -count=1 -p 1 -run '^TestFault' ./broker/rabbitmq/ ./chaos/

## fuzz: the envelope's fast decoder and encoder against the strict
## reference codec, FUZZTIME each (a failing input is kept under
## broker/testdata/fuzz, where the plain tests replay it)
FUZZTIME ?= 10s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeEnvelopeFastPathMatchesReference$$' -fuzztime $(FUZZTIME) ./broker/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeEnvelopeFieldsMatchReference$$' -fuzztime $(FUZZTIME) ./broker/
	$(GO) test -run '^$$' -fuzz '^FuzzEncodeMatchesReference$$' -fuzztime $(FUZZTIME) ./broker/

## demo: the quick-start tour on the in-memory backend; no broker needed
demo:
	$(GO) run ./examples/quickstart

## lint: formatting, vet and staticcheck
lint:
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

## fmt: format the tree
fmt:
	gofmt -w .

## cover: test coverage per package
cover:
	$(GO) test -count=1 -cover ./...

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
## Run it alone: about 10 minutes on 2 cores.
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

## chaos: the fault-injection suite against the local RabbitMQ (package
## chaos; results in RELIABILITY.md): the short set that CI can run, plus
## the long faults (broker kill -9 and stop, frozen broker,
## consumer_timeout, 3-minute soak).
## It disturbs the broker: run it alone.
chaos:
	$(GO) vet ./chaos/...
	QUEUEY_FAULTS=1 QUEUEY_CHAOS=full $(GO) test -race -count=1 -v -timeout 40m -run '^TestFault' ./chaos/

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

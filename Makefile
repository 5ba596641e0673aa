# queuey: the commands a developer and CI run.
GO          ?= go
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: test demo lint fmt cover

## test: the whole suite with the race detector (what CI runs)
test:
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...
	@echo "fault tests (they restart the broker, so they run alone):"
	QUEUEY_FAULTS=1 $(GO) test -race -count=1 -run '^TestFault' ./broker/rabbitmq/

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

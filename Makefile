# mcmirror. `make help` lists the targets.
GO  ?= go
BIN ?= bin

.PHONY: help build test e2e bench lint demo

help: ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

build: ## build bin/coredns-mc
	$(GO) build -o $(BIN)/coredns-mc ./cmd/coredns-mc

test: ## unit and end-to-end tests with the race detector (builds test binaries once)
	test/tools/gotest.sh -race ./...

e2e: ## only the end-to-end tests
	test/tools/gotest.sh -race ./test/...

bench: ## side-by-side benchmarks on real clusters: DNS (bench/out/results.md) and the gateway against an HAProxy pair (bench/out/gateway.md); not part of make test
	bench/run.sh

lint: ## gofmt and go vet
	@test -z "$$(gofmt -l . | tee /dev/stderr)"
	$(GO) vet ./...

demo: ## local clusters, with their kubeconfigs printed
	test/tools/deps.sh
	MCMIRROR_TESTBIN=$$(test/tools/build.sh) $(GO) run ./test/demo

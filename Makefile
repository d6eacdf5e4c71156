# mcmirror. `make help` lists the targets.
GO  ?= go
BIN ?= bin
FUZZTIME ?= 10s

.PHONY: help build test e2e fuzz bench bench-fleet bench-fleet-archive lint demo demo-pods image manifests

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

build: ## build bin/coredns-mc
	$(GO) build -o $(BIN)/coredns-mc ./cmd/coredns-mc

test: ## unit and end-to-end tests with the race detector (builds test binaries once), then each fuzz target for FUZZTIME
	test/tools/gotest.sh -race ./...
	FUZZTIME=$(FUZZTIME) test/tools/fuzz.sh

fuzz: ## each fuzz target for FUZZTIME (default 10s; FUZZTIME=10m for the long run)
	FUZZTIME=$(FUZZTIME) test/tools/fuzz.sh

e2e: ## only the end-to-end tests
	test/tools/gotest.sh -race ./test/...

bench: ## side-by-side benchmarks on real clusters: DNS (bench/out/results.md) and the gateway against an HAProxy pair (bench/out/gateway.md); not part of make test
	bench/run.sh

bench-fleet: ## the fleet benchmark: 20 clusters in a full mesh, direct and import mode side by side (bench/out/fleet.md; FLEET_ARGS="-clusters 5 -services 20" for a short run); not part of make test
	$(GO) build -o $(BIN)/coredns-mc ./cmd/coredns-mc
	$(GO) build -o $(BIN)/fleetbench ./bench/cmd/fleetbench
	MCMIRROR_TESTBIN=$$(test/tools/build.sh) $(BIN)/fleetbench -coredns-mc $(BIN)/coredns-mc -out bench/out $(FLEET_ARGS)

bench-fleet-archive: ## bench/out/fleetbench.tar.xz: the fleet benchmark with coredns-mc, kube-apiserver and etcd, to run where there is no Go and no network (bench/README.md, Fleet)
	bench/fleet-archive.sh

image: ## the coredns-mc image from the Dockerfile, and the real-node tests' pause and busybox images, as OCI archives built with buildah (no Docker); prints their directory
	test/tools/image.sh

manifests: ## write deploy/'s plain manifests from the Helm chart charts/mcmirror, and the chart's crds/ from the mcs-api module (deploy/generate.sh, with the helm test/tools/build.sh builds)
	deploy/generate.sh --helm "$$(test/tools/build.sh)/helm"

lint: ## gofmt and go vet
	@test -z "$$(gofmt -l . | tee /dev/stderr)"
	$(GO) vet ./...

demo: ## clusters east, west and paris with a data plane, linked; prints curl and dig lines that work from a pod in east
	test/tools/deps.sh
	MCMIRROR_TESTBIN=$$(test/tools/build.sh) $(GO) run ./test/demo

demo-pods: ## the same walkthrough on real nodes: clusters east and west, mcmirror installed from its image as deploy/README.md says, lines to paste that kubectl exec into east's client pod
	test/tools/deps.sh
	MCMIRROR_TESTBIN=$$(test/tools/build.sh) MCMIRROR_IMAGES=$$(test/tools/image.sh) $(GO) run ./test/demo -pods

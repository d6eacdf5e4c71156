#!/usr/bin/env bash
# gotest.sh runs `go test` with what the end-to-end tests need (Debian
# packages, the cached control-plane binaries, the images real nodes run, a
# coredns-mc binary, a stock CoreDNS built with mcmirror and one without) and then
# proves that no process the test harness started is still running.
# Arguments go to `go test`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

test/tools/deps.sh
MCMIRROR_TESTBIN=$(test/tools/build.sh)
MCMIRROR_IMAGES=$(test/tools/image.sh)
export MCMIRROR_TESTBIN MCMIRROR_IMAGES
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pidfile=$work/pids
touch "$pidfile"
export MCMIRROR_PID_FILE=$pidfile
# One coredns-mc for every end-to-end test, with the race detector on; and
# one as the image builds it, for tests of the memory it holds under a limit
# (the race detector's shadow memory is several times the program's). The
# second reuses the image build's compiled packages: only its link runs,
# beside the first build.
CGO_ENABLED=0 go build -trimpath -o "$work/coredns-mc-release" ./cmd/coredns-mc &
release=$!
go build -race -o "$work/coredns-mc" ./cmd/coredns-mc
wait "$release"
export MCMIRROR_COREDNS_MC=$work/coredns-mc MCMIRROR_COREDNS_MC_RELEASE=$work/coredns-mc-release
# A stock CoreDNS with mcmirror added by its plugin.cfg (test/e2e/stockcoredns),
# built here rather than inside a test that shares the CPU with others.
MCMIRROR_COREDNS_STOCK=$(test/tools/coredns-stock.sh)
# And one without it, the cluster DNS that forwards clusterset.local.
MCMIRROR_COREDNS_PLAIN=$(test/tools/coredns-stock.sh --plain)
export MCMIRROR_COREDNS_STOCK MCMIRROR_COREDNS_PLAIN

status=0
go test -timeout 45m "$@" || status=$?

test/tools/leftovers.sh "$pidfile" || status=1
exit "$status"

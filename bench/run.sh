#!/usr/bin/env bash
# run.sh is `make bench`: it installs and builds what the benchmarks need,
# runs the plugin's Go benchmarks, then bench/cmd/mcbench, which starts real
# clusters and compares the DNS servers side by side, then bench/cmd/gwbench,
# which compares the gateway with a direct connection and an HAProxy pair.
# See bench/README.md. Arguments go to mcbench (e.g. -runs 7 -sizes
# 1000,10000); $GWBENCH_ARGS to gwbench (e.g. GWBENCH_ARGS="-runs 7").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

out=bench/out
rm -rf "$out"
mkdir -p "$out" bin
start=$SECONDS

test/tools/deps.sh dnsperf haproxy strace
MCMIRROR_TESTBIN=$(test/tools/build.sh)
export MCMIRROR_TESTBIN

# The binaries under test, built as a release would be (no race detector).
go build -o bin/coredns-mc ./cmd/coredns-mc
go build -o bin/dnsref ./bench/cmd/dnsref
go build -o bin/mcbench ./bench/cmd/mcbench
go build -o bin/gwbench ./bench/cmd/gwbench

# 2. Per-query cost: the plugin's own Go benchmarks, with a CPU profile.
echo "run.sh: go test -bench ./plugin/..." >&2
# A failure here is reported, and the cluster benchmarks still run.
status=0
go test -run '^$' -bench . -benchmem ./plugin/... >"$out/gobench.txt" 2>&1 || status=$?
cat "$out/gobench.txt"
if go test -run '^$' -bench 'ServeDNS' -benchmem -count 1 \
	-cpuprofile "$out/plugin.cpu.pprof" -o "$out/mcmirror.test" ./plugin/mcmirror >/dev/null 2>&1; then
	go tool pprof -top -nodecount=20 "$out/mcmirror.test" "$out/plugin.cpu.pprof" >"$out/plugin.cpu.txt" 2>/dev/null || true
fi

# 1, 3, 4, 5: the real thing.
# The forms that miss the per-query target are profiled one by one with
# the test binary built above.
bin/mcbench -coredns-mc bin/coredns-mc -dnsref bin/dnsref -out "$out" -gobench "$out/gobench.txt" \
	-plugin-test "$out/mcmirror.test" "$@" || status=$?

# 6: the gateway against a direct connection and an HAProxy pair.
# shellcheck disable=SC2086 # GWBENCH_ARGS is a list of flags
bin/gwbench -coredns-mc bin/coredns-mc -out "$out" ${GWBENCH_ARGS:-} || status=$?
echo "run.sh: done in $((SECONDS - start)) s; results in $out/results.md and $out/gateway.md, logs in $out/logs" >&2
if ((status != 0)); then
	echo "run.sh: something failed (exit $status): see above and $out/gobench.txt" >&2
fi
exit "$status"

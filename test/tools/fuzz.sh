#!/usr/bin/env bash
# fuzz.sh runs each fuzz target of the project with -fuzz for $FUZZTIME
# (default 10s), one after the other, on one worker (-parallel 1) unless
# $FUZZPARALLEL says otherwise. Their seed corpora already run with every
# `go test`; this looks for new inputs. A failing input is written to the
# package's testdata/fuzz/<target>/ and the script fails: keep the file,
# it becomes a test once the bug is fixed.
#
#   test/tools/fuzz.sh                 # every target, 10s each
#   FUZZTIME=10m test/tools/fuzz.sh    # the long run
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

fuzztime=${FUZZTIME:-10s}
parallel=${FUZZPARALLEL:-1}
# package: targets
targets=(
	"./plugin/mcmirror/ FuzzServe FuzzName"
)

status=0
for entry in "${targets[@]}"; do
	read -r pkg names <<<"$entry"
	for name in $names; do
		echo "fuzz.sh: $pkg $name for $fuzztime" >&2
		if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -parallel "$parallel" "$pkg"; then
			echo "fuzz.sh: $pkg $name FAILED" >&2
			status=1
		fi
	done
done
exit "$status"

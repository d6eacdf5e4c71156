#!/usr/bin/env bash
# fuzz.sh runs each fuzz target of the project with -fuzz for $FUZZTIME
# (default 10s), one after the other, on one worker (-parallel 1) unless
# $FUZZPARALLEL says otherwise. Their seed corpora already run with every
# `go test`; this looks for new inputs. A failing input is written to the
# package's testdata/fuzz/<target>/ and the script fails: keep the file,
# it becomes a test once the bug is fixed.
#
# The targets are found, not listed: every `func FuzzXxx(f *testing.F)` in
# the test files `go list` gives for the packages of the main module (the
# tools under test/tools are modules of their own, and are left out). A
# target added anywhere runs without a change here. Arguments, when given,
# are the names of the targets to run; a name that matches no target is an
# error.
#
#   test/tools/fuzz.sh                            # every target, 10s each
#   FUZZTIME=10m test/tools/fuzz.sh               # the long run
#   FUZZTIME=10m test/tools/fuzz.sh FuzzParse     # one target
#   test/tools/fuzz.sh -l                         # list the targets
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

fuzztime=${FUZZTIME:-10s}
parallel=${FUZZPARALLEL:-1}

# targets prints "<package dir> <target>" for every fuzz target, sorted.
targets() {
	go list -e -f '{{$d := .Dir}}{{range .TestGoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{range .XTestGoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}' ./... |
		while read -r file; do
			[[ -n $file ]] || continue
			sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(\([A-Za-z_][A-Za-z0-9_]*\) \*testing\.F).*/\1/p' "$file" |
				while read -r name; do
					echo "./$(realpath --relative-to=. "$(dirname "$file")")/ $name"
				done
		done | sort -u
}

mapfile -t found < <(targets)
if ((${#found[@]} == 0)); then
	echo "fuzz.sh: no fuzz target found" >&2
	exit 1
fi

if [[ ${1:-} == -l ]]; then
	printf '%s\n' "${found[@]}"
	exit 0
fi

selected=()
if (($# == 0)); then
	selected=("${found[@]}")
else
	for want in "$@"; do
		hit=0
		for entry in "${found[@]}"; do
			if [[ ${entry##* } == "$want" ]]; then
				selected+=("$entry")
				hit=1
			fi
		done
		if ((hit == 0)); then
			echo "fuzz.sh: no fuzz target $want (found: $(printf '%s ' "${found[@]##* }"))" >&2
			exit 2
		fi
	done
fi

# deadlineRace reports whether the output in file $1 of a failed run is
# only Go's fuzz coordinator missing its own -fuzztime deadline
# (go.dev/issue/75804, fixed in Go 1.27): "context deadline exceeded" as
# the sole failure at the end of the time, on a starved machine, with no
# input written. A real finding always writes its input
# ("Failing input written to testdata/fuzz/...", a crash or a hang alike).
deadlineRace() {
	grep -q '^    context deadline exceeded$' "$1" &&
		! grep -q 'Failing input written to\|^panic:\|fuzzing process hung' "$1" &&
		(($(grep -c '^--- FAIL' "$1") == 1))
}

out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0
for entry in "${selected[@]}"; do
	read -r pkg name <<<"$entry"
	echo "fuzz.sh: $pkg $name for $fuzztime" >&2
	if go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -parallel "$parallel" "$pkg" 2>&1 | tee "$out"; then
		continue
	fi
	if deadlineRace "$out"; then
		echo "fuzz.sh: $pkg $name ran its $fuzztime and found nothing; its failure is the Go fuzz coordinator's own deadline race (go.dev/issue/75804), not an input" >&2
		continue
	fi
	echo "fuzz.sh: $pkg $name FAILED" >&2
	status=1
done
exit "$status"

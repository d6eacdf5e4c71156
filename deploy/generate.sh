#!/usr/bin/env bash
# generate.sh writes the plain manifests of deploy/ from the Helm chart
# charts/mcmirror: the chart's templates rendered with the values of
# charts/mcmirror/ci/east-values.yaml (a cluster named east, linked with west), one
# file per template, and the cluster DNS's JSON patch into
# deploy/patches/coredns.yaml. The chart is the one source; a test keeps
# these files equal to its output (`generate.sh --check`).
#
#   deploy/generate.sh [--check] [--helm PATH]
#
# --check  writes nothing and fails, naming the file, if a file differs
# --helm   the helm binary (default: helm on PATH)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
chart=$here/../charts/mcmirror
helm=helm check=false
while [ $# -gt 0 ]; do
	case $1 in
	--check) check=true; shift ;;
	--helm) helm=$2; shift 2 ;;
	*) echo "generate.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

header() {
	printf '# Generated from charts/mcmirror/templates/%s by deploy/generate.sh,\n' "$1"
	printf '# with the values of charts/mcmirror/ci/east-values.yaml. Edit the chart, not this file.\n'
}

# render TEMPLATE VALUES...: the template's objects, without Helm's
# "# Source:" lines and the leading document separator.
render() {
	local t=$1; shift
	"$helm" template mcmirror "$chart" --namespace mcmirror -f "$chart/ci/east-values.yaml" "$@" \
		--show-only "templates/$t" | sed -e '/^# Source: /d' | sed -e '1{/^---$/d}'
}

mkdir -p "$tmp/patches"
for t in admission-policy.yaml controller.yaml coredns.yaml gateway.yaml remote-link.yaml; do
	{ header "$t"; render "$t"; } >"$tmp/$t"
done
# The patch: the data of the ConfigMap the hook Job mounts.
{
	header dns-patch.yaml
	render dns-patch.yaml --set dns.patchDeployment=true |
		awk '/^  coredns.yaml: \|$/ { on = 1; next } on && /^    / { print substr($0, 5); next } on && /^$/ { print; next } { on = 0 }'
} >"$tmp/patches/coredns.yaml"

status=0
for f in admission-policy.yaml controller.yaml coredns.yaml gateway.yaml remote-link.yaml patches/coredns.yaml; do
	if $check; then
		if ! cmp -s "$tmp/$f" "$here/$f"; then
			echo "generate.sh: deploy/$f differs from the chart's output: run deploy/generate.sh" >&2
			diff -u "$here/$f" "$tmp/$f" | head -40 >&2 || true
			status=1
		fi
	else
		mv "$tmp/$f" "$here/$f"
	fi
done
exit $status

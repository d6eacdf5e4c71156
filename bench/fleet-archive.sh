#!/usr/bin/env bash
# fleet-archive.sh is `make bench-fleet-archive`: it packs the fleet
# benchmark (bench/cmd/fleetbench) with everything it runs into one xz
# archive, so that the same run can be repeated on a bigger machine with no
# Go toolchain and no network: the bench, coredns-mc (built as the image
# builds it), kube-apiserver and etcd (test/tools/build.sh's, the versions
# the tests run), and deploy/remote-link.yaml, which the bench applies in
# every cluster. See bench/README.md, "Fleet". The archive must stay under
# 60 MiB; the script fails if it does not.
#
#   bench/fleet-archive.sh [ARCHIVE]    # default bench/out/fleetbench.tar.xz
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

archive=${1:-bench/out/fleetbench.tar.xz}
limit=$((60 << 20))
testbin=$(test/tools/build.sh)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
dir=$stage/fleetbench
mkdir -p "$dir/deploy" "$(dirname "$archive")"

build() { CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$dir/$1" "$2"; }
build fleetbench ./bench/cmd/fleetbench
build coredns-mc ./cmd/coredns-mc
cp -L "$testbin/kube-apiserver" "$testbin/etcd" "$dir/"
cp deploy/remote-link.yaml "$dir/deploy/"
cat >"$dir/README" <<'TXT'
The mcmirror fleet benchmark, prebuilt (bench/README.md in the mcmirror
repository, "Fleet"). Linux amd64; run as root (the harness makes network
namespaces), from this directory or with the path of ./fleetbench: it finds
coredns-mc, kube-apiserver, etcd and deploy/ beside itself.

    ./fleetbench -clusters 100 -out out     # results in out/fleet.md
    ./fleetbench -h                         # every flag

Each cluster is a kube-apiserver (about 0.3-0.5 GiB), two DNS replicas and a
controller; 100 clusters want some 64 GiB and 16 cores or more.
TXT
(cd "$dir" && sha256sum fleetbench coredns-mc kube-apiserver etcd deploy/remote-link.yaml >SHA256SUMS)
tar -C "$stage" -cf - fleetbench | xz -9 -T0 >"$archive.tmp"
mv "$archive.tmp" "$archive"
size=$(stat -c %s "$archive")
echo "fleet-archive.sh: $archive: $((size >> 20)) MiB ($size bytes)" >&2
if ((size >= limit)); then
	echo "fleet-archive.sh: over the 60 MiB limit" >&2
	exit 1
fi
echo "$archive"

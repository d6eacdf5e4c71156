#!/usr/bin/env bash
# build.sh builds the control-plane binaries the e2e tests run (kube-apiserver,
# kube-controller-manager, kube-proxy, kubectl, etcd, kwok), the kubelet and
# kube-scheduler of their real nodes, and helm (the chart's tests and
# installs) from their Go modules, once per version,
# and caches them outside the work tree. It prints the directory that holds
# them. A second run with nothing changed only checks the cache.
#
#   MCMIRROR_CACHE   cache root (default: ${XDG_CACHE_HOME:-~/.cache}/mcmirror)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${MCMIRROR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mcmirror}
mkdir -p "$cache"

kube_version=v1.32.3
etcd_version=v3.5.21
kwok_version=v0.7.0
helm_version=v3.22.0

log() { echo "build.sh: $*" >&2; }

# key hashes what decides a tool's binaries, so that editing a wrapper module
# rebuilds it and nothing else.
key() { (cd "$here/$1" && cat go.mod go.sum ./*.go 2>/dev/null) | sha256sum | cut -c1-12; }

# build NAME VERSION CMD... runs CMD in the wrapper module with $out as the
# output directory, unless $cache/NAME-VERSION-KEY already exists. The result
# appears by rename, so an interrupted build leaves nothing half-written.
build() {
	local name=$1 version=$2; shift 2
	local dir="$cache/$name-$version-$(key "$name")"
	if [[ ! -d $dir ]]; then
		local tmp; tmp=$(mktemp -d "$cache/.$name.XXXXXX")
		log "building $name $version into $dir (once; several minutes)"
		local start=$SECONDS
		(cd "$here/$name" && out=$tmp && "$@" "$tmp") >&2 || { rm -rf "$tmp"; return 1; }
		mv -T "$tmp" "$dir" 2>/dev/null || rm -rf "$tmp" # lost a race: keep the winner's
		log "built $name in $((SECONDS - start)) s"
	fi
	ln -sf "$dir"/* "$bin/"
}

# Version stamps, so that /version and kubectl version say v1.32.3.
kube_ldflags() {
	local minor=${kube_version#v1.}; minor=${minor%%.*} f="-s -w"
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		f+=" -X $p.gitVersion=$kube_version -X $p.gitMajor=1 -X $p.gitMinor=$minor"
		f+=" -X $p.gitCommit=0000000000000000000000000000000000000000 -X $p.gitTreeState=clean"
		f+=" -X $p.buildDate=2025-03-11T00:00:00Z"
	done
	echo "$f"
}

build_kube() { go build -trimpath -ldflags "$(kube_ldflags)" -o "$1/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kube-proxy; }
build_etcd() { go build -trimpath -ldflags "-s -w" -o "$1/etcd" .; }
build_node() { go build -trimpath -ldflags "$(kube_ldflags)" -o "$1/" k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-scheduler; }
build_helm() { go build -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version -X helm.sh/helm/v3/internal/version.gitTreeState=clean" -o "$1/helm" helm.sh/helm/v3/cmd/helm; }
build_kwok() { go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$kwok_version" -o "$1/kwok" sigs.k8s.io/kwok/cmd/kwok; }

# One lock per cache: concurrent runs wait for the first build instead of
# repeating it.
exec 9>"$cache/.lock"
flock 9

bin="$cache/bin"
mkdir -p "$bin"
build etcd "$etcd_version" build_etcd
build kwok "$kwok_version" build_kwok
build kube "$kube_version" build_kube
build node "$kube_version" build_node
build helm "$helm_version" build_helm
echo "$bin"

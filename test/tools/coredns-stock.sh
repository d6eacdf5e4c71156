#!/usr/bin/env bash
# coredns-stock.sh builds a stock CoreDNS with mcmirror added the way an
# operator who builds their own CoreDNS adds it: one line in CoreDNS's
# plugin.cfg, CoreDNS's own generator, go build. CoreDNS is the version this
# module's go.mod requires, copied from the module cache; mcmirror is this
# checkout (a replace). The binary is cached outside the work tree, keyed by
# what it is built from, and the script prints its path. A second run with
# nothing changed only computes the key. test/e2e/stockcoredns runs it.
#
# With --plain it builds CoreDNS as its own release is, without mcmirror:
# the stand-in for the upstream image that forwards clusterset.local to
# coredns-mc in the chart's forward mode.
#
#   coredns-stock.sh [--plain]
#   MCMIRROR_CACHE   cache root (default: ${XDG_CACHE_HOME:-~/.cache}/mcmirror)
set -euo pipefail
plain=false
case ${1:-} in
--plain) plain=true ;;
"") ;;
*) echo "coredns-stock.sh: unknown argument $1" >&2; exit 2 ;;
esac

self=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)/$(basename "${BASH_SOURCE[0]}")
root=$(cd "$(dirname "$self")/../.." && pwd -P)
cache=${MCMIRROR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mcmirror}
mkdir -p "$cache"

# The line of plugin.cfg, and the line it goes before: the plugin chain runs
# in plugin.cfg's order, and mcmirror answers the multi-cluster names and
# hands every other name on to kubernetes (cmd/coredns-mc/directives.go puts
# it at the same place).
line=mcmirror:github.com/mcmirror/mcmirror/plugin/mcmirror
before=kubernetes:kubernetes

# -race, as gotest.sh builds coredns-mc and go test -race builds the tests:
# every package outside CoreDNS (client-go, grpc, the cloud SDKs) is then
# already in the Go build cache. CoreDNS's Makefile builds with
# CGO_ENABLED=0 and -tags grpcnotrace instead, which would compile all of
# them once more and changes nothing of what the test proves.
buildflags=(-race)

log() { echo "coredns-stock.sh: $*" >&2; }

export GOWORK=off
cd "$root"
version=$(go list -m -f '{{.Version}}' github.com/coredns/coredns)
src=$(go mod download -json "github.com/coredns/coredns@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
[[ -n $src && -f $src/plugin.cfg ]] || {
	log "no source of github.com/coredns/coredns@$version in the module cache"
	exit 1
}

# key hashes what decides the binary: this script, the toolchain, mcmirror's
# go.mod and go.sum, and the files of every package of this module that the
# plugin compiles in (a change to internal/link is a change to the plugin).
# The checkout's path is in it too: the binary records it as mcmirror's
# replace.
key() {
	{
		echo "$root"
		go version
		go env GOOS GOARCH CGO_ENABLED GOFLAGS
		echo "${buildflags[*]}"
		sha256sum "$self" go.mod go.sum
		go list -deps -f '{{if .Module}}{{if eq .Module.Path "github.com/mcmirror/mcmirror"}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}
{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}
{{end}}{{end}}{{end}}' ./plugin/mcmirror | sed "s|^$root/||" | LC_ALL=C sort | xargs -r sha256sum --
	} | sha256sum | cut -c1-12
}
if $plain; then
	out=$cache/coredns-plain-$version-$(go version | sha256sum | cut -c1-12)
else
	out=$cache/coredns-stock-$version-$(key)
fi

# One lock for these builds: concurrent runs wait for the first instead of
# repeating it, and the source directory below is theirs one at a time.
exec 9>"$cache/.coredns-stock.lock"
flock 9

if [[ ! -x $out/coredns ]]; then
	log "building CoreDNS $version $($plain && echo without || echo with) mcmirror into $out (once per change of the plugin; minutes)"
	start=$SECONDS
	# The copy is made at the same path every time: the Go build cache keys
	# a package of the main module by its directory, so CoreDNS's packages
	# compiled by the last build are reused, and a change of the plugin
	# recompiles only what imports it.
	work=$cache/coredns-stock-src
	[[ ! -e $work ]] || chmod -R u+w "$work"
	rm -rf "$work"
	cp -R "$src" "$work"
	chmod -R u+w "$work"
	cd "$work"

	if $plain; then
		tmp=$(mktemp -d "$cache/.coredns-stock.XXXXXX")
		go build -buildvcs=false "${buildflags[@]}" -o "$tmp/coredns" . >&2 || {
			rm -rf "$tmp"
			exit 1
		}
		rm -rf "$out"
		mv -T "$tmp" "$out"
		log "built plain CoreDNS in $((SECONDS - start)) s"
		echo "$out/coredns"
		exit 0
	fi

	if [[ $(grep -cx "$before" plugin.cfg) != 1 ]]; then
		log "plugin.cfg of CoreDNS $version has no line '$before' (or several): mcmirror goes right before it; see where kubernetes went"
		exit 1
	fi
	sed -i "/^$before\$/i $line" plugin.cfg

	# The checkout is required and replaced, and its go.sum added, before
	# anything loads CoreDNS's packages: the versions it pins are those
	# chosen (its go.mod requires this CoreDNS, so its module graph holds
	# CoreDNS's requirements), every one is in the module cache once this
	# module builds, and every hash is known: nothing is downloaded.
	# -mod=mod lets go record the new requirements in go.mod.
	go mod edit -require=github.com/mcmirror/mcmirror@v0.0.0-00010101000000-000000000000 -replace="github.com/mcmirror/mcmirror=$root"
	LC_ALL=C sort -u -o go.sum go.sum "$root/go.sum"
	export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"

	# What CoreDNS's Makefile runs when plugin.cfg changes: go generate
	# (directives_generate.go, owners_generate.go); the go get it runs
	# next is the go.mod edit above.
	go generate coredns.go >&2
	if ! grep -q '"mcmirror",' core/dnsserver/zdirectives.go || ! grep -q '"github.com/mcmirror/mcmirror/plugin/mcmirror"' core/plugin/zplugin.go; then
		log "go generate did not pick up '$line' (core/dnsserver/zdirectives.go, core/plugin/zplugin.go in $work)"
		exit 1
	fi

	tmp=$(mktemp -d "$cache/.coredns-stock.XXXXXX")
	go build -buildvcs=false "${buildflags[@]}" -o "$tmp/coredns" . >&2 || {
		rm -rf "$tmp"
		exit 1
	}
	rm -rf "$out" # a directory without the binary: not a build of this script
	mv -T "$tmp" "$out"
	log "built in $((SECONDS - start)) s"
fi
# Every change of the plugin makes a binary of about 150 MB: the three used
# last are kept (another checkout sharing the cache may want its own).
touch "$out"
ls -dt "$cache"/coredns-stock-v*/ | tail -n +4 | xargs -r rm -rf --
echo "$out/coredns"

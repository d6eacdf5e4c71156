#!/usr/bin/env bash
# image.sh builds coredns-mc's image from the Dockerfile with buildah, with
# no Docker engine and no registry, and the two small images the real-node
# e2e tests run beside it: the pod sandbox registry.k8s.io/pause:3.10 (the Go
# program in images/pause) and docker.io/library/busybox:1.35 (Debian's
# busybox-static) for workload and client pods. The base images the
# Dockerfile names cannot be pulled here either: stand-ins are built locally
# under those very names, and buildah is told never to pull.
#
# It prints one line: a directory holding coredns-mc.oci.tar, pause.oci.tar
# and busybox.oci.tar, OCI archives for `ctr -n k8s.io images import` that
# name their image in the io.containerd.image.name annotation, and
# images.env:
#
#   COREDNS_MC_IMAGE=mcmirror.dev/coredns-mc:<git describe>[-dirty-<source key>]
#   PAUSE_IMAGE=registry.k8s.io/pause:3.10
#   BUSYBOX_IMAGE=docker.io/library/busybox:1.35
#
# Everything, buildah's storage included, lives under $MCMIRROR_CACHE/images,
# keyed by what decides it (for coredns-mc: the source tree, read without
# writing to the repository). A second run with nothing changed only
# computes the keys. Building needs root (buildah, debootstrap).
#
#   MCMIRROR_CACHE   cache root (default: ${XDG_CACHE_HOME:-~/.cache}/mcmirror)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${MCMIRROR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mcmirror}
images=$cache/images
store=$images/buildah
mkdir -p "$images"

golang_image=docker.io/library/golang:1.26-bookworm
distroless_image=gcr.io/distroless/static-debian12:nonroot
pause_image=registry.k8s.io/pause:3.10
busybox_image=docker.io/library/busybox:1.35

log() { echo "image.sh: $*" >&2; }

# Debian packages, installed when missing (busybox-static has no command of
# its own name: the busybox package's /bin/busybox is not static).
declare -A cmd_pkg=([buildah]=buildah [debootstrap]=debootstrap [jq]=jq [git]=git)
need=()
for cmd in "${!cmd_pkg[@]}"; do
	command -v "$cmd" >/dev/null 2>&1 || need+=("${cmd_pkg[$cmd]}")
done
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'ok installed' || need+=(busybox-static)
((${#need[@]} == 0)) || "$here/deps.sh" "${need[@]}"

go_version=$(go env GOVERSION)
if [[ $go_version != go1.26 && $go_version != go1.26.* ]]; then
	log "the Dockerfile builds with golang:1.26-bookworm, whose stand-in is this machine's Go; it is $go_version"
	exit 1
fi

# key hashes what decides an image: the functions that build it and the
# versions of what goes into it.
key() { printf '%s\n' "$@" | sha256sum | cut -c1-12; }
pkgver() { dpkg-query -W -f='${Package}=${Version}\n' "$@"; }

# source_key hashes the work tree as the Dockerfile's COPY sees it: HEAD, the
# changes to tracked files and the untracked files. Nothing is written to the
# repository.
source_key() {
	(
		cd "$root"
		if git rev-parse --verify -q HEAD >/dev/null 2>&1; then
			git rev-parse HEAD
			git diff HEAD --binary --no-ext-diff --no-textconv
			git ls-files -z --others --exclude-standard | xargs -0r sha256sum --
		else
			find . \( -name .git -o -path ./bin \) -prune -o -type f -print0 | sort -z | xargs -0r sha256sum --
		fi
	) | sha256sum | cut -c1-12
}

# The image build: buildah and its storage, a scratch directory, and what an
# interrupted run left behind removed. Set up once, before the first build.
ready=0
setup() {
	((ready)) && return
	ready=1
	if [[ $(id -u) != 0 ]]; then
		log "building images needs root (buildah, debootstrap)"
		exit 1
	fi
	mkdir -p "$store"
	[[ -f $store/registries.conf ]] || : >"$store/registries.conf" # no registry at all
	mkdir -p "$store/registries.conf.d"
	echo '{"default":[{"type":"insecureAcceptAnything"}]}' >"$store/policy.json"
	tmp=$(mktemp -d "$images/.tmp.XXXXXX")
	trap cleanup EXIT
	bah rm --all >/dev/null
	bah rmi --prune >/dev/null
}

bah() {
	buildah --root "$store/root" --runroot "$store/run" --storage-driver vfs \
		--registries-conf "$store/registries.conf" --registries-conf-dir "$store/registries.conf.d" "$@"
}

cleanup() {
	local status=$?
	unmount_under "$tmp"
	rm -rf "$tmp"
	((status == 0)) || bah rm --all >/dev/null 2>&1 || true
}

# unmount_under DIR unmounts what is mounted below DIR, deepest first: a
# debootstrap that failed half-way may leave /proc, /sys or a bind mount of
# /dev there, and rm -rf must not reach into them.
unmount_under() {
	awk -v d="$1/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r |
		while read -r m; do umount -l "$m" || true; done
}

# scratch NAME FILL CONFIG... commits image NAME from scratch: FILL fills its
# root file system (given as $1), CONFIG are `buildah config` options. The
# image that had the name before is left dangling, and pruned.
scratch() {
	local name=$1 fill=$2 c mnt; shift 2
	c=$(bah from --pull=never --quiet scratch)
	mnt=$(bah mount "$c")
	"$fill" "$mnt"
	bah umount "$c" >/dev/null
	bah config "$@" "$c"
	bah commit --quiet --rm --identity-label=false "$c" "$name" >/dev/null
	bah rmi --prune >/dev/null
}

# archive NAME FILE writes image NAME to FILE as an OCI archive. Buildah
# names the image only in org.opencontainers.image.ref.name; containerd's
# import reads io.containerd.image.name first, so it is set to the full name.
archive() {
	local name=$1 out=$2 dir=$tmp/layout
	rm -rf "$dir"
	bah push --quiet --signature-policy "$store/policy.json" "$name" "oci:$dir:$name" >&2
	jq -e '.manifests | length == 1' "$dir/index.json" >/dev/null
	jq -c --arg n "$name" '.manifests[0].annotations["io.containerd.image.name"] = $n' \
		"$dir/index.json" >"$dir/index.new"
	mv "$dir/index.new" "$dir/index.json"
	tar -C "$dir" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
		-cf "$out" oci-layout index.json blobs
	rm -rf "$dir"
}

# copy_pkg_files PKG REGEX DIR copies the files Debian package PKG installed
# whose paths match REGEX into DIR, symbolic links as links.
copy_pkg_files() {
	dpkg -L "$1" | grep -E "$2" | while read -r f; do
		if [[ -e $f || -L $f ]]; then echo "${f#/}"; fi
	done | tar -C / --no-recursion -cf - -T - | tar -C "$3" -xf -
}

# fill_golang: the stand-in for golang:1.26-bookworm. Debian bookworm from
# debootstrap (minbase, with ca-certificates and netbase as the upstream
# image has them), and this machine's Go toolchain in /usr/local/go.
fill_golang() {
	local mnt=$1 rootfs=$tmp/debootstrap
	if ! debootstrap --variant=minbase --include=ca-certificates,netbase \
		bookworm "$rootfs" http://deb.debian.org/debian >"$tmp/debootstrap.log" 2>&1; then
		tail -20 "$tmp/debootstrap.log" >&2
		return 1
	fi
	unmount_under "$rootfs"
	mv "$rootfs"/* "$mnt"/
	rm -rf "$mnt"/etc/resolv.conf "$mnt"/etc/hostname "$mnt"/etc/apt/sources.list \
		"$mnt"/var/lib/apt/lists/* "$mnt"/var/cache/apt/*.bin "$mnt"/var/log/*.log
	cat >"$mnt/etc/apt/sources.list.d/debian.sources" <<-'EOF'
		Types: deb
		URIs: http://deb.debian.org/debian
		Suites: bookworm bookworm-updates
		Components: main
		Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

		Types: deb
		URIs: http://deb.debian.org/debian-security
		Suites: bookworm-security
		Components: main
		Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
	EOF
	cp -a "$(go env GOROOT)" "$mnt/usr/local/go"
	mkdir -p "$mnt/go/src" "$mnt/go/bin"
	chmod -R 1777 "$mnt/go"
}
golang_config=(--env PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
	--env "GOLANG_VERSION=${go_version#go}" --env GOTOOLCHAIN=local --env GOPATH=/go
	--workingdir /go --cmd '["bash"]')

# fill_distroless: the stand-in for distroless/static-debian12:nonroot, with
# its users and groups, the CA bundle and the zoneinfo of Debian's
# ca-certificates and tzdata, netbase's /etc/services and /etc/protocols.
fill_distroless() {
	local mnt=$1
	mkdir -p "$mnt"/etc/ssl/certs "$mnt"/tmp "$mnt"/root "$mnt"/home/nonroot
	cat >"$mnt/etc/passwd" <<-'EOF'
		root:x:0:0:root:/root:/sbin/nologin
		nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
		nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
	EOF
	cat >"$mnt/etc/group" <<-'EOF'
		root:x:0:
		nobody:x:65534:
		tty:x:5:
		staff:x:50:
		nonroot:x:65532:
	EOF
	cat >"$mnt/etc/nsswitch.conf" <<-'EOF'
		passwd:         files
		group:          files
		shadow:         files
		hosts:          files dns
		networks:       files
		protocols:      files
		services:       files
		ethers:         files
		rpc:            files
	EOF
	cat >"$mnt/etc/os-release" <<-'EOF'
		PRETTY_NAME="Distroless (local stand-in: mcmirror test/tools/image.sh)"
		NAME="Debian GNU/Linux"
		ID="debian"
		VERSION_ID="12"
		VERSION="Debian GNU/Linux 12 (bookworm)"
	EOF
	dpkg -L ca-certificates | grep -E '^/usr/share/ca-certificates/.*\.crt$' | sort | xargs cat \
		>"$mnt/etc/ssl/certs/ca-certificates.crt"
	copy_pkg_files tzdata '^/usr/share/zoneinfo(/|$)' "$mnt"
	copy_pkg_files netbase '^/etc/.' "$mnt"
	chmod 1777 "$mnt/tmp"
	chmod 700 "$mnt/root" "$mnt/home/nonroot"
	chown 65532:65532 "$mnt/home/nonroot"
}
distroless_config=(--env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
	--env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt --user 65532 --workingdir /home/nonroot)

# fill_pause: the pod sandbox, a static Go program, user 65535 as upstream's.
fill_pause() {
	(cd "$here/images/pause" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$1/pause" .) >&2
}
pause_config=(--entrypoint '["/pause"]' --user 65535:65535)

# fill_busybox: Debian's static busybox with a link per applet in /bin.
fill_busybox() {
	local mnt=$1 a
	mkdir -p "$mnt"/bin "$mnt"/etc "$mnt"/tmp "$mnt"/root "$mnt"/home
	cp -L "$(dpkg -L busybox-static | grep -m1 '/bin/busybox$')" "$mnt/bin/busybox"
	for a in $("$mnt/bin/busybox" --list); do
		[[ $a == busybox ]] || ln -s busybox "$mnt/bin/$a"
	done
	cat >"$mnt/etc/passwd" <<-'EOF'
		root:x:0:0:root:/root:/bin/sh
		nobody:x:65534:65534:nobody:/home:/bin/false
	EOF
	cat >"$mnt/etc/group" <<-'EOF'
		root:x:0:
		nobody:x:65534:
	EOF
	chmod 1777 "$mnt/tmp"
	chmod 700 "$mnt/root"
}
busybox_config=(--env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd '["sh"]')

# base NAME KEY FILL CONFIG... makes sure buildah's storage holds base image
# NAME as KEY builds it; the key is kept beside the storage.
base() {
	local name=$1 k=$2 stamp=$store/${1//[\/:]/_}.key
	shift 2
	if [[ $(cat "$stamp" 2>/dev/null) == "$k" ]] && bah inspect --type image "$name" >/dev/null 2>&1; then
		return
	fi
	log "building the local stand-in for $name ($k)"
	local start=$SECONDS
	rm -f "$stamp"
	scratch "$name" "$@"
	echo "$k" >"$stamp"
	log "built $name in $((SECONDS - start)) s"
}

# build_coredns_mc FILE builds the Dockerfile offline: the host's module and
# build caches are mounted into its RUN steps and GOPROXY is off there.
build_coredns_mc() {
	base "$golang_image" "$golang_key" fill_golang "${golang_config[@]}"
	base "$distroless_image" "$distroless_key" fill_distroless "${distroless_config[@]}"
	(cd "$root" && go mod download) >&2
	local modcache gocache
	modcache=$(go env GOMODCACHE) gocache=$(go env GOCACHE)
	mkdir -p "$gocache"
	bah bud --pull=never --isolation chroot --layers=false --force-rm \
		--signature-policy "$store/policy.json" \
		--volume "$modcache:/go/pkg/mod" --volume "$gocache:/root/.cache/go-build" \
		--build-arg GOPROXY=off --build-arg VERSION="$version" --build-arg COMMIT="$commit" \
		-f "$root/Dockerfile" -t "$coredns_image" "$root" >&2
	archive "$coredns_image" "$1"
	bah rmi "$coredns_image" >/dev/null
	bah rmi --prune >/dev/null
}

# build_scratch NAME FILL CONFIG... FILE writes image NAME, as scratch
# builds it, to FILE.
build_scratch() {
	local out=${!#}
	scratch "${@:1:$#-1}"
	archive "$1" "$out"
	bah rmi "$1" >/dev/null
}

# cached VAR NAME KEY CMD... sets VAR to $images/NAME-KEY'.oci.tar, which
# CMD writes to the file it is given unless it exists; KEY' is KEY and CMD
# with its arguments (the image's name among them) hashed together. It
# appears by rename, so an interrupted build leaves nothing half-written;
# the three newest of NAME are kept.
cached() {
	local var=$1 name=$2 k; k=$(key "$3" "${*:4}"); shift 3
	local out=$images/$name-$k.oci.tar
	if [[ ! -f $out ]]; then
		setup
		log "building $name ($k)"
		local start=$SECONDS
		"$@" "$tmp/$name.oci.tar"
		mv "$tmp/$name.oci.tar" "$out"
		log "built $name in $((SECONDS - start)) s"
		ls -t "$images/$name"-*.oci.tar | tail -n +4 | xargs -r rm -f --
	fi
	printf -v "$var" '%s' "$out"
}

# One lock for the images: concurrent runs wait for the first build instead
# of repeating it, and buildah's storage has one user at a time.
exec 9>"$images/.lock"
flock 9

src=$(source_key)
version=dev commit=unknown
if git -C "$root" rev-parse --verify -q HEAD >/dev/null 2>&1; then
	version=$(git -C "$root" describe --tags --always)
	commit=$(git -C "$root" rev-parse --short=12 HEAD)
	[[ -z $(git -C "$root" status --porcelain) ]] || version+=-dirty-$src
fi
coredns_image=mcmirror.dev/coredns-mc:$version

helpers=$(declare -f scratch archive copy_pkg_files)
golang_key=$(key "$helpers" "$(declare -f fill_golang)" "${golang_config[*]}" "$go_version" "$(go env GOROOT)")
distroless_key=$(key "$helpers" "$(declare -f fill_distroless)" "${distroless_config[*]}" "$(pkgver ca-certificates tzdata netbase)")
coredns_key=$(key "$helpers" "$(declare -f build_coredns_mc)" "$src" "$version" "$commit" "$golang_key" "$distroless_key")
pause_key=$(key "$helpers" "$(declare -f fill_pause build_scratch)" "${pause_config[*]}" "$go_version" \
	"$(cat "$here/images/pause/go.mod" "$here"/images/pause/*.go)")
busybox_key=$(key "$helpers" "$(declare -f fill_busybox build_scratch)" "${busybox_config[*]}" "$(pkgver busybox-static)")

cached coredns_tar coredns-mc "$coredns_key" build_coredns_mc
cached pause_tar pause "$pause_key" build_scratch "$pause_image" fill_pause "${pause_config[@]}"
cached busybox_tar busybox "$busybox_key" build_scratch "$busybox_image" fill_busybox "${busybox_config[@]}"

# The set the tests take: hard links to the archives and images.env, in a
# directory of its own per set so that a test still reading one is not
# disturbed by the next build.
set_dir=$images/set-$(key "$coredns_tar" "$pause_tar" "$busybox_tar" "$coredns_image")
if [[ ! -d $set_dir ]]; then
	t=$(mktemp -d "$images/.set.XXXXXX")
	ln "$coredns_tar" "$t/coredns-mc.oci.tar"
	ln "$pause_tar" "$t/pause.oci.tar"
	ln "$busybox_tar" "$t/busybox.oci.tar"
	printf '%s\n' "COREDNS_MC_IMAGE=$coredns_image" "PAUSE_IMAGE=$pause_image" "BUSYBOX_IMAGE=$busybox_image" >"$t/images.env"
	chmod 755 "$t"
	mv -T "$t" "$set_dir"
	ls -dt "$images"/set-* | tail -n +4 | xargs -r rm -rf --
fi
echo "$set_dir"

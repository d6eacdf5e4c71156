#!/usr/bin/env bash
# deps.sh installs the Debian packages the tests and the demo use, when they
# are missing: dig (dnsutils), ip (iproute2), ps (procps), flock (util-linux),
# openssl (the deploy README's certificate recipe is run by a test), nft
# (nftables: kube-proxy programs the data plane's Services with it), curl
# (the walkthrough's client), and what a real node runs: containerd and ctr
# (containerd), runc, the CNI plugins bridge, host-local, portmap and loopback
# (containernetworking-plugins) and iptables (the bridge plugin masquerades
# with it).
# Extra package names may be given as arguments (make bench adds dnsperf).
set -euo pipefail

declare -A cmd_pkg=([dig]=dnsutils [ip]=iproute2 [ps]=procps [flock]=util-linux [taskset]=util-linux [openssl]=openssl [nft]=nftables [curl]=curl
	[containerd]=containerd [ctr]=containerd [runc]=runc [iptables]=iptables [/usr/lib/cni/bridge]=containernetworking-plugins)
need=()
for cmd in "${!cmd_pkg[@]}"; do
	command -v "$cmd" >/dev/null 2>&1 || [[ -x $cmd ]] || need+=("${cmd_pkg[$cmd]}")
done
for pkg in "$@"; do
	command -v "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
((${#need[@]})) || exit 0

mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
sudo=""
[[ $(id -u) == 0 ]] || sudo=sudo
echo "deps.sh: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >&2
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >&2

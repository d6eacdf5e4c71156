#!/bin/sh
# render.sh writes one cluster's copy of the manifests of deploy/: the same
# files, with that cluster's values in place of the defaults (a cluster named
# east, linked with west, running ghcr.io/mcmirror/coredns-mc:latest):
#
#   deploy/render.sh --out mcmirror-west --cluster west --image REGISTRY/coredns-mc@sha256:... \
#       --peer east=198.51.100.7:4143 --allow-cluster east
#   kubectl --context west apply -f mcmirror-west/
#   kubectl --context west -n kube-system patch deployment coredns --type=json \
#       --patch-file mcmirror-west/patches/coredns.yaml
#
# Flags:
#   --out DIR               where to write (required; created; files in it are replaced)
#   --cluster NAME          this cluster's name, a DNS label other than "global" (required):
#                           the controller's and the gateway's --cluster, the Corefile's `cluster`
#   --image REF             the image of every component (default ghcr.io/mcmirror/coredns-mc:latest)
#   --egress-ports LO-HI    the controller's and the gateway's --egress-ports (default 30000-32767)
#   --peer NAME=HOST:PORT   the ingress address of a cluster this one links to (repeat per
#                           cluster; none: the gateway has no --peer)
#   --allow-cluster NAME    a cluster that links to this one (repeat; at least one)
#   --gateway-health URL    the Corefile's gateway_health URL (default: none, commented out)
#
# Only the lines that carry these values change, each matched whole; a
# value line that is not where it is expected stops the script with an
# error, so the output never mixes this cluster's values with the defaults.
# POSIX sh and awk: Linux and macOS alike. deploy/README.md has the whole
# installation.
set -eu

src=$(cd "$(dirname "$0")" && pwd -P)
default_image=ghcr.io/mcmirror/coredns-mc:latest

die() {
	printf 'render.sh: %s\n' "$*" >&2
	exit 2
}

out= cluster= image=$default_image ports=30000-32767 peers= allow= health=
while [ $# -gt 0 ]; do
	case $1 in
	--*=*)
		flag=${1%%=*} value=${1#*=}
		shift
		set -- "$flag" "$value" "$@"
		continue
		;;
	-h | --help)
		sed -n '2,/^set -eu/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
		exit 0
		;;
	--out | --cluster | --image | --egress-ports | --peer | --allow-cluster | --gateway-health)
		[ $# -ge 2 ] || die "$1 needs a value"
		case $1 in
		--out) out=$2 ;;
		--cluster) cluster=$2 ;;
		--image) image=$2 ;;
		--egress-ports) ports=$2 ;;
		--peer) peers="$peers $2" ;;
		--allow-cluster) allow="$allow $2" ;;
		--gateway-health) health=$2 ;;
		esac
		shift 2
		;;
	*) die "unknown argument $1 (--help lists the flags)" ;;
	esac
done

label() { printf '%s\n' "$1" | grep -Eq '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'; }

[ -n "$out" ] || die "--out DIR is required"
[ -n "$cluster" ] || die "--cluster NAME is required"
label "$cluster" && [ "$cluster" != global ] ||
	die "--cluster $cluster: want a DNS label (a-z, 0-9, -; at most 63) other than global"
printf '%s\n' "$image" | grep -Eq '^[A-Za-z0-9][A-Za-z0-9._/:@-]*$' ||
	die "--image $image: want an image reference such as registry.example.com/coredns-mc:v1 or ...@sha256:<digest>"
printf '%s\n' "$ports" | grep -Eq '^[0-9]{1,5}-[0-9]{1,5}$' || die "--egress-ports $ports: want LOW-HIGH"
lo=${ports%-*} hi=${ports#*-}
[ "$lo" -ge 1 ] && [ "$hi" -le 65535 ] && [ "$lo" -le "$hi" ] || die "--egress-ports $ports: want 1 <= LOW <= HIGH <= 65535"
seen=" "
for p in $peers; do
	name=${p%%=*}
	label "$name" && [ "$name" != global ] && [ "$name" != "$cluster" ] ||
		die "--peer $p: want NAME=HOST:PORT, NAME a cluster's name other than --cluster"
	printf '%s\n' "${p#*=}" | grep -Eq '^([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}$' ||
		die "--peer $p: want NAME=HOST:PORT (an IPv6 address in brackets)"
	case $seen in *" $name "*) die "--peer $name given twice" ;; esac
	seen="$seen$name "
done
[ -n "$allow" ] || die "--allow-cluster NAME is required (each cluster that links to this one): without it the ingress would let in every cluster of the trust root"
for a in $allow; do
	label "$a" && [ "$a" != global ] && [ "$a" != "$cluster" ] ||
		die "--allow-cluster $a: want a cluster's name other than --cluster"
done
[ -z "$health" ] || printf '%s\n' "$health" | grep -Eq '^https?://[^[:space:]\\]+$' ||
	die "--gateway-health $health: want an http:// or https:// URL, such as http://10.96.0.20:9155/peers"

if [ -d "$out" ] && [ "$(cd "$out" && pwd -P)" = "$src" ]; then
	die "--out $out is deploy/ itself: write elsewhere"
fi
mkdir -p "$out/patches"

# render FILE WANT: deploy/FILE with this cluster's values, into $out/FILE.
# WANT is how many value lines of each kind FILE holds.
render() {
	awk -v image="$image" -v cluster="$cluster" -v ports="$ports" -v peers="$peers" \
		-v allow="$allow" -v health="$health" -v want="$2" -v file="$1" '
		function indent() { match($0, /^ */); return substr($0, 1, RLENGTH) }
		/^ *image: ghcr\.io\/mcmirror\/coredns-mc:latest$/ { print indent() "image: " image; n["image"]++; next }
		/^ *value: ghcr\.io\/mcmirror\/coredns-mc:latest$/ { print indent() "value: " image; n["image"]++; next }
		/^ *- --cluster=east$/ { print indent() "- --cluster=" cluster; n["cluster"]++; next }
		/^ *cluster east$/ { print indent() "cluster " cluster; n["cluster"]++; next }
		/^ *- --egress-ports=30000-32767$/ { print indent() "- --egress-ports=" ports; n["ports"]++; next }
		/^ *- --peer=west=203\.0\.113\.10:4143$/ {
			k = split(peers, v, " ")
			for (i = 1; i <= k; i++) print indent() "- --peer=" v[i]
			n["peer"]++; next
		}
		/^ *- --allow-cluster=west$/ {
			k = split(allow, v, " ")
			for (i = 1; i <= k; i++) print indent() "- --allow-cluster=" v[i]
			n["allow"]++; next
		}
		/^ *# gateway_health http:\/\/CLUSTER-IP:9155\/peers$/ {
			if (health != "") print indent() "gateway_health " health; else print
			n["health"]++; next
		}
		{ print }
		END {
			k = split(want, w, " ")
			for (i = 1; i <= k; i++) {
				split(w[i], kv, "=")
				if (n[kv[1]] + 0 != kv[2]) {
					printf "render.sh: deploy/%s: %d %s line(s), want %d: was the file edited?\n", file, n[kv[1]], kv[1], kv[2] | "cat 1>&2"
					bad = 1
				}
			}
			exit bad
		}' "$src/$1" >"$out/$1.tmp" || {
		rm -f "$out/$1.tmp"
		exit 2
	}
	mv "$out/$1.tmp" "$out/$1"
}

render controller.yaml "image=1 cluster=1 ports=1 peer=0 allow=0 health=0"
render coredns.yaml "image=0 cluster=1 ports=0 peer=0 allow=0 health=1"
render gateway.yaml "image=1 cluster=1 ports=1 peer=1 allow=1 health=0"
render remote-link.yaml "image=0 cluster=0 ports=0 peer=0 allow=0 health=0"
render admission-policy.yaml "image=0 cluster=0 ports=0 peer=0 allow=0 health=0"
render patches/coredns.yaml "image=1 cluster=0 ports=0 peer=0 allow=0 health=0"
printf 'render.sh: wrote %s/ for cluster %s\n' "$out" "$cluster" >&2

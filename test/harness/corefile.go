package harness

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mcmirror/mcmirror/internal/corefile"
	"github.com/mcmirror/mcmirror/internal/labels"
)

// mirrorCorefile returns the Corefile of local's DNS as a fleet runs it:
// bound to {HOST}, with the ready and prometheus plugins, then plugins,
// and mcmirror before kubernetes for cluster.local and the reverse zones,
// both reaching local's API server as its admin. block is the rest of the
// mcmirror block, lines that end in a newline.
func mirrorCorefile(local *Cluster, plugins []string, block string) string {
	var before strings.Builder
	for _, p := range plugins {
		fmt.Fprintf(&before, "    %s\n", p)
	}
	// In import mode the kubernetes plugin selects no copy of a linked
	// cluster's endpoints, as `coredns-mc dns apply` and the chart make it
	// (internal/corefile).
	kube := ""
	if corefile.ImportSource("mcmirror {\n" + block + "}\n") {
		kube = "        labels " + labels.NotFlatEndpoints + "\n"
	}
	return fmt.Sprintf(`
. {
    bind {HOST}
    errors
    ready {HOST}:{READY}
    prometheus {HOST}:{METRICS}
%[4]s    mcmirror cluster.local in-addr.arpa ip6.arpa {
        cluster %[1]s
        kubeconfig %[2]s
%[3]s
        fallthrough in-addr.arpa ip6.arpa
    }
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig %[2]s
%[5]s        fallthrough in-addr.arpa ip6.arpa
    }
}
`, local.Name, local.Kubeconfig, block, before.String(), kube)
}

// LinkLines returns the lines of an mcmirror block that link each remote
// with the read-only credentials of deploy/remote-link.yaml
// (Cluster.LinkFile).
func LinkLines(t testing.TB, remotes ...*Cluster) string {
	t.Helper()
	var ls []Link
	for _, r := range remotes {
		ls = append(ls, Link{Name: r.Name, Kubeconfig: r.LinkFile(t)})
	}
	return linkLines(ls...)
}

// linkLines returns the lines of an mcmirror block that link each of ls
// with its kubeconfig file.
func linkLines(ls ...Link) string {
	var b strings.Builder
	for _, l := range ls {
		fmt.Fprintf(&b, "        link %s %s\n", l.Name, l.Kubeconfig)
	}
	return b.String()
}

// HostCorefile adapts the Corefile of deploy/coredns.yaml's ConfigMap (or
// of a cluster DNS ConfigMap patched from it) to a coredns-mc process on
// this host, as StartDNS runs one: bound to 127.0.0.1, the ready and
// prometheus plugins on 127.0.0.1:{READY} and 127.0.0.1:{METRICS}, health
// on healthPort, and the API server reached with kubeconfig (the
// ServiceAccount's the manifest grants to) instead of the in-cluster
// configuration. Each line it replaces must be there once.
func HostCorefile(cf, kubeconfig string, healthPort int) (string, error) {
	for _, r := range []struct{ old, new string }{
		{".:53 {\n", ". {\n    bind 127.0.0.1\n"},
		{"    health {\n", fmt.Sprintf("    health 127.0.0.1:%d {\n", healthPort)},
		{"    ready\n", "    ready 127.0.0.1:{READY}\n"},
		{"    prometheus :9153\n", "    prometheus 127.0.0.1:{METRICS}\n"},
		{"        link_secrets ", "        kubeconfig " + kubeconfig + "\n        link_secrets "},
		{"        pods insecure\n", "        kubeconfig " + kubeconfig + "\n        pods insecure\n"},
	} {
		if n := strings.Count(cf, r.old); n != 1 {
			return "", fmt.Errorf("the Corefile has %q %d times, not once", r.old, n)
		}
		cf = strings.Replace(cf, r.old, r.new, 1)
	}
	return cf, nil
}

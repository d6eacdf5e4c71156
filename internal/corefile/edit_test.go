package corefile

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mcmirror/mcmirror/internal/labels"

	"github.com/coredns/caddy/caddyfile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
)

// stanza is a block as the chart renders it (dns-patch.yaml).
const stanza = `mcmirror cluster.local clusterset.local in-addr.arpa ip6.arpa {
    cluster east
    clusterset clusterset.local
    link_secrets mcmirror-links

    fallthrough in-addr.arpa ip6.arpa
}
`

func edit() Edit {
	return Edit{Zone: "cluster.local", ClusterSet: "clusterset.local", Stanza: stanza}
}

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return string(b)
}

// without returns s without the lines from..from+n.
func without(s string, from, n int) string {
	l := strings.Split(s, "\n")
	return strings.Join(append(l[:from:from], l[from+n:]...), "\n")
}

// TestAddKeepsTheClusterCorefile adds the stanza to the Corefiles that
// kubeadm, k3s (with its imports of custom files), the EKS add-on and RKE2
// ship, and to one with stub domains and forwarders: the result is the
// original with the stanza's lines inserted right before the kubernetes
// plugin of the server block for cluster.local, indented as it, and not a
// byte of the rest changed but the health plugin's lameduck, raised to
// 10 s; CoreDNS's parser finds mcmirror in that block.
func TestAddKeepsTheClusterCorefile(t *testing.T) {
	for name, c := range map[string]struct{ block, health, raised, lameduck string }{
		"kubeadm.Corefile": {"the block .:53 (line 1)", "lameduck 5s\n", "lameduck 10s\n", "line 4: health's lameduck 5s -> 10s"},
		"k3s.Corefile": {"the block .:53 (line 1)", "    health\n", "    health {\n        lameduck 10s\n    }\n",
			"line 3: health's lameduck (none: 0 s) -> 10s"},
		"eks.Corefile":         {"the block .:53 (line 1)", "lameduck 5s\n", "lameduck 10s\n", "line 4: health's lameduck 5s -> 10s"},
		"rke2.Corefile":        {"the block .:53 (line 1)", "lameduck 5s\n", "lameduck 10s\n", "line 4: health's lameduck 5s -> 10s"},
		"stubdomains.Corefile": {"the block .:53 (line 8)", "lameduck 5s\n", "lameduck 10s\n", "line 11: health's lameduck 5s -> 10s"},
	} {
		t.Run(name, func(t *testing.T) {
			orig := read(t, name)
			res, err := Add(orig, edit())
			require.NoError(t, err)
			assert.Equal(t, c.block, res.Block)
			assert.Empty(t, res.Forwards)
			assert.Equal(t, c.lameduck, res.Lameduck)
			require.Equal(t, 1, strings.Count(orig, c.health))
			raised := strings.Replace(res.Corefile, c.raised, c.health, 1)

			kube := strings.Index(orig, "    kubernetes ")
			require.Positive(t, kube)
			at := strings.Count(orig[:kube], "\n")
			n := strings.Count(stanza, "\n")
			got := strings.Split(raised, "\n")
			assert.Equal(t, "    mcmirror cluster.local clusterset.local in-addr.arpa ip6.arpa {", got[at])
			assert.Equal(t, "        cluster east", got[at+1])
			assert.Equal(t, "", got[at+4], "an empty line of the stanza stays empty")
			assert.Equal(t, "    }", got[at+n-1])
			assert.True(t, strings.HasPrefix(strings.TrimSpace(got[at+n]), "kubernetes "), got[at+n])
			assert.Equal(t, orig, without(raised, at, n), "everything but the stanza and lameduck, byte for byte")

			blocks, err := parse(res.Corefile)
			require.NoError(t, err)
			i, _ := serving(blocks, "cluster.local.")
			require.GreaterOrEqual(t, i, 0)
			assert.NotEmpty(t, blocks[i].tokens["mcmirror"])
			assert.NotEmpty(t, blocks[i].tokens["kubernetes"])
		})
	}
}

// TestAddKeepsImports: k3s's two import lines, one inside the server block
// and one at the top level, are where they were.
func TestAddKeepsImports(t *testing.T) {
	res, err := Add(read(t, "k3s.Corefile"), edit())
	require.NoError(t, err)
	assert.Contains(t, res.Corefile, "    loadbalance\n    import /etc/coredns/custom/*.override\n}\nimport /etc/coredns/custom/*.server\n")
}

// TestAddUpstream: with an upstream, each forward to a resolv.conf
// forwards to it instead (options and other forwards kept), and no loop is
// left on a node whose resolver is local.
func TestAddUpstream(t *testing.T) {
	e := edit()
	e.Upstream = []string{"10.0.0.2", "10.0.0.3:53"}
	res, err := Add(read(t, "kubeadm.Corefile"), e)
	require.NoError(t, err)
	assert.Contains(t, res.Corefile, "    forward . 10.0.0.2 10.0.0.3:53 {\n       max_concurrent 1000\n    }\n")
	assert.NotContains(t, res.Corefile, "/etc/resolv.conf")
	assert.Equal(t, []string{"line 13: /etc/resolv.conf -> 10.0.0.2 10.0.0.3:53"}, res.Forwards)
	loops, err := Loops(res.Corefile, "nameserver 127.0.0.53\n")
	require.NoError(t, err)
	assert.Empty(t, loops)

	res, err = Add(read(t, "stubdomains.Corefile"), e)
	require.NoError(t, err)
	assert.Contains(t, res.Corefile, "    forward . 10.150.0.1\n", "a stub domain's forwarder stays")
	assert.Contains(t, res.Corefile, "    forward . 172.16.0.1 172.16.0.2 {\n", "the cluster's own forwarders stay")
	assert.Contains(t, res.Corefile, "example.org:53 {\n    forward . 10.0.0.2 10.0.0.3:53\n}")

	e.Upstream = []string{"resolver.example"}
	_, err = Add(read(t, "kubeadm.Corefile"), e)
	assert.ErrorContains(t, err, `dns.upstream "resolver.example": not an IP address`)
}

// TestLoops finds the forwards that would send queries back to the DNS
// pod: to a resolv.conf whose nameserver is loopback, or to a loopback
// address; forwards elsewhere are fine.
func TestLoops(t *testing.T) {
	local := "search example.internal\nnameserver 127.0.0.53\noptions edns0\n"
	remote := "nameserver 10.0.0.2\n"
	for _, c := range []struct {
		corefile, resolv string
		want             []string
	}{
		{read(t, "kubeadm.Corefile"), local, []string{"line 13: forward to /etc/resolv.conf, whose nameserver 127.0.0.53 is the DNS pod itself"}},
		{read(t, "kubeadm.Corefile"), remote, nil},
		{read(t, "k3s.Corefile"), "nameserver ::1\n", []string{"line 15: forward to /etc/resolv.conf, whose nameserver ::1"}},
		{read(t, "stubdomains.Corefile"), local, []string{"line 29: forward to /etc/resolv.conf"}},
		{read(t, "stubdomains.Corefile"), remote, nil},
		{".:53 {\n    kubernetes cluster.local\n    forward . 127.0.0.1\n}\n", remote, []string{"line 3: forward to 127.0.0.1, the DNS pod itself"}},
		{".:53 {\n    kubernetes cluster.local\n    forward . 127.0.0.1:5353 tls://127.0.0.1\n}\n", remote, nil},
	} {
		got, err := Loops(c.corefile, c.resolv)
		require.NoError(t, err)
		require.Len(t, got, len(c.want), "%v", got)
		for i, w := range c.want {
			assert.Contains(t, got[i], w)
		}
	}
}

// TestAddRefuses: each Corefile mcmirror cannot join is refused with what
// to do.
func TestAddRefuses(t *testing.T) {
	for _, c := range []struct{ corefile, want string }{
		{".:53 {\n    mcmirror cluster.local\n    kubernetes cluster.local\n}\n", "has an mcmirror block already (line 2): remove it"},
		{"example.org:53 {\n    forward . 10.0.0.2\n}\n", "no server block of the Corefile answers cluster.local. on port 53"},
		{".:53 {\n    forward . 10.0.0.2\n}\n", "the block .:53 (line 1) answers cluster.local. but has no kubernetes plugin"},
		{".:53 {\n    kubernetes cluster.local\n}\nclusterset.local:53 {\n    forward . 10.96.0.53\n}\n",
			"but the block clusterset.local:53 (line 4) answers clusterset.local.: mcmirror answers both in one server; remove the block"},
		{"cluster.local:53 {\n    kubernetes cluster.local\n}\n", "but no server block answers clusterset.local."},
		{".:53 {\n    kubernetes \"cluster.local\n}\n", "the Corefile does not parse: Corefile:2 - Syntax error"},
	} {
		_, err := Add(c.corefile, edit())
		assert.ErrorContains(t, err, c.want, c.corefile)
	}
}

// TestAddLameduck: a lameduck of 10 s or more stays; a health block
// without one gets one; a line that is not one option alone is refused.
func TestAddLameduck(t *testing.T) {
	for in, want := range map[string]string{
		".:53 {\n    health {\n        lameduck 15s\n    }\n    kubernetes cluster.local\n}\n": "",
		".:53 {\n    health :8080 {\n    }\n    kubernetes cluster.local\n}\n":                 "line 2: health's lameduck (none: 0 s) -> 10s",
		".:53 {\n    kubernetes cluster.local\n    health\n}\n":                                "line 3: health's lameduck (none: 0 s) -> 10s",
		".:53 {\n    kubernetes cluster.local\n}\n":                                            "",
	} {
		res, err := Add(in, edit())
		require.NoError(t, err, in)
		assert.Equal(t, want, res.Lameduck, in)
		blocks, err := parse(res.Corefile)
		require.NoError(t, err)
		if h := blocks[0].tokens["health"]; len(h) > 0 {
			isLameduck := func(t caddyfile.Token) bool { return t.Text == "lameduck" }
			assert.True(t, slices.ContainsFunc(h, isLameduck), "no lameduck in %s", res.Corefile)
		}
	}
	_, err := Add(".:53 {\n    health # liveness\n    kubernetes cluster.local\n}\n", edit())
	assert.ErrorContains(t, err, "line 2: health is not alone on its line: give it lameduck 10s by hand")
}

// TestAddOnAnotherPort: a block on another port does not answer the
// cluster's queries; the one on 53 gets the stanza.
func TestAddOnAnotherPort(t *testing.T) {
	in := "cluster.local:5353 {\n    kubernetes cluster.local\n}\ndns://.:53 {\n    kubernetes cluster.local\n}\n"
	res, err := Add(in, edit())
	require.NoError(t, err)
	assert.Equal(t, "the block dns://.:53 (line 4)", res.Block)
	assert.True(t, strings.HasPrefix(res.Corefile, "cluster.local:5353 {\n    kubernetes cluster.local\n}\ndns://.:53 {\n    mcmirror "))
}

// importStanza is stanza in import mode.
var importStanza = strings.Replace(stanza, "link_secrets mcmirror-links", "source import", 1)

// kubernetesSelector is the label selector the kubernetes plugin of the
// block that answers cluster.local parses from corefile, as CoreDNS's
// setup joins its labels arguments; nil without a labels option.
func kubernetesSelector(t *testing.T, corefile string) k8slabels.Selector {
	t.Helper()
	blocks, err := parse(corefile)
	require.NoError(t, err)
	i, _ := serving(blocks, "cluster.local.")
	require.GreaterOrEqual(t, i, 0)
	kube := blocks[i].tokens["kubernetes"]
	for j := 1; j < len(kube); j++ {
		if kube[j].Text != "labels" || kube[j-1].Line == kube[j].Line {
			continue
		}
		var args []string
		for k := j + 1; k < len(kube) && kube[k].Line == kube[j].Line; k++ {
			args = append(args, kube[k].Text)
		}
		ls, err := metav1.ParseToLabelSelector(strings.Join(args, " "))
		require.NoError(t, err, "labels %v", args)
		sel, err := metav1.LabelSelectorAsSelector(ls)
		require.NoError(t, err)
		return sel
	}
	return nil
}

// TestAddImportHidesCopies: in import mode the kubernetes plugin of the
// block gets the selector !mcmirror.dev/flat-endpoints, so that it holds
// no second copy of the linked clusters' endpoints: as an option of its
// own in each distribution's Corefile (nothing else changed), ANDed to
// the selector it has, in a block of its own when it has none; a
// directive that cannot be edited safely is left as it is, and said so.
// In direct mode there are no copies, and nothing is added.
func TestAddImportHidesCopies(t *testing.T) {
	copySlice := k8slabels.Set{"kubernetes.io/service-name": "db-west", "app": "x", labels.FlatEndpoints: "true"}
	own := k8slabels.Set{"kubernetes.io/service-name": "db", "app": "x"}
	for _, name := range []string{"kubeadm.Corefile", "k3s.Corefile", "eks.Corefile", "rke2.Corefile", "stubdomains.Corefile"} {
		t.Run(name, func(t *testing.T) {
			orig := read(t, name)
			direct, err := Add(orig, edit())
			require.NoError(t, err)
			assert.Empty(t, direct.Labels)
			assert.Nil(t, kubernetesSelector(t, direct.Corefile), "direct mode: no labels")

			e := edit()
			e.Stanza = importStanza
			imp, err := Add(orig, e)
			require.NoError(t, err)
			assert.Contains(t, imp.Labels, "the kubernetes plugin gets labels !mcmirror.dev/flat-endpoints")
			sel := kubernetesSelector(t, imp.Corefile)
			require.NotNil(t, sel)
			assert.False(t, sel.Matches(copySlice), "a copy is not the kubernetes plugin's")
			assert.True(t, sel.Matches(own), "every other object is")

			want := strings.Replace(direct.Corefile, "link_secrets mcmirror-links", "source import", 1)
			got := slices.DeleteFunc(strings.Split(imp.Corefile, "\n"), func(l string) bool {
				return strings.TrimSpace(l) == "labels !mcmirror.dev/flat-endpoints"
			})
			assert.Equal(t, want, strings.Join(got, "\n"), "nothing else changed")
		})
	}

	e := edit()
	e.Stanza = importStanza
	for in, want := range map[string]string{
		".:53 {\n    kubernetes cluster.local {\n        labels app=x\n    }\n}\n":                  "line 3: the kubernetes plugin's labels ANDed with !mcmirror.dev/flat-endpoints",
		".:53 {\n    kubernetes cluster.local {\n        labels \"app in (x, y)\"\n    }\n}\n":      "line 3: the kubernetes plugin's labels ANDed with !mcmirror.dev/flat-endpoints",
		".:53 {\n    kubernetes cluster.local\n}\n":                                                 "line 2: the kubernetes plugin gets labels !mcmirror.dev/flat-endpoints",
		".:53 {\n    kubernetes cluster.local { # the cluster's\n        pods insecure\n    }\n}\n": "line 2: kubernetes's block is not laid out one option a line, so labels !mcmirror.dev/flat-endpoints was not added: add it by hand",
		".:53 {\n    kubernetes cluster.local {\n        labels app=x # ours\n    }\n}\n":           "line 3: the kubernetes plugin's labels is not a selector alone on its line, so !mcmirror.dev/flat-endpoints was not added to it",
	} {
		res, err := Add(in, e)
		require.NoError(t, err, in)
		assert.Contains(t, res.Labels, want, in)
		sel := kubernetesSelector(t, res.Corefile)
		if strings.Contains(want, "not added") {
			if sel != nil {
				assert.True(t, sel.Matches(copySlice), "left as it was: %s", res.Corefile)
			}
			continue
		}
		require.NotNil(t, sel, res.Corefile)
		assert.False(t, sel.Matches(copySlice), res.Corefile)
		assert.True(t, sel.Matches(own), res.Corefile)
	}
}

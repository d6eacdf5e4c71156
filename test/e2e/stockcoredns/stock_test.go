package stockcoredns_test

import (
	"context"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

const (
	ns   = "stock"
	zone = "svc.cluster.local."
)

// The binary is CoreDNS's, built from its own main package at the version
// mcmirror's go.mod requires, with this checkout's mcmirror compiled in: its
// version output is CoreDNS's alone (coredns-mc's starts with mcmirror's),
// and -plugins lists mcmirror beside the standard plugins.
func TestStockBinaryIsCoreDNS(t *testing.T) {
	bin := builtCoreDNS(t, "MCMIRROR_COREDNS_STOCK")
	root := repoRoot(t)

	info, err := buildinfo.ReadFile(bin)
	require.NoError(t, err)
	assert.Equal(t, "github.com/coredns/coredns", info.Path, "the main package is CoreDNS's")
	assert.Equal(t, "github.com/coredns/coredns", info.Main.Path, "the main module is CoreDNS")
	i := slices.IndexFunc(info.Deps, func(m *debug.Module) bool { return m.Path == "github.com/mcmirror/mcmirror" })
	require.GreaterOrEqual(t, i, 0, "mcmirror is compiled in")
	require.NotNil(t, info.Deps[i].Replace, "mcmirror is this checkout")
	assert.Equal(t, root, info.Deps[i].Replace.Path, "mcmirror is this checkout")

	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^\s*github\.com/coredns/coredns (v\S+)`).FindSubmatch(gomod)
	require.NotNil(t, m, "go.mod requires github.com/coredns/coredns")
	out, err := exec.Command(bin, "-version").Output()
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 2, "CoreDNS's version, then platform, Go and commit: %q", out)
	assert.Equal(t, "CoreDNS-"+strings.TrimPrefix(string(m[1]), "v"), lines[0])
	assert.True(t, strings.HasPrefix(lines[1], runtime.GOOS+"/"+runtime.GOARCH+", go"), "%q", lines[1])

	out, err = exec.Command(bin, "-plugins").Output()
	require.NoError(t, err)
	plugins := strings.Fields(string(out)) // one name a line
	for _, p := range []string{"mcmirror", "kubernetes", "forward", "cache"} {
		assert.Contains(t, plugins, p, "coredns -plugins")
	}
}

// The stock CoreDNS answers mcmirror's names and the kubernetes plugin's in
// one server block: west's flat-mode Service by its per-cluster name, one of
// its pods, the -global name (east's own ClusterIP and west's pods), and,
// from the kubernetes plugin, east's Services and NXDOMAIN for a name that no
// linked cluster exports.
//
// The Corefile names kubernetes before mcmirror: CoreDNS runs plugins in
// plugin.cfg's order, whatever the Corefile's, so only the line's place in
// plugin.cfg puts mcmirror first. That is what the test catches, as checked
// by hand with coredns-stock.sh edited: with the line after
// kubernetes:kubernetes (its sed's i made a), the kubernetes plugin answers
// every name of cluster.local first, web-west is NXDOMAIN and the test fails
// waiting for it; without the line (the sed and the script's check of go
// generate's output taken out), TestStockBinaryIsCoreDNS finds no mcmirror
// and this server stops at "Unknown directive 'mcmirror'".
func TestStockCoreDNSAnswers(t *testing.T) {
	env.LogOnFailure(t)
	bin := builtCoreDNS(t, "MCMIRROR_COREDNS_STOCK")
	ctx := context.Background()
	east, west := env.Cluster("east"), env.Cluster("west")

	require.NoError(t, west.Apply(ctx, harness.Namespace(ns)+
		harness.StatefulSet(ns, "web", "web", 2, map[string]string{labels.Exported: labels.ExportFlat})))
	require.NoError(t, east.Apply(ctx, harness.Namespace(ns)+harness.ClusterIPService(ns, "web", 80, map[string]string{labels.Exported: labels.ExportGateway})))
	pods := west.WaitEndpoints(t, ns, "web", 2)
	eastWeb, err := east.Client.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	eastAPI, err := east.Client.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	require.NoError(t, err)
	westLink, err := west.LinkKubeconfigFile(ctx)
	require.NoError(t, err)

	s := env.StartDNSWith(t, "east/coredns-stock", fmt.Sprintf(`
. {
    bind 127.0.0.1
    errors
    ready 127.0.0.1:{READY}
    kubernetes cluster.local {
        kubeconfig %[1]s
    }
    mcmirror cluster.local {
        cluster %[2]s
        kubeconfig %[1]s
        link %[3]s %[4]s
    }
}
`, east.Kubeconfig, east.Name, west.Name, westLink),
		harness.DNSOptions{Binary: bin, Probe: "kubernetes.default." + zone})
	addr := s.Addr

	name := func(n string) string { return n + "." + ns + "." + zone }
	westIPs := []string{pods["web-0"], pods["web-1"]}
	slices.Sort(westIPs)
	// Ready means synced; on a loaded machine the first answer is still
	// waited for, not assumed.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		r := harness.Ask(c, addr, "udp", name("web-west"), dns.TypeA)
		assert.Equal(c, dns.RcodeToString[dns.RcodeSuccess], dns.RcodeToString[r.Rcode])
		assert.Equal(c, westIPs, harness.Answers(r))
	}, 30*time.Second, 50*time.Millisecond, "%s answers west's pods", name("web-west"))

	// mcmirror's names.
	assert.Equal(t, []string{pods["web-0"]}, harness.Answers(harness.Ask(t, addr, "udp", "web-0."+name("web-west"), dns.TypeA)))
	global := append([]string{eastWeb.Spec.ClusterIP}, westIPs...)
	slices.Sort(global)
	for _, network := range []string{"udp", "tcp"} {
		r := harness.Ask(t, addr, network, name("web-global"), dns.TypeA)
		assert.Equal(t, dns.RcodeSuccess, r.Rcode, network)
		assert.Equal(t, global, harness.Answers(r), "%s over %s: east's ClusterIP and west's pods", name("web-global"), network)
	}

	// The kubernetes plugin's names, after mcmirror in the chain.
	assert.Equal(t, []string{eastWeb.Spec.ClusterIP}, harness.Answers(harness.Ask(t, addr, "udp", name("web"), dns.TypeA)))
	assert.Equal(t, []string{eastAPI.Spec.ClusterIP}, harness.Answers(harness.Ask(t, addr, "udp", "kubernetes.default."+zone, dns.TypeA)))
	r := harness.Ask(t, addr, "udp", name("web-paris"), dns.TypeA)
	assert.Equal(t, dns.RcodeToString[dns.RcodeNameError], dns.RcodeToString[r.Rcode], "no linked cluster paris: the kubernetes plugin's NXDOMAIN")
	require.Len(t, r.Ns, 1)
	assert.Equal(t, dns.TypeSOA, r.Ns[0].Header().Rrtype, "the kubernetes plugin's SOA")

	env.RequireAlive(t, s.Process)
}

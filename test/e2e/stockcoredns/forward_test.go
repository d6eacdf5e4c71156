package stockcoredns_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// plainCoreDNS returns the path of CoreDNS as its release builds it,
// without mcmirror: $MCMIRROR_COREDNS_PLAIN when set (test/tools/gotest.sh
// builds it), otherwise what test/tools/coredns-stock.sh --plain builds or
// finds in its cache.
func plainCoreDNS(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("MCMIRROR_COREDNS_PLAIN"); p != "" {
		return p
	}
	var out bytes.Buffer
	cmd := exec.Command("bash", filepath.Join(repoRoot(t), "test", "tools", "coredns-stock.sh"), "--plain")
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	require.NoError(t, cmd.Run(), "test/tools/coredns-stock.sh --plain")
	return strings.TrimSpace(out.String())
}

// Forward mode (deploy/README.md, "Replace or forward"): the cluster DNS is
// a CoreDNS without mcmirror, as a managed cluster's is, and forwards
// clusterset.local to coredns-mc, which serves that zone alone with the
// Multi-Cluster Services API's names. West exports web; east's controller
// imports it (ServiceImport, derived Service); through the plain CoreDNS,
// web.<ns>.svc.clusterset.local is the ClusterSetIP, dns-version is 1.0.0,
// an unknown Service is NXDOMAIN, and cluster.local's names, the mirror
// web-west among them, are the kubernetes plugin's as before.
func TestForwardModeThroughPlainCoreDNS(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	east, west := env.Cluster("east"), env.Cluster("west")
	const fns = "forward"
	require.NoError(t, east.Apply(ctx, harness.Namespace(fns)))
	require.NoError(t, west.Apply(ctx, harness.Namespace(fns)+harness.ClusterIPService(fns, "web", 80, map[string]string{labels.Exported: labels.ExportGateway})))
	westLink, err := west.LinkKubeconfigFile(ctx)
	require.NoError(t, err)

	env.StartFleet(t, harness.FleetOptions{Local: "east", Remotes: []string{"west"}, Parts: harness.FleetController})
	cmc, err := harness.CorednsMC()
	require.NoError(t, err)

	mcsAddr, mcsProc := startServer(t, "east/coredns-mc", cmc, fmt.Sprintf(`
clusterset.local {
    bind 127.0.0.1
    errors
    ready 127.0.0.1:{READY}
    mcmirror {
        cluster %[2]s
        clusterset
        kubeconfig %[1]s
        link %[3]s %[4]s
    }
}
`, east.Kubeconfig, east.Name, west.Name, westLink), "dns-version.clusterset.local")

	plain := plainCoreDNS(t)
	addr, plainProc := startServer(t, "east/coredns-plain", plain, fmt.Sprintf(`
clusterset.local {
    bind 127.0.0.1
    forward . %[2]s
}
. {
    bind 127.0.0.1
    errors
    ready 127.0.0.1:{READY}
    kubernetes cluster.local {
        kubeconfig %[1]s
    }
}
`, east.Kubeconfig, mcsAddr), "kubernetes.default."+zone)

	mcs, err := mcsclient.NewForConfig(east.Config)
	require.NoError(t, err)
	var setIP string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		si, err := mcs.MulticlusterV1beta1().ServiceImports(fns).Get(ctx, "web", metav1.GetOptions{})
		require.NoError(c, err)
		require.NotEmpty(c, si.Spec.IPs)
		setIP = si.Spec.IPs[0]
	}, 60*time.Second, 50*time.Millisecond, "east's ServiceImport of web")

	name := "web." + fns + ".svc.clusterset.local"
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		r := harness.Ask(c, addr, "udp", name, dns.TypeA)
		assert.Equal(c, dns.RcodeToString[dns.RcodeSuccess], dns.RcodeToString[r.Rcode])
		assert.Equal(c, []string{setIP}, harness.Answers(r))
	}, 30*time.Second, 50*time.Millisecond, "%s through the plain CoreDNS is the ClusterSetIP", name)
	for _, network := range []string{"udp", "tcp"} {
		r := harness.Ask(t, addr, network, "dns-version.clusterset.local", dns.TypeTXT)
		require.Len(t, r.Answer, 1, network)
		assert.Equal(t, []string{"1.0.0"}, r.Answer[0].(*dns.TXT).Txt)
	}
	r := harness.Ask(t, addr, "udp", "nope."+fns+".svc.clusterset.local", dns.TypeA)
	assert.Equal(t, dns.RcodeToString[dns.RcodeNameError], dns.RcodeToString[r.Rcode], "an unknown Service")

	// cluster.local is the kubernetes plugin's: the mirror is an ordinary
	// Service there.
	mirror, err := east.Client.CoreV1().Services(fns).Get(ctx, "web-west", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{mirror.Spec.ClusterIP}, harness.Answers(harness.Ask(t, addr, "udp", "web-west."+fns+"."+zone, dns.TypeA)))
	env.RequireAlive(t, mcsProc, plainProc)
}

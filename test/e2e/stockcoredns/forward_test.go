package stockcoredns_test

import (
	"context"
	"fmt"
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

	mcsDNS := env.StartDNSWith(t, "east/coredns-mc", fmt.Sprintf(`
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
`, east.Kubeconfig, east.Name, west.Name, westLink),
		harness.DNSOptions{Binary: cmc, Probe: "dns-version.clusterset.local"})

	plain := env.StartDNSWith(t, "east/coredns-plain", fmt.Sprintf(`
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
`, east.Kubeconfig, mcsDNS.Addr), harness.DNSOptions{
		Binary: builtCoreDNS(t, "MCMIRROR_COREDNS_PLAIN", "--plain"), Probe: "kubernetes.default." + zone})
	addr := plain.Addr

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
	env.RequireAlive(t, mcsDNS.Process, plain.Process)
}

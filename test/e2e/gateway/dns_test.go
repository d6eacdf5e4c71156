package gateway_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// East's cluster DNS reads east's gateway's /peers (`gateway_health`): while
// west's gateway answers its probes, web-global has west's member (the
// mirror web-west) beside east's own web; once west's gateway stops, west's
// member leaves the -global answer within 10 s while web-west itself keeps
// answering; once it is back, so is the member, within 10 s.
func TestGlobalFollowsGatewayHealth(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	east := env.Cluster("east")
	o := fleet()
	o.Parts = harness.AllParts
	f := env.StartFleet(t, o)
	ns, m := exportWeb(t, "gw-dns", nil, "web-a", "web-b")
	waitGreet(t, m.addr(), wait, "web-west is reached while west's gateway runs")

	// East exports its own web too: its member stays in web-global
	// whatever happens to west, which proves an answer without west's
	// member is an answer, not a failure.
	local, err := east.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns, Labels: map[string]string{labels.Exported: labels.ExportGateway}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: portName, Port: servicePort, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	s := f.DNS

	zone := ns + ".svc.cluster.local."
	global, perCluster := "web-global."+zone, "web-west."+zone
	srv := "_http._tcp." + global
	localTarget := fmt.Sprintf("%d web.%s", servicePort, zone)
	westTarget := fmt.Sprintf("%d web-west.%s", servicePort, zone)
	both := sorted(local.Spec.ClusterIP, m.ClusterIP)

	expect := func(c *assert.CollectT, a, srvTargets []string) {
		r := s.Ask(c, "udp", global, dns.TypeA)
		require.Equal(c, dns.RcodeSuccess, r.Rcode, "%s A", global)
		assert.Equal(c, a, harness.Answers(r), "%s A", global)
		r = s.Ask(c, "tcp", srv, dns.TypeSRV)
		require.Equal(c, dns.RcodeSuccess, r.Rcode, "%s SRV", srv)
		assert.Equal(c, srvTargets, harness.Answers(r), "%s SRV", srv)
		// The per-cluster name answers whatever the gateway's health.
		assert.Equal(c, []string{m.ClusterIP}, harness.Answers(s.Ask(c, "udp", perCluster, dns.TypeA)), "%s A", perCluster)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		expect(c, both, sorted(localTarget, westTarget))
	}, wait, tick, "while west's gateway is up, web-global has east's and west's members")

	f.Gateways["west"].Stop()
	stopped := time.Now()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		// The DNS server is the process under test: it must be serving,
		// and east's gateway must have seen west down, for an answer
		// without west to mean anything.
		done, _ := s.Process.Exited()
		require.False(c, done, "coredns-mc exited")
		peers, err := f.Gateways["east"].Peers()
		require.NoError(c, err)
		assert.False(c, peers["west"].Alive, "east's /peers: west")
		expect(c, []string{local.Spec.ClusterIP}, []string{localTarget})
	}, healthBound, tick, "within %v of west's gateway stopping, west's member leaves web-global; web-west still answers", healthBound)
	t.Logf("west's member left web-global %v after west's gateway stopped", time.Since(stopped).Round(time.Millisecond))

	restarted := time.Now()
	f.Gateways["west"].Start(t)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		expect(c, both, sorted(localTarget, westTarget))
	}, healthBound, tick, "within %v of west's gateway starting again, west's member is back in web-global", healthBound)
	t.Logf("west's member back in web-global %v after west's gateway started again", time.Since(restarted).Round(time.Millisecond))
	env.RequireAlive(t, s.Process)
}

func sorted(s ...string) []string { slices.Sort(s); return s }

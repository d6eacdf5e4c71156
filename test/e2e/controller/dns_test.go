package controller_test

import (
	"slices"
	"testing"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// The seed walkthrough answered from mirrors this controller made: the DNS
// plugin, in a real coredns-mc, resolves a remote pod to its per-pod mirror
// ClusterIP, the headless mirror name to all of them, -global SRV to the
// peers of every cluster, and follows a scale-down.
func TestDNSAnswersFromControllerMirrors(t *testing.T) {
	const ns = "e2e-dns"
	ctx := setUp(t, ns, "east", "west", "paris")
	west, paris := env.Cluster("west"), env.Cluster("paris")
	startController(t, "controller")
	require.NoError(t, west.Apply(ctx, statefulSet(ns, "nginx-svc", 3, "true")))
	require.NoError(t, paris.Apply(ctx, statefulSet(ns, "nginx-svc", 2, "true")))
	require.NoError(t, west.Apply(ctx, clusterIPService(ns, "web", 80, "true")))

	var m map[string]corev1.Service
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m = mirrors(c, ns)
		assert.Len(c, podMirrors(m, "nginx-svc-west"), 3)
		assert.Len(c, podMirrors(m, "nginx-svc-paris"), 2)
		assert.Contains(c, m, "web-west")
		assertConsistent(c, ctx, ns, m)
	}, wait, tick)

	s := startDNS(t, "west", "paris")
	ask := func(c require.TestingT, name string, qtype uint16) []string {
		return harness.Answers(s.Ask(c, "tcp", name, qtype))
	}
	ips := func(names ...string) []string {
		var out []string
		for _, n := range names {
			out = append(out, m[n].Spec.ClusterIP)
		}
		slices.Sort(out)
		return out
	}

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, ips("nginx-svc-set-0-west"), ask(c, "nginx-svc-set-0.nginx-svc-west."+ns+"."+zone, dns.TypeA))
		assert.Equal(c, ips(podMirrors(m, "nginx-svc-west")...), ask(c, "nginx-svc-west."+ns+"."+zone, dns.TypeA))
		assert.Equal(c, ips("web-west"), ask(c, "web-west."+ns+"."+zone, dns.TypeA))
		var peers []string
		for _, cl := range []string{"west", "paris"} {
			for _, p := range podMirrors(m, "nginx-svc-"+cl) {
				host := m[p].Labels[labels.RemoteHostname]
				peers = append(peers, "80 "+host+".nginx-svc-"+cl+"."+ns+"."+zone)
			}
		}
		slices.Sort(peers)
		assert.Equal(c, peers, ask(c, "_http._tcp.nginx-svc-global."+ns+"."+zone, dns.TypeSRV))
	}, wait, tick)

	// Scale west down: the pod's mirror goes, and so does its name.
	require.NoError(t, west.Scale(ctx, ns, "nginx-svc-set", 1))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m = mirrors(c, ns)
		assert.Equal(c, []string{"nginx-svc-set-0-west"}, podMirrors(m, "nginx-svc-west"))
		assert.Equal(c, ips("nginx-svc-set-0-west"), ask(c, "nginx-svc-west."+ns+"."+zone, dns.TypeA))
		assert.Empty(c, ask(c, "nginx-svc-set-2.nginx-svc-west."+ns+"."+zone, dns.TypeA))
	}, wait, tick)
}

// startDNS runs coredns-mc as east's cluster DNS, linked to remotes, and
// returns it once it answers.
func startDNS(t *testing.T, remotes ...string) *harness.DNSServer {
	t.Helper()
	return env.StartFleet(t, harness.FleetOptions{Local: "east", Remotes: remotes, Parts: harness.FleetDNS}).DNS
}

package gateway_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// connections is how many connections a test makes through one egress port
// once it works: with three pods picked at random, all twelve reach the same
// one with a probability of 3·3⁻¹² (2·10⁻⁶).
const connections = 12

// An exported ClusterIP Service of west, its endpoints three real servers:
// a client in east connects to the egress port recorded on the mirror
// web-west and reaches one of west's pods, bytes both ways, half-close
// passed on; over several connections, more than one pod answers. Both
// gateways count the streams.
func TestServiceThroughGateway(t *testing.T) {
	f := startFleet(t)
	_, m := exportWeb(t, "gw-service", nil, "web-a", "web-b", "web-c")
	addr := m.addr()
	egressBefore := metric(t, f.Gateways["east"], "coredns_mcmirror_gateway_connections_total", map[string]string{"peer": "west", "direction": "egress"})
	ingressBefore := metric(t, f.Gateways["west"], "coredns_mcmirror_gateway_connections_total", map[string]string{"peer": "east", "direction": "ingress"})

	// The egress opens the port once it has read the mirror; from then on
	// every connection must work.
	got := greetAll(t, addr, "a connection through the egress port of web-west reaches a pod of west")
	t.Logf("%d connections through %s: %v", connections, addr, got)
	assert.Subset(t, []string{"west/web-a", "west/web-b", "west/web-c"}, got)
	assert.Greater(t, len(slices.Compact(slices.Sorted(slices.Values(got)))), 1, "connections are spread over the ready endpoints")

	// Each side counted the streams it carried (those made while the
	// egress port was opening failed before either counted them).
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		eg := metric(c, f.Gateways["east"], "coredns_mcmirror_gateway_connections_total", map[string]string{"peer": "west", "direction": "egress"})
		in := metric(c, f.Gateways["west"], "coredns_mcmirror_gateway_connections_total", map[string]string{"peer": "east", "direction": "ingress"})
		assert.GreaterOrEqual(c, eg-egressBefore, float64(connections), "east: egress streams to west")
		assert.GreaterOrEqual(c, in-ingressBefore, float64(connections), "west: ingress streams from east")
		assert.Positive(c, metric(c, f.Gateways["east"], "coredns_mcmirror_gateway_bytes_total", map[string]string{"peer": "west", "direction": "egress", "way": "received"}))
	}, 10*time.Second, tick)
}

// A headless exported Service with named endpoints (web-0, web-1), each a
// real server: each per-pod mirror in east has an egress port of its own,
// and a connection there reaches exactly that pod, every time.
func TestPodThroughGateway(t *testing.T) {
	ns := env.UniqueNamespace(t, "gw-pod")
	west := env.Cluster("west")
	pods := west.RunEchoPods(t, podPort, "web-0", "web-1")
	startFleet(t)
	exportService(t, ns, "web", true, pods, nil)

	byPod := map[string]mirror{}
	for _, p := range []string{"web-0", "web-1"} {
		byPod[p] = waitMirror(t, ns, p+"-west")
	}
	require.NotEqual(t, byPod["web-0"].EgressPort, byPod["web-1"].EgressPort, "each pod has an egress port of its own")

	for _, p := range []string{"web-0", "web-1"} {
		addr := byPod[p].addr()
		got := greetAll(t, addr, "a connection to the egress port of "+p+"-west reaches a pod")
		assert.Equal(t, slices.Repeat([]string{"west/" + p}, connections), got, "every connection through %s-west (%s) reaches %s", p, addr, p)
	}
}

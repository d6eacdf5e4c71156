package trust_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// streamEndBound is what this test holds the ingress to, from the write
// that withdraws an export to the client's stream ending: the API server's
// watch event, one sweep of the ingress, and the reset passed on by the
// egress; milliseconds, with room for a loaded machine.
const streamEndBound = 5 * time.Second

// West's ingress, with real processes and a real API server, dials only
// what its policy allows: a pod of an opted-in selector-less Service
// answers through the gateways; a selector-less Service whose namespace is
// not opted in, and one whose hand-written EndpointSlice names the API
// server's ClusterIP (in a --deny-cidr range), are refused, and counted by
// reason. Then the export of the Service that works is withdrawn while a
// stream through both gateways is open: the stream ends within the bound,
// and the ingress counts it.
func TestIngressDialsOnlyWhatItMay(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	east, west := env.Cluster("east"), env.Cluster("west")
	shop := env.UniqueNamespace(t, "shop", east, west)
	other := env.UniqueNamespace(t, "other", east, west)
	pod := west.RunEchoPods(t, podPort, "web-0")[0]
	apiServer := west.ServiceCIDR.Addr().Next() // the kubernetes Service's ClusterIP
	f := startFleet(t, harness.EgressPortWindow(), "--allow-selectorless", shop+"/*", "--deny-cidr", west.ServiceCIDR.String())

	exportService(t, west, shop, "web", "web-0", pod.IP.String())
	exportService(t, west, shop, "api", "kube-apiserver", apiServer.String())
	exportService(t, west, other, "web", "web-0", pod.IP.String())
	_, web := waitMirror(t, east, shop, "web-west")
	_, api := waitMirror(t, east, shop, "api-west")
	_, otherWeb := waitMirror(t, east, other, "web-west")

	require.Equal(t, "west/web-0", harness.WaitGreet(t, harness.LoopbackAddr(web), wait, "an opted-in Service's pod answers through the gateways"))

	const gw = "coredns_mcmirror_gateway_"
	refusedBy := func(c require.TestingT, reason string) float64 {
		return metric(c, f.Gateways["west"], gw+"ingress_endpoints_refused_total", map[string]string{"reason": reason})
	}
	deniedBefore, selectorlessBefore := refusedBy(t, "denied_cidr"), refusedBy(t, "selectorless")
	// The egress opens the ports as it reads the mirrors; a refusal is a
	// reset or an end before any greeting, never the target's bytes.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, refused(harness.LoopbackAddr(api)))
		assert.Greater(c, refusedBy(c, "denied_cidr"), deniedBefore, "the API server's ClusterIP, in --deny-cidr")
	}, wait, tick)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, refused(harness.LoopbackAddr(otherWeb)))
		assert.Greater(c, refusedBy(c, "selectorless"), selectorlessBefore, "a selector-less Service not opted in")
	}, wait, tick)
	assert.Positive(t, metric(t, f.Gateways["west"], gw+"refusals_total", map[string]string{"peer": "east", "direction": "ingress", "reason": "no_ready_endpoint"}))

	// A stream through both gateways, open; then the export is withdrawn.
	conn, err := net.DialTimeout("tcp", harness.LoopbackAddr(web), 5*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	r := bufio.NewReader(conn)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := harness.Hello(r)
	require.NoError(t, err)
	require.Equal(t, "west/web-0", got)
	endedBefore := metric(t, f.Gateways["west"], gw+"ingress_streams_ended_total", map[string]string{"peer": "east", "reason": "not_exported"})

	svc, err := west.Client.CoreV1().Services(shop).Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	delete(svc.Labels, labels.Exported)
	start := time.Now()
	_, err = west.Client.CoreV1().Services(shop).Update(ctx, svc, metav1.UpdateOptions{})
	require.NoError(t, err)
	_ = conn.SetReadDeadline(start.Add(streamEndBound))
	_, err = io.Copy(io.Discard, r)
	took := time.Since(start)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "the stream is still open %v after the export was withdrawn", took)
	t.Logf("the stream ended %v after the export was withdrawn (%v)", took, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, endedBefore+1, metric(c, f.Gateways["west"], gw+"ingress_streams_ended_total", map[string]string{"peer": "east", "reason": "not_exported"}))
	}, 10*time.Second, tick)
	env.RequireAlive(t, f.Gateways["east"].Process(), f.Gateways["west"].Process())
}

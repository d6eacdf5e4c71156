package gateway_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// streamEndBound bounds the time from the API write that withdraws an
// export to the client's stream ending: the API server's watch event, one
// sweep of the ingress, and the reset passed on by the egress;
// milliseconds, with room for a loaded machine, and below the ingress's
// 10 s sweep of every stream, so that only the event can have ended it.
const streamEndBound = 5 * time.Second

// A Service of west that only a ServiceExport exports: it carries the
// controller's stamp (serviceexport.mcmirror.dev/mode=gateway) and no
// Linkerd label, so west's ingress, on its default --export-selector,
// knows it by the stamp alone, and so does east's controller, which
// mirrors it. Bytes flow both ways through east's egress and west's
// ingress. Then, the controller stopped (east keeps its mirror, as while a
// controller lags), the stamp taken off ends the open stream and new
// streams are refused by west's ingress.
func TestServiceExportStampThroughGateway(t *testing.T) {
	west := env.Cluster("west")
	f := startFleet(t)
	ns, m := exportWeb(t, "gw-mcs", map[string]string{labels.ServiceExportMode: labels.ModeGateway}, "web-a", "web-b")
	addr := m.addr()
	const gw = "coredns_mcmirror_gateway_"
	ingress := map[string]string{"peer": "east", "direction": "ingress"}
	ingressBefore := metric(t, f.Gateways["west"], gw+"connections_total", ingress)

	got := greetAll(t, addr, "a connection through the egress port of web-west reaches a pod of west exported by its stamp")
	t.Logf("%d connections through %s: %v", connections, addr, got)
	assert.Subset(t, []string{"west/web-a", "west/web-b"}, got)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.GreaterOrEqual(c, metric(c, f.Gateways["west"], gw+"connections_total", ingress)-ingressBefore, float64(connections), "west: ingress streams from east")
	}, 10*time.Second, tick)

	// East keeps its mirror from now on, whatever west exports.
	f.Controller.Stop()

	// A stream through both gateways, open, bytes both ways.
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	r := bufio.NewReader(conn)
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	pod, err := harness.GreetConn(conn, r)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(pod, "west/"), "greeted by %q", pod)

	ended := map[string]string{"peer": "east", "reason": "not_exported"}
	refusals := map[string]string{"peer": "east", "direction": "ingress", "reason": "not_exported"}
	endedBefore := metric(t, f.Gateways["west"], gw+"ingress_streams_ended_total", ended)
	refusedBefore := metric(t, f.Gateways["west"], gw+"refusals_total", refusals)
	exportedBefore := metric(t, f.Gateways["west"], gw+"ingress_exported_services", nil)

	// The stamp taken off: the stream ends, by west's ingress.
	start := time.Now()
	require.NoError(t, west.LabelService(t.Context(), ns, "web", labels.ServiceExportMode, ""))
	_ = conn.SetDeadline(start.Add(streamEndBound))
	_, err = io.Copy(io.Discard, r)
	took := time.Since(start)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "the stream is still open %v after the stamp was taken off", took)
	t.Logf("the stream ended %v after the stamp was taken off (%v)", took, err)
	// Positive evidence that west's ingress has seen the change, and that
	// it ended the stream: it accepts one Service fewer, and counted it.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, endedBefore+1, metric(c, f.Gateways["west"], gw+"ingress_streams_ended_total", ended), "west: ingress_streams_ended_total %v", ended)
		assert.Equal(c, exportedBefore-1, metric(c, f.Gateways["west"], gw+"ingress_exported_services", nil), "west: exported Services")
	}, 10*time.Second, tick)

	// New streams: refused by west's ingress, a reset to the client.
	t.Logf("the stamp taken off: a new connection is reset after %v", expectReset(t, addr, 2*time.Second))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Greater(c, metric(c, f.Gateways["west"], gw+"refusals_total", refusals), refusedBefore, "west: refusals_total %v", refusals)
	}, 5*time.Second, tick)
	env.RequireAlive(t, f.Gateways["west"].Process())
	env.RequireAlive(t, f.Gateways["east"].Process())
}

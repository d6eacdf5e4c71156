package gateway_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcmirror/mcmirror/internal/labels"
)

// A destination west no longer exports is refused by west's ingress, and
// the client in east gets a fast failure, never a hang, and no byte of the
// target. The mirror must still be there for the connection to reach the
// ingress at all: the controller is stopped first, so east keeps its last
// known state (as it does while a controller is down or lagging), while
// west's ingress follows its own cluster's export live.
func TestNotExportedRefused(t *testing.T) {
	west := env.Cluster("west")
	f := startFleet(t)
	ns, m := exportWeb(t, "gw-refused", nil, "web-a", "web-b")
	addr := m.addr()
	waitGreet(t, addr, wait, "web-west is reached while exported")

	f.Controller.Stop()
	exported := func(c require.TestingT) float64 {
		return metric(c, f.Gateways["west"], "coredns_mcmirror_gateway_ingress_exported_services", nil)
	}
	ingressRefusals := map[string]string{"peer": "east", "direction": "ingress", "reason": "not_exported"}
	egressRefusals := map[string]string{"peer": "west", "direction": "egress", "reason": "peer_refused"}
	exportedBefore := exported(t)
	refusedBefore := metric(t, f.Gateways["west"], "coredns_mcmirror_gateway_refusals_total", ingressRefusals)
	peerRefusedBefore := metric(t, f.Gateways["east"], "coredns_mcmirror_gateway_refusals_total", egressRefusals)

	require.NoError(t, west.LabelService(t.Context(), ns, "web", labels.Exported, ""))
	// Positive evidence that west's ingress has seen the change: it
	// accepts one exported Service fewer.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, exportedBefore-1, exported(c))
	}, wait, tick, "west's ingress sees web unexported")

	t.Logf("not exported: the connection is reset after %v", expectReset(t, addr, 2*time.Second))

	// The refusal was the ingress's, for that reason, and the egress
	// counted it as the peer's.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Greater(c, metric(c, f.Gateways["west"], "coredns_mcmirror_gateway_refusals_total", ingressRefusals), refusedBefore, "west: refusals_total %v", ingressRefusals)
		assert.Greater(c, metric(c, f.Gateways["east"], "coredns_mcmirror_gateway_refusals_total", egressRefusals), peerRefusedBefore, "east: refusals_total %v", egressRefusals)
	}, 5*time.Second, tick)
	env.RequireAlive(t, f.Gateways["west"].Process())
	env.RequireAlive(t, f.Gateways["east"].Process())

	// Exported again: the same port carries again, without a restart.
	require.NoError(t, west.LabelService(t.Context(), ns, "web", labels.Exported, labels.ExportGateway))
	waitGreet(t, addr, 10*time.Second, "web-west is reached again once exported")
}

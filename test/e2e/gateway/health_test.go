package gateway_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// healthBound is the promise: a dead gateway is seen within 10 s of
// failing, a recovered one within 10 s of recovering.
const healthBound = 10 * time.Second

// West's gateway stops: a new connection through east's egress fails fast
// (a reset, no byte, no hang), and east's gateway reports
// gateway_alive{cluster="west"} 0 within 10 s. West's gateway starts again
// on the same address: alive is 1 again within 10 s and connections work.
func TestIngressDownAndBack(t *testing.T) {
	f := startFleet(t)
	_, m := exportWeb(t, "gw-health", nil, "web-a", "web-b")
	addr := m.addr()
	waitGreet(t, addr, wait, "web-west is reached while west's gateway runs")

	// East probes west from its start: alive is 1 before anything fails.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		v, ok := alive(c, f.Gateways["east"], "west")
		require.True(c, ok, "east exports gateway_alive{cluster=west}")
		assert.Equal(c, 1.0, v)
	}, healthBound, tick, "east sees west's gateway alive")

	dialFailed := map[string]string{"peer": "west", "direction": "egress", "reason": "dial_failed"}
	dialFailedBefore := metric(t, f.Gateways["east"], "coredns_mcmirror_gateway_refusals_total", dialFailed)

	f.Gateways["west"].Stop()
	stopped := time.Now()

	t.Logf("west's gateway down: a new connection through the egress is reset after %v", expectReset(t, addr, 2*time.Second))

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		v, ok := alive(c, f.Gateways["east"], "west")
		require.True(c, ok)
		assert.Equal(c, 0.0, v, "gateway_alive{cluster=west}")
		peers, err := f.Gateways["east"].Peers()
		require.NoError(c, err)
		assert.False(c, peers["west"].Alive, "/peers: west")
	}, healthBound-time.Since(stopped), tick, "east sees west's gateway down within %v", healthBound)
	t.Logf("west's gateway seen down %v after it stopped", time.Since(stopped).Round(time.Millisecond))
	assert.Greater(t, metric(t, f.Gateways["east"], "coredns_mcmirror_gateway_refusals_total", dialFailed), dialFailedBefore,
		"east counted the refused connection: refusals_total %v", dialFailed)
	env.RequireAlive(t, f.Gateways["east"].Process())

	restarted := time.Now()
	f.Gateways["west"].Start(t)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		v, _ := alive(c, f.Gateways["east"], "west")
		assert.Equal(c, 1.0, v, "gateway_alive{cluster=west}")
	}, healthBound, tick, "east sees west's gateway back within %v", healthBound)
	t.Logf("west's gateway seen back %v after it was started again", time.Since(restarted).Round(time.Millisecond))
	pod := waitGreet(t, addr, healthBound-time.Since(restarted), "web-west is reached again")
	assert.Contains(t, []string{"west/web-a", "west/web-b"}, pod)
}

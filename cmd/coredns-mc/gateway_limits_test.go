package main

import (
	"flag"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcmirror/mcmirror/gateway"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/options"
	"github.com/mcmirror/mcmirror/test/harness"
)

// --max-connections-per-source reaches the egress: with 2, a client
// address holding two streams has a third connection reset and counted.
func TestGatewayMaxConnectionsPerSourceFlag(t *testing.T) {
	egressAddr, metrics, _, _ := eastEgress(t, 0, "--max-connections-per-source", "2", "--drain-delay", "0s", "--shutdown-grace", "0s")
	require.Eventually(t, func() bool { st, _ := readyz(metrics); return st == http.StatusOK }, 20*time.Second, 20*time.Millisecond,
		"the gateway never became ready")
	for i := range 2 {
		var c *net.TCPConn
		var err error
		require.Eventually(t, func() bool {
			c, _, err = greeted(egressAddr)
			return err == nil
		}, 20*time.Second, 50*time.Millisecond, "stream %d of 2: %v", i+1, err)
		t.Cleanup(func() { c.Close() })
	}

	const series = "coredns_mcmirror_gateway_refusals_total"
	labels := map[string]string{"direction": "egress", "reason": "too_many_from_source"}
	url := "http://" + metrics + "/metrics"
	before, _, err := harness.ScrapeMetric(url, series, labels)
	require.NoError(t, err)
	_, _, err = greeted(egressAddr)
	require.Error(t, err, "a third stream from one address with --max-connections-per-source 2")
	got, found, err := harness.ScrapeMetric(url, series, labels)
	require.NoError(t, err)
	require.True(t, found, "%s%v absent", series, labels)
	require.Equal(t, before+1, got, "%s%v", series, labels)
}

// The copy-buffer budget's metric says the budget from the start: with
// --buffer-budget that value, without it the default (a quarter of the
// container's memory limit), not 0 or an earlier value until a first
// buffer grows.
func TestGatewayBufferBudgetMetricFromTheStart(t *testing.T) {
	dir, _, east := eastFiles(t)
	budget := func() float64 {
		v, ok, err := gatheredGauge("coredns_mcmirror_gateway_copy_buffer_budget_bytes")
		require.NoError(t, err)
		require.True(t, ok, "no copy_buffer_budget_bytes series")
		return v
	}
	kc, _ := testKubeconfigs(t, dir)
	config := func(args ...string) {
		o := options.NewGateway()
		fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
		o.AddFlags(fs)
		args = append([]string{"--cluster", "east", "--kubeconfig", kc, "--ingress-address", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0"}, args...)
		require.NoError(t, fs.Parse(append(args, east.Args()...)))
		g, err := newGatewayConfig(o)
		require.NoError(t, err)
		g.ingress.Close()
		g.metrics.Close()
	}
	t.Cleanup(func() { gateway.SetBufferBudget(0) })
	config("--buffer-budget", "1048576")
	assert.Equal(t, float64(1<<20), budget())
	config()
	assert.Equal(t, float64(gateway.DefaultBufferBudget()), budget(), "the default, before any buffer grew")
}

// gatheredGauge is the value of the gauge name in this process's default
// registry, and whether it is there.
func gatheredGauge(name string) (float64, bool, error) {
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		return 0, false, err
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue(), true, nil
		}
	}
	return 0, false, nil
}

// The gateway collects garbage at 50 % heap growth unless GOGC says
// otherwise.
func TestGatewayGCPercent(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	t.Setenv("GOGC", "")
	os.Unsetenv("GOGC")
	gatewayGC()
	require.Equal(t, gatewayGCPercent, debug.SetGCPercent(100), "GOGC unset")

	t.Setenv("GOGC", "100")
	gatewayGC()
	require.Equal(t, 100, debug.SetGCPercent(100), "GOGC=100 is the operator's")
}

// The limit and trust flags reach the ingress and the egress: 0
// connections per source is no bound, 0 idle timeout is none.
func TestGatewayPartsOfFlags(t *testing.T) {
	parts := func(args ...string) (*gateway.Ingress, *gateway.Egress) {
		o := options.NewGateway()
		fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
		o.AddFlags(fs)
		require.NoError(t, fs.Parse(append([]string{"--cluster", "east"}, args...)))
		parsed, err := o.Complete()
		require.NoError(t, err)
		g := &gatewayConfig{opts: o, parsed: parsed}
		return g.newIngress(nil), g.newEgress()
	}
	in, eg := parts("--max-connections-per-source", "0", "--max-connections-per-peer", "7", "--egress-ports", "30000-32767", "--idle-timeout", "0")
	assert.Equal(t, 7, in.MaxConnsPerPeer)
	assert.Equal(t, -1, eg.MaxConnsPerSource, "0 on the command line: no bound")
	assert.Equal(t, labels.PortRange{First: 30000, Last: 32767}, eg.Trust.Ports)
	assert.Equal(t, time.Duration(-1), in.IdleTimeout)
	assert.Equal(t, time.Duration(-1), eg.IdleTimeout)

	in, eg = parts("--allow-cluster", "paris", "--peer", "west=203.0.113.10:4143")
	assert.Equal(t, 1024, eg.MaxConnsPerSource)
	assert.Zero(t, in.MaxConnsPerPeer)
	assert.True(t, eg.Trust.Ports.IsZero(), "no --egress-ports: any port")
	assert.Equal(t, time.Hour, in.IdleTimeout)
	assert.Equal(t, map[string]bool{"paris": true, "west": true}, in.AllowClusters)
	assert.Equal(t, gateway.StaticPeers{"west": "203.0.113.10:4143"}, eg.Peers)
}

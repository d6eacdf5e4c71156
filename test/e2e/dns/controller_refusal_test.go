package dns_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcmirror/mcmirror/test/harness"
)

// startLinkController runs the mirror controller of east over the link
// Secrets of linkNS, with extra flags, and returns it and its /metrics.
func startLinkController(t *testing.T, linkNS string, extra ...string) (*harness.Process, string) {
	t.Helper()
	ctl := env.StartFleet(t, harness.FleetOptions{Local: "east", LinkSecrets: linkNS, Parts: harness.FleetController,
		EgressPorts: "30000-39999", Controller: harness.ControllerOptions{Metrics: true, Args: extra}}).Controller
	return ctl.Process, ctl.MetricsURL()
}

// The controller refuses a hostile link Secret as the plugin does, and says
// so with a warning Event on the Secret and its metric; allowed, the same
// Secret's command runs.
func TestControllerRefusesHostileLinkSecret(t *testing.T) {
	ctx, east, west, _ := setUp(t)
	const linkNS = "controller-hostile-links"
	require.NoError(t, east.Apply(ctx, harness.Namespace(linkNS)))
	marker := filepath.Join(t.TempDir(), "exec-ran")

	p, metrics := startLinkController(t, linkNS)
	const series = `coredns_mcmirror_controller_link_refused_total{reason="exec"}`
	var before float64
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		before, _, err = harness.ScrapeSeries(metrics, series)
		require.NoError(c, err)
	}, 30*time.Second, 50*time.Millisecond, "controller metrics")

	east.CreateLinkSecret(t, linkNS, "west", execKubeconfig(t, west, marker))

	// Positive evidence: the Event on the Secret, the metric, the log.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		events, err := east.Client.CoreV1().Events(linkNS).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Secret,involvedObject.name=cluster-credentials-west,reason=LinkSecretRefused"})
		require.NoError(c, err)
		require.Len(c, events.Items, 1)
		e := events.Items[0]
		assert.Equal(c, corev1.EventTypeWarning, e.Type)
		assert.Contains(c, e.Message, `Link Secret refused (exec): kubeconfig refused: user "mcmirror-link" runs a command (exec "/bin/sh")`)
	}, 30*time.Second, 100*time.Millisecond, "Event on the refused Secret")
	waitMetricAbove(t, metrics, series, before)
	waitLogLine(t, p, "link secret "+linkNS+"/cluster-credentials-west refused (exec)")
	env.RequireAlive(t, p)
	assert.NoFileExists(t, marker, "the exec plugin ran")
	p.Stop()

	// Allowed, the command runs: the controller lists west through it.
	p2, _ := startLinkController(t, linkNS, "--allow-insecure-kubeconfig", "exec")
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.FileExists(c, marker) }, 30*time.Second, 50*time.Millisecond,
		"the allowed exec plugin did not run\n%s", p2.Tail(20))
	waitLogLine(t, p2, "Linked cluster synced")
}

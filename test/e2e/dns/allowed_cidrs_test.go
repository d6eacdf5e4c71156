package dns_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// In flat mode a linked cluster chooses the addresses answered. With
// `allowed_cidrs west 10.201.0.0/16`, an endpoint west publishes at east's
// own API server ClusterIP is not answered, and counted and logged, while
// west's allowed endpoints are; paris, linked without a list, is answered
// whatever it publishes, as before.
func TestAllowedCIDRs(t *testing.T) {
	ctx, east, west, paris := setUp(t)
	const ns = "allowed"
	apiSvc, err := east.Client.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	require.NoError(t, err)
	evil := apiSvc.Spec.ClusterIP // where a hostile cluster would send east's clients

	publish := func(c *harness.Cluster, eps map[string]string) {
		t.Helper()
		require.NoError(t, c.Apply(ctx, selectorless(ns, "pinned")))
		require.NoError(t, c.Apply(ctx, sliceOf(t, ns, "pinned", eps)))
	}
	publish(west, map[string]string{"good-0": "10.201.1.1"})
	publish(paris, map[string]string{"evil-0": evil})

	s := startDNS(t, []string{"west", "paris"}, "allowed_cidrs west 10.201.0.0/16")
	name := func(c string) string { return "pinned-" + c + "." + ns + "." + zone }
	eventuallyAnswers(t, s, name("west"), []string{"10.201.1.1"})
	eventuallyAnswers(t, s, name("paris"), []string{evil}) // no list: off
	const series = `coredns_mcmirror_dropped_addresses_total{cluster="west"}`
	before, _ := s.Metric(t, series)
	assert.Contains(t, []string{"", "0"}, before, "nothing dropped yet")

	// West publishes east's API server next to a second allowed pod.
	publish(west, map[string]string{"good-0": "10.201.1.1", "good-1": "10.201.1.2", "evil-0": evil})
	// The change is seen: the new allowed address is answered.
	eventuallyAnswers(t, s, name("west"), []string{"10.201.1.1", "10.201.1.2"})
	assert.Equal(t, []string{"10.201.1.2"}, harness.Answers(s.Ask(t, "udp", "good-1."+name("west"), dns.TypeA)))
	assert.Equal(t, dns.RcodeNameError, s.Ask(t, "udp", "evil-0."+name("west"), dns.TypeA).Rcode, "the pod outside is not answered")
	assert.Equal(t, []string{"10.201.1.1", "10.201.1.2", evil}, harness.Answers(s.Ask(t, "udp", "pinned-global."+ns+"."+zone, dns.TypeA)),
		"-global: west's allowed pods and paris's, which has no list")
	after, ok := s.Metric(t, series)
	assert.True(t, ok && after == "1", "one address dropped and counted: %q", after)
	assert.Contains(t, s.Process.Tail(200), "publishes "+evil+", outside its allowed_cidrs", "the drop is logged")
	env.RequireAlive(t, s.Process)
}

// selectorless is a headless Service exported in flat mode without a
// selector: its EndpointSlices are whatever the test writes.
func selectorless(ns, name string) string {
	return fmt.Sprintf(`
apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: v1
kind: Service
metadata: {name: %[2]s, namespace: %[1]s, labels: {%[3]s: %[4]s}}
spec:
  clusterIP: None
  ports: [{name: http, port: 80}]
`, ns, name, labels.Exported, labels.ExportFlat)
}

// sliceOf is the EndpointSlice of Service ns/svc with one ready endpoint
// per hostname → address. Written by hand, it carries the export label
// itself, or no watch selects it.
func sliceOf(t *testing.T, ns, svc string, eps map[string]string) string {
	var list []discoveryv1.Endpoint
	for _, host := range slices.Sorted(maps.Keys(eps)) {
		list = append(list, endpoint(eps[host], host, true))
	}
	return endpointSlice(t, ns, svc, svc+"-manual", map[string]string{labels.Exported: labels.ExportFlat}, list...)
}

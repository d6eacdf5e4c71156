// Package faults_test breaks things under a running mcmirror and proves
// nothing is lost: API servers stopped and restarted, links that hang or
// whose credentials are refused, the controller killed mid-reconcile,
// injected 409 and 429 answers, and names wanted twice. east is the local
// cluster; west and east-west export. Remote workloads are EndpointSlices
// written by the tests (the Services have no selector), so no
// kube-controller-manager is needed and every address is known.
//
// The tests run one after another: several stop an API server every other
// test relies on.
package faults_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

var env = harness.New(harness.Options{Clusters: []harness.ClusterOptions{
	{Name: "east"}, {Name: "west"}, {Name: "east-west"},
}})

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

const (
	zone = "svc.cluster.local."
	// staleOption is the Corefile option that bounds how long a linked
	// cluster that cannot be reached keeps its names.
	staleOption = "stale_max_age"
)

// startDNS runs coredns-mc as east's cluster DNS with the given links;
// block holds more lines of the mcmirror block.
func startDNS(t *testing.T, ls []harness.Link, block ...string) *harness.DNSServer {
	t.Helper()
	return env.StartFleet(t, harness.FleetOptions{Local: "east", Links: ls, Parts: harness.FleetDNS, Block: block}).DNS
}

// startController runs `coredns-mc controller` in east with the given
// links and its metrics on a free port, reaching east through kubeconfig
// (east's own when empty).
func startController(t *testing.T, name, kubeconfig string, ls []harness.Link, extra ...string) *harness.Controller {
	t.Helper()
	return env.StartFleet(t, harness.FleetOptions{Local: "east", Links: ls, Parts: harness.FleetController, EgressPorts: "30000-39999",
		Controller: harness.ControllerOptions{Name: name, Kubeconfig: kubeconfig, Metrics: true,
			Args: append([]string{"--pod-grace", "2s", "--link-removal-grace", "1s"}, extra...)}}).Controller
}

// counterBaseline returns the value of the counter series at url before
// the event that must move it, 0 when it is not exported yet: a counter
// with labels appears at its first increment. Only a baseline may be
// absent; the reading that must show the event uses harness.RequireSeries,
// which requires the series.
func counterBaseline(t require.TestingT, url, series string) float64 {
	v, _ := harness.SeriesValue(t, url, series)
	return v
}

// linkErrors is the DNS server's count of failed lists and watches of
// cluster for reason (unreachable, unauthorized, forbidden, error); the
// series must be exported.
func linkErrors(c require.TestingT, s *harness.DNSServer, cluster, reason string) float64 {
	return harness.RequireSeries(c, s.MetricsURL, linkErrorsSeries(cluster, reason))
}

func linkErrorsSeries(cluster, reason string) string {
	return fmt.Sprintf(`coredns_mcmirror_link_errors_total{cluster=%q,reason=%q}`, cluster, reason)
}

// outage stops c's API server (APIServerOutage; restart starts it again)
// and waits for the evidence that s saw it: link_up of c 0, its
// unreachable errors counted, and a line of s's log with every one of
// logged. down is when the API server stopped.
func outage(t *testing.T, s *harness.DNSServer, c *harness.Cluster, logged ...string) (down time.Time, restart func()) {
	t.Helper()
	before := s.Value(t, linkErrorsSeries(c.Name, "unreachable")) // a baseline: 0 while nothing is counted
	down = time.Now()
	restart = c.APIServerOutage(t)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Equal(ct, float64(0), linkUp(ct, s, c.Name), "link_up")
		assert.Greater(ct, linkErrors(ct, s, c.Name, "unreachable"), before, "link_errors_total")
		assert.NotEmpty(ct, s.Process.LogLines(ct, logged...), "logged")
	}, 30*time.Second, 200*time.Millisecond, "%s's outage is seen", c.Name)
	return down, restart
}

// linkUp is the DNS server's coredns_mcmirror_link_up of cluster, -1 when
// it is not exported.
func linkUp(c require.TestingT, s *harness.DNSServer, cluster string) float64 {
	v, ok := harness.SeriesValue(c, s.MetricsURL, fmt.Sprintf(`coredns_mcmirror_link_up{cluster=%q}`, cluster))
	if !ok {
		return -1
	}
	return v
}

// clusterIPExport is an exported ClusterIP Service with no selector.
func clusterIPExport(ns, name, mode string) string {
	return fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata: {name: %s, namespace: %s, labels: {%s: %q}}
spec:
  ports: [{name: http, port: 80}]
`, name, ns, labels.Exported, mode)
}

// headlessExport is an exported headless Service with no selector and an
// EndpointSlice (written by hand, so carrying the export label itself) of
// n ready endpoints with hostnames <name>-0.. at
// 10.<o2>.<o3>.1.. .
func headlessExport(ns, name, mode string, n int, o2, o3 byte) string {
	var eps strings.Builder
	for i := range n {
		fmt.Fprintf(&eps, "- {addresses: [%q], hostname: %s-%d, conditions: {ready: true}}\n", fmt.Sprintf("10.%d.%d.%d", o2, o3, i+1), name, i)
	}
	return fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata: {name: %[1]s, namespace: %[2]s, labels: {%[3]s: %[4]q}}
spec:
  clusterIP: None
  ports: [{name: http, port: 80}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: %[1]s-manual, namespace: %[2]s, labels: {kubernetes.io/service-name: %[1]s, %[3]s: %[4]q, endpointslice.kubernetes.io/managed-by: faults-test}}
addressType: IPv4
ports: [{name: http, port: 80, protocol: TCP}]
endpoints:
%[5]s`, name, ns, labels.Exported, mode, eps.String())
}

// managed returns the Services east's controller made in ns.
func managed(t require.TestingT, ns string) []corev1.Service {
	list, err := env.Cluster("east").Client.CoreV1().Services(ns).List(context.Background(),
		metav1.ListOptions{LabelSelector: labels.ManagedBy + "=" + labels.ManagedByValue})
	require.NoError(t, err)
	return list.Items
}

// mirrorSet returns east's mirror Services of ns as name → UID.
func mirrorSet(t require.TestingT, ns string) map[string]string {
	out := map[string]string{}
	for _, s := range managed(t, ns) {
		out[s.Name] = string(s.UID)
	}
	return out
}

// mirrorSlices returns east's controller EndpointSlices of ns as name → UID.
func mirrorSlices(t require.TestingT, ns string) map[string]string {
	list, err := env.Cluster("east").Client.DiscoveryV1().EndpointSlices(ns).List(context.Background(),
		metav1.ListOptions{LabelSelector: discoveryv1.LabelManagedBy + "=" + labels.EndpointSliceManagedBy})
	require.NoError(t, err)
	out := map[string]string{}
	for _, s := range list.Items {
		out[s.Name] = string(s.UID)
	}
	return out
}

// waitMirrors waits until east holds exactly the mirror Services want in
// ns, each with a ClusterIP (headless ones excepted).
func waitMirrors(t *testing.T, ns string, want []string, within time.Duration) {
	t.Helper()
	slices.Sort(want)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var got []string
		for _, s := range managed(c, ns) {
			if s.Spec.ClusterIP != "" {
				got = append(got, s.Name)
			}
		}
		slices.Sort(got)
		assert.Equal(c, want, got)
	}, within, 200*time.Millisecond, "mirrors of %s", ns)
}

// waitKept waits until east holds the mirrors of ns in mirrors (mirrorSet)
// and added beside them, then requireKept.
func waitKept(t *testing.T, ns string, mirrors, sliceUIDs map[string]string, added string, within time.Duration) {
	t.Helper()
	waitMirrors(t, ns, append(slices.Collect(maps.Keys(mirrors)), added), within)
	requireKept(t, ns, mirrors, sliceUIDs, added)
}

// requireKept checks that the controller kept every mirror of mirrors
// (mirrorSet) and every EndpointSlice of sliceUIDs (mirrorSlices), the
// same UIDs, beside the mirror added.
func requireKept(t *testing.T, ns string, mirrors, sliceUIDs map[string]string, added string) {
	t.Helper()
	after := mirrorSet(t, ns)
	delete(after, added)
	assert.Equal(t, mirrors, after, "no mirror was deleted or recreated")
	sl := mirrorSlices(t, ns)
	for name, uid := range sliceUIDs {
		assert.Equal(t, uid, sl[name], "EndpointSlice %s kept", name)
	}
}

// ask sends one query over UDP with a short timeout (queryTimeout).
func ask(s *harness.DNSServer, name string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	r, _, err := (&dns.Client{Timeout: queryTimeout}).Exchange(m, s.Addr)
	return r, err
}

// answered returns the A records of name, failing c unless the answer is
// NOERROR with at least one record.
func answered(c require.TestingT, s *harness.DNSServer, name string) []string {
	r, err := ask(s, name, dns.TypeA)
	require.NoError(c, err, name)
	require.Equal(c, dns.RcodeSuccess, r.Rcode, "%s: %s", name, dns.RcodeToString[r.Rcode])
	a := harness.Answers(r)
	require.NotEmpty(c, a, name)
	return a
}

// mirrorIPs returns name → ClusterIP of the mirrors in ns.
func mirrorIPs(t require.TestingT, ns string) map[string]string {
	out := map[string]string{}
	for _, s := range managed(t, ns) {
		if s.Spec.ClusterIP != corev1.ClusterIPNone {
			out[s.Name] = s.Spec.ClusterIP
		}
	}
	return out
}

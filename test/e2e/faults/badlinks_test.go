package faults_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// startupTimeout is the DNS server's startup_timeout in the bad-link test.
const startupTimeout = 4 * time.Second

// serviceAccountLink creates ServiceAccount mcmirror/name in c, bound to
// the link role when bound, and returns a kubeconfig with a TokenRequest
// token of it.
func serviceAccountLink(t *testing.T, c *harness.Cluster, name string, bound bool) []byte {
	t.Helper()
	ctx := context.Background()
	c.LinkFile(t) // the mcmirror namespace and the link role
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "mcmirror"}}
	_, err := c.Client.CoreV1().ServiceAccounts("mcmirror").Create(ctx, sa, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.Client.CoreV1().ServiceAccounts("mcmirror").Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	if bound {
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "faults-" + name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "mcmirror-link"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: "mcmirror"}},
		}
		_, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() {
			_ = c.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
		})
	}
	kc, err := c.ServiceAccountKubeconfig(ctx, "mcmirror", name)
	require.NoError(t, err)
	return kc
}

// viaProxy returns the path of kubeconfig rewritten to go through p.
func viaProxy(t *testing.T, p *harness.FaultProxy, name string, kubeconfig []byte) string {
	t.Helper()
	kc, err := p.Rewrite(kubeconfig)
	require.NoError(t, err)
	return harness.TempFile(t, name+".kubeconfig", kc)
}

// Links that hang or whose credentials are refused, from the start and
// after a first good sync, hold nothing up: coredns-mc answers for the
// good link within startup_timeout, the controller mirrors it, both log
// and count the bad ones, and nothing of a link that synced once is
// deleted when it goes bad.
func TestBadLinks(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	west := env.Cluster("west")
	const ns = "badlinks"
	env.CreateNamespace(t, ns)
	require.NoError(t, west.Apply(ctx, clusterIPExport(ns, "svc", labels.ExportGateway)+"---\n"+
		headlessExport(ns, "flat", labels.ExportFlat, 2, 62, 1)))

	good := west.LinkFile(t)
	linkKC, err := os.ReadFile(good)
	require.NoError(t, err)
	// Bad from the start: an address that hangs, a deleted ServiceAccount
	// (401), a ServiceAccount without the role (403).
	hangProxy := west.FaultProxy(t)
	hangProxy.Hang()
	gone := serviceAccountLink(t, west, "faults-gone", true)
	require.NoError(t, west.Client.CoreV1().ServiceAccounts("mcmirror").Delete(ctx, "faults-gone", metav1.DeleteOptions{}))
	norbac := serviceAccountLink(t, west, "faults-norbac", false)
	// Good at first, bad later, each behind a proxy that drops its
	// connections once the credentials are withdrawn, so the watches start
	// again with the withdrawn ones (a watch already open is not
	// re-authorized; it ends on its own within minutes).
	p401, p403, pHang := west.FaultProxy(t), west.FaultProxy(t), west.FaultProxy(t)
	late401 := serviceAccountLink(t, west, "faults-late401", true)
	late403 := serviceAccountLink(t, west, "faults-late403", true)
	ls := []harness.Link{
		{Name: "west", Kubeconfig: good},
		{Name: "hang", Kubeconfig: viaProxy(t, hangProxy, "hang", linkKC)},
		{Name: "gone", Kubeconfig: harness.TempFile(t, "gone.kubeconfig", gone)},
		{Name: "norbac", Kubeconfig: harness.TempFile(t, "norbac.kubeconfig", norbac)},
		{Name: "late401", Kubeconfig: viaProxy(t, p401, "late401", late401)},
		{Name: "late403", Kubeconfig: viaProxy(t, p403, "late403", late403)},
		{Name: "latehang", Kubeconfig: viaProxy(t, pHang, "latehang", linkKC)},
	}
	bad := []string{"hang", "gone", "norbac"}
	late := []string{"late401", "late403", "latehang"}

	start := time.Now()
	dnsServer := startDNS(t, ls, fmt.Sprintf("startup_timeout %s", startupTimeout))
	ready := time.Since(start)
	// It was ready with every bad link known and not synced: it did not
	// wait for them to sync. Nor for the hanging one to fail: that one
	// is counted unreachable only once it has given no answer for 15 s
	// (the plugin's no-answer bound), and the server was ready before.
	// An order of events, not a clock: a slow machine starts the process
	// later, and the dial with it. (Its errors series may be absent: a
	// counter appears at its first increment.)
	hangErrs, counted := harness.SeriesValue(t, dnsServer.MetricsURL, linkErrorsSeries("hang", "unreachable"))
	assert.False(t, counted && hangErrs > 0, "ready only once the hanging link had failed (%v), not at startup_timeout", hangErrs)
	for _, n := range bad {
		assert.Equal(t, float64(0), harness.RequireSeries(t, dnsServer.MetricsURL, fmt.Sprintf(`coredns_mcmirror_link_synced{cluster=%q}`, n)), "ready with %s not synced", n)
	}
	t.Logf("coredns-mc ready and answering %.1fs after start with %d bad links (startup_timeout %s)", ready.Seconds(), len(bad), startupTimeout)
	answered(t, dnsServer, "flat-west."+ns+"."+zone)

	ctl := startController(t, "controller", "", ls)
	want := []string{"svc-west", "flat-west"}
	for _, l := range late {
		want = append(want, "svc-"+l, "flat-"+l)
	}
	waitMirrors(t, ns, want, 60*time.Second)
	for _, name := range append([]string{"west"}, late...) {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			answered(c, dnsServer, "svc-"+name+"."+ns+"."+zone)
			assert.Equal(c, []string{"10.62.1.1", "10.62.1.2"}, answered(c, dnsServer, "flat-"+name+"."+ns+"."+zone))
		}, 30*time.Second, 100*time.Millisecond, "%s answered", name)
	}

	// The links bad from the start are counted and logged, by both.
	// Each bad link's reason, as both report it.
	reasons := map[string]string{"hang": "unreachable", "gone": "unauthorized", "norbac": "forbidden",
		"late401": "unauthorized", "late403": "forbidden", "latehang": "unreachable"}
	checkReported(t, dnsServer, ctl, bad, reasons)
	assert.Zero(t, hangProxy.Requests(), "no request got through the hanging address")
	assert.Greater(t, hangProxy.Held(), 0, "connections to the hanging address were made and left open")

	// Now the late ones go bad.
	mirrorsBefore := mirrorSet(t, ns)
	slicesBefore := mirrorSlices(t, ns)
	require.NoError(t, west.Client.CoreV1().ServiceAccounts("mcmirror").Delete(ctx, "faults-late401", metav1.DeleteOptions{}))
	require.NoError(t, west.Client.RbacV1().ClusterRoleBindings().Delete(ctx, "faults-faults-late403", metav1.DeleteOptions{}))
	// The API server's authorizer cache needs a moment: drop the
	// connections until the refusals show.
	p401.DropConnections()
	p403.DropConnections()
	pHang.Hang()
	checkReported(t, dnsServer, ctl, late, reasons, p401, p403)

	env.RequireAlive(t, dnsServer.Process, ctl.Process)
	assert.Equal(t, mirrorsBefore, mirrorSet(t, ns), "nothing of a refused link is deleted")
	assert.Equal(t, slicesBefore, mirrorSlices(t, ns))
	for _, name := range late {
		answered(t, dnsServer, "svc-"+name+"."+ns+"."+zone)
		assert.Equal(t, []string{"10.62.1.1", "10.62.1.2"}, answered(t, dnsServer, "flat-"+name+"."+ns+"."+zone), "%s served from its last known state", name)
	}
	// And the good link still works: a new export is mirrored and answered.
	require.NoError(t, west.Apply(ctx, clusterIPExport(ns, "after", labels.ExportGateway)))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		answered(c, dnsServer, "after-west."+ns+"."+zone)
	}, 30*time.Second, 100*time.Millisecond)
}

// checkReported waits until DNS and the controller both report every one
// of names down for its reason (link_up 0, link_errors_total moved from
// its first reading, a log line naming the cluster); proxies, if any, drop
// their connections meanwhile, so that a retry meets withdrawn
// credentials.
func checkReported(t *testing.T, dnsServer *harness.DNSServer, ctl *harness.Controller, names []string, reasons map[string]string, proxies ...*harness.FaultProxy) {
	t.Helper()
	first, ctlFirst := map[string]float64{}, map[string]float64{}
	for _, n := range names {
		first[n] = dnsServer.Value(t, linkErrorsSeries(n, reasons[n]))
		ctlFirst[n] = ctlLinkErrors(t, ctl, n, reasons[n]) // every reason exported from the link's start
	}
	assert.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, p := range proxies {
			p.DropConnections()
		}
		for _, n := range names {
			assert.Equal(c, float64(0), linkUp(c, dnsServer, n), "%s: link_up", n)
			assert.Greater(c, linkErrors(c, dnsServer, n, reasons[n]), first[n], "%s: link_errors_total{reason=%q} moved", n, reasons[n])
			assert.NotEmpty(c, dnsServer.Process.LogLines(c, fmt.Sprintf("Link %s is down (%s)", n, reasons[n])), "DNS logs %s down (%s)", n, reasons[n])
			assert.Equal(c, float64(0), ctlLinkUp(c, ctl, n), "%s: the controller's link_up", n)
			assert.Greater(c, ctlLinkErrors(c, ctl, n, reasons[n]), ctlFirst[n], "%s: the controller's link_errors_total{reason=%q} moved", n, reasons[n])
			assert.NotEmpty(c, ctl.LogLines(c, "Link down", fmt.Sprintf("cluster=%q", n), fmt.Sprintf("reason=%q", reasons[n])), "the controller logs %s down (%s)", n, reasons[n])
		}
	}, 45*time.Second, time.Second, "bad links reported: %v", names)
}

// ctlLinkErrors is the controller's count of failed lists and watches of
// cluster for reason (unreachable, unauthorized, forbidden, error).
func ctlLinkErrors(c require.TestingT, ctl *harness.Controller, cluster, reason string) float64 {
	return harness.RequireSeries(c, ctl.MetricsURL(), fmt.Sprintf(`coredns_mcmirror_controller_link_errors_total{cluster=%q,reason=%q}`, cluster, reason))
}

// ctlLinkUp is the controller's link_up of cluster, -1 when it is not
// exported.
func ctlLinkUp(c require.TestingT, ctl *harness.Controller, cluster string) float64 {
	v, ok := harness.SeriesValue(c, ctl.MetricsURL(), fmt.Sprintf(`coredns_mcmirror_controller_link_up{cluster=%q}`, cluster))
	if !ok {
		return -1
	}
	return v
}

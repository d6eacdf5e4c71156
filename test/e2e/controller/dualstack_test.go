package controller_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Dual-stack: east and west have an IPv6 service range beside the IPv4 one
// (main_test.go). A west Service of both families, mirrored through a
// gateway egress with addresses of both, gets a dual-stack mirror in east
// with one egress EndpointSlice per family; DNS answers A and AAAA.

// The gateway egress addresses of the dual-stack tests, one per family.
const (
	egressV4 = "192.0.2.41"
	egressV6 = "2001:db8::41"
)

// dualGateway writes east's headless Service gwNS/gw-egress and an
// EndpointSlice of it per family, as the EndpointSlice controller would
// for a dual-stack gateway pod; it returns the deletion of the IPv6 one.
func dualGateway(t *testing.T, gwNS string) (dropV6 func()) {
	t.Helper()
	gatewayEgress(t, gwNS, ", ipFamilyPolicy: RequireDualStack",
		gatewaySlice(gwNS, "gw-egress-ipv4", discoveryv1.AddressTypeIPv4, egressV4),
		gatewaySlice(gwNS, "gw-egress-ipv6", discoveryv1.AddressTypeIPv6, egressV6))
	return func() {
		t.Helper()
		cl := env.Cluster("east").Client.DiscoveryV1().EndpointSlices(gwNS)
		require.NoError(t, cl.Delete(context.Background(), "gw-egress-ipv6", metav1.DeleteOptions{}))
	}
}

// dualService is an exported ClusterIP Service of the given IP family
// policy and families (none: the API server's defaults).
func dualService(ns, svc, policy string, families ...string) string {
	spec := ""
	if policy != "" {
		spec += "\n  ipFamilyPolicy: " + policy
	}
	if len(families) > 0 {
		spec += "\n  ipFamilies: [" + strings.Join(families, ", ") + "]"
	}
	return fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata: {name: %[2]s, namespace: %[1]s, labels: {%[3]s: "true"}}
spec:%[4]s
  selector: {app: %[2]s}
  ports: [{name: http, port: 80}]
`, ns, svc, labels.Exported, spec)
}

// dualStatefulSet is statefulSet with a dual-stack headless Service.
func dualStatefulSet(ns, svc string, replicas int) string {
	m := statefulSet(ns, svc, replicas, "true")
	return strings.Replace(m, "  clusterIP: None\n", "  clusterIP: None\n  ipFamilyPolicy: RequireDualStack\n", 1)
}

// startDualController runs the controller of east, linked to west, with
// the egress Service gwNS/gw-egress.
func startDualController(t *testing.T, gwNS string) *harness.Process {
	t.Helper()
	return env.StartFleet(t, harness.FleetOptions{Local: "east", Remotes: []string{"west"}, Parts: harness.FleetController,
		Controller: harness.ControllerOptions{EgressService: gwNS + "/gw-egress"}}).Controller.Process
}

// assertFamilies checks that mirror s has ClusterIPs of the given families,
// in order, each from east's range of that family, and a PreferDualStack
// policy when it has two.
func assertFamilies(c *assert.CollectT, s corev1.Service, families ...corev1.IPFamily) {
	east := env.Cluster("east")
	require.Equal(c, families, s.Spec.IPFamilies, "%s: IP families", s.Name)
	require.Len(c, s.Spec.ClusterIPs, len(families), "%s: one ClusterIP per family", s.Name)
	for i, f := range families {
		ip := netip.MustParseAddr(s.Spec.ClusterIPs[i])
		cidr := east.ServiceCIDR
		if f == corev1.IPv6Protocol {
			cidr = east.ServiceCIDRv6
		}
		assert.True(c, cidr.Contains(ip), "%s: ClusterIP %s in %s", s.Name, ip, cidr)
	}
	want := corev1.IPFamilyPolicySingleStack
	if len(families) == 2 {
		want = corev1.IPFamilyPolicyPreferDualStack
	}
	require.NotNil(c, s.Spec.IPFamilyPolicy)
	assert.Equal(c, want, *s.Spec.IPFamilyPolicy, s.Name)
}

// egressSlicesOf returns, by slice name, "<address type> <addresses>" of
// the EndpointSlices of mirror s, checking that each points at the
// mirror's recorded egress port.
func egressSlicesOf(c *assert.CollectT, ctx context.Context, s corev1.Service) map[string]string {
	list, err := env.Cluster("east").Client.DiscoveryV1().EndpointSlices(s.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + s.Name})
	require.NoError(c, err)
	_, port, _ := strings.Cut(s.Annotations[labels.EgressPorts], "=")
	out := map[string]string{}
	for _, es := range list.Items {
		var addrs []string
		for _, ep := range es.Endpoints {
			addrs = append(addrs, ep.Addresses...)
		}
		out[es.Name] = fmt.Sprintf("%s %v", es.AddressType, addrs)
		if assert.Len(c, es.Ports, 1, es.Name) {
			assert.Equal(c, port, fmt.Sprint(*es.Ports[0].Port), "%s: the recorded egress port", es.Name)
		}
	}
	return out
}

// A dual-stack remote Service gets a dual-stack mirror, IPv6 first as the
// remote, with an egress EndpointSlice per family; so do the per-pod
// mirrors of a dual-stack headless Service; a single-stack one stays
// single-stack. A remote that becomes dual-stack has its mirror gain the
// family in place; the egress losing its IPv6 addresses takes it away in
// place again (an IPv4-first mirror), or makes the mirror again in IPv4
// (an IPv6-first one: the primary family is immutable).
func TestDualStackMirrors(t *testing.T) {
	const ns, gwNS = "e2e-dual", "e2e-dual-gw"
	ctx := setUp(t, ns, "east", "west")
	namespace(t, gwNS, "east")
	east, west := env.Cluster("east"), env.Cluster("west")
	require.True(t, east.ServiceCIDRv6.IsValid(), "east is dual-stack")
	dropV6 := dualGateway(t, gwNS)
	require.NoError(t, west.Apply(ctx, dualService(ns, "web", "RequireDualStack", "IPv6", "IPv4")))
	require.NoError(t, west.Apply(ctx, dualService(ns, "plain", "")))
	require.NoError(t, west.Apply(ctx, dualStatefulSet(ns, "db", 2)))
	startDualController(t, gwNS)

	v4, v6 := corev1.IPv4Protocol, corev1.IPv6Protocol
	egress4, egress6 := "IPv4 ["+egressV4+"]", "IPv6 ["+egressV6+"]"
	var m map[string]corev1.Service
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m = mirrors(c, ns)
		require.Equal(c, []string{"db-set-0-west", "db-set-1-west", "db-west", "plain-west", "web-west"}, names(m))
		assertFamilies(c, m["web-west"], v6, v4)
		assert.Equal(c, map[string]string{"web-west": egress6, "web-west.ipv4": egress4}, egressSlicesOf(c, ctx, m["web-west"]))
		assertFamilies(c, m["plain-west"], v4)
		assert.Equal(c, map[string]string{"plain-west": egress4}, egressSlicesOf(c, ctx, m["plain-west"]))
		for _, p := range []string{"db-set-0-west", "db-set-1-west"} {
			assertFamilies(c, m[p], v4, v6)
			assert.Equal(c, map[string]string{p: egress4, p + ".ipv6": egress6}, egressSlicesOf(c, ctx, m[p]))
		}
		assertPortsUnique(c, ctx)
	}, wait, tick)
	plain, web := m["plain-west"], m["web-west"]

	// plain becomes dual-stack in west: its mirror gains IPv6 in place.
	require.NoError(t, west.Apply(ctx, dualService(ns, "plain", "PreferDualStack")))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := service(c, east, ns, "plain-west")
		assertFamilies(c, *got, v4, v6)
		assert.Equal(c, plain.UID, got.UID, "the same mirror")
		assert.Equal(c, plain.Spec.ClusterIP, got.Spec.ClusterIP, "the same primary ClusterIP")
		assert.Equal(c, map[string]string{"plain-west": egress4, "plain-west.ipv6": egress6}, egressSlicesOf(c, ctx, *got))
	}, wait, tick)

	// The gateway loses its IPv6 address: plain-west goes back to IPv4
	// only, in place; web-west, IPv6 first, is made again in IPv4.
	dropV6()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m = mirrors(c, ns)
		require.Contains(c, m, "plain-west")
		require.Contains(c, m, "web-west")
		assertFamilies(c, m["plain-west"], v4)
		assert.Equal(c, plain.UID, m["plain-west"].UID, "plain-west stays")
		assert.Equal(c, plain.Spec.ClusterIP, m["plain-west"].Spec.ClusterIP)
		assert.Equal(c, map[string]string{"plain-west": egress4}, egressSlicesOf(c, ctx, m["plain-west"]))
		assertFamilies(c, m["web-west"], v4)
		assert.NotEqual(c, web.UID, m["web-west"].UID, "web-west is made again")
		assert.Equal(c, map[string]string{"web-west": egress4}, egressSlicesOf(c, ctx, m["web-west"]))
		for _, p := range []string{"db-set-0-west", "db-set-1-west"} {
			assertFamilies(c, m[p], v4)
			assert.Equal(c, map[string]string{p: egress4}, egressSlicesOf(c, ctx, m[p]))
		}
		assertPortsUnique(c, ctx)
	}, wait, tick)
}

// A real coredns-mc answers A and AAAA for a dual-stack mirror, and for
// the per-pod names of a dual-stack headless Service: the ClusterIPs of
// both families the controller made; a single-stack mirror has no AAAA.
func TestDualStackDNS(t *testing.T) {
	const ns, gwNS = "e2e-dual-dns", "e2e-dual-dns-gw"
	ctx := setUp(t, ns, "east", "west")
	namespace(t, gwNS, "east")
	west := env.Cluster("west")
	dualGateway(t, gwNS)
	require.NoError(t, west.Apply(ctx, dualService(ns, "web", "PreferDualStack")))
	require.NoError(t, west.Apply(ctx, dualService(ns, "plain", "")))
	require.NoError(t, west.Apply(ctx, dualStatefulSet(ns, "db", 1)))
	startDualController(t, gwNS)

	var m map[string]corev1.Service
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m = mirrors(c, ns)
		require.Equal(c, []string{"db-set-0-west", "db-west", "plain-west", "web-west"}, names(m))
		assertFamilies(c, m["web-west"], corev1.IPv4Protocol, corev1.IPv6Protocol)
		assertFamilies(c, m["db-set-0-west"], corev1.IPv4Protocol, corev1.IPv6Protocol)
		assertFamilies(c, m["plain-west"], corev1.IPv4Protocol)
	}, wait, tick)

	s := startDNS(t, "west")
	ask := func(c require.TestingT, name string, qtype uint16) []string {
		return harness.Answers(s.Ask(c, "tcp", name, qtype))
	}
	ip := func(name string, i int) []string { return []string{m[name].Spec.ClusterIPs[i]} }
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, ip("web-west", 0), ask(c, "web-west."+ns+"."+zone, dns.TypeA))
		assert.Equal(c, ip("web-west", 1), ask(c, "web-west."+ns+"."+zone, dns.TypeAAAA))
		assert.Equal(c, ip("db-set-0-west", 0), ask(c, "db-set-0.db-west."+ns+"."+zone, dns.TypeA))
		assert.Equal(c, ip("db-set-0-west", 1), ask(c, "db-set-0.db-west."+ns+"."+zone, dns.TypeAAAA))
		assert.Equal(c, ip("db-set-0-west", 1), ask(c, "db-west."+ns+"."+zone, dns.TypeAAAA))
		assert.Equal(c, ip("plain-west", 0), ask(c, "plain-west."+ns+"."+zone, dns.TypeA))
		assert.Empty(c, ask(c, "plain-west."+ns+"."+zone, dns.TypeAAAA))
	}, wait, tick)
}

// flatDualService is dualService exported in flat mode: the import reaches
// its pods directly, in the families of the Service itself.
func flatDualService(ns, svc, policy string, families ...string) string {
	return strings.Replace(dualService(ns, svc, policy, families...), labels.Exported+`: "true"`, labels.Exported+`: "`+labels.ExportFlat+`"`, 1)
}

// The derived Service of a ClusterSetIP import takes the IP families of
// its exports, on every sync and both ways: west's api, single-stack IPv4,
// then dual-stack, then single-stack again, is followed in place (the same
// derived Service, the same primary ClusterSetIP), and the ServiceImport
// advertises only the ClusterSetIPs there are; west's v6, IPv6 only, gets
// an IPv6 ClusterSetIP, not east's default family.
func TestDualStackImport(t *testing.T) {
	const ns = "e2e-dual-import"
	ctx := setUp(t, ns, "east", "west")
	west := env.Cluster("west")
	require.NoError(t, west.Apply(ctx, flatDualService(ns, "api", "")))
	require.NoError(t, west.Apply(ctx, flatDualService(ns, "v6", "SingleStack", "IPv6")))
	p := startController(t, "controller")

	v4, v6 := corev1.IPv4Protocol, corev1.IPv6Protocol
	// check reads the import of name and checks its derived Service's
	// families and what the ServiceImport advertises.
	check := func(c *assert.CollectT, name string, families ...corev1.IPFamily) corev1.Service {
		imp := requireImport(c, ns, name, "ServiceImport %s", name)
		assertFamilies(c, *imp.derived, families...)
		assert.Equal(c, imp.derived.Spec.ClusterIPs, imp.si.Spec.IPs, "%s: the ClusterSetIPs there are", name)
		assert.Equal(c, families, imp.si.Spec.IPFamilies, name)
		return *imp.derived
	}
	var api corev1.Service
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		api = check(c, "api", v4)
		check(c, "v6", v6)
	}, wait, tick)

	// Dual-stack, then the IPv6 export goes: so do the IPv6 ClusterSetIP
	// and its advertisement.
	for _, step := range []struct {
		policy   string
		families []corev1.IPFamily
	}{{"PreferDualStack", []corev1.IPFamily{v4, v6}}, {"SingleStack", []corev1.IPFamily{v4}}} {
		require.NoError(t, west.Apply(ctx, flatDualService(ns, "api", step.policy)))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			got := check(c, "api", step.families...)
			assert.Equal(c, api.UID, got.UID, "the same derived Service")
			assert.Equal(c, api.Spec.ClusterIP, got.Spec.ClusterIP, "the same primary ClusterSetIP")
		}, wait, tick)
	}
	env.RequireAlive(t, p)
}

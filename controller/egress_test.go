package controller

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

var gatewayEgress = types.NamespacedName{Namespace: "mcmirror", Name: "mcmirror-gateway-egress"}

// gatewaySlice is an EndpointSlice of the egress Service; an address
// ending in "!" is not ready, one ending in "?" has no Ready condition.
func gatewaySlice(name string, at discoveryv1.AddressType, addrs ...string) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: gatewayEgress.Namespace, Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: gatewayEgress.Name}},
		AddressType: at,
	}
	for _, a := range addrs {
		ep := discoveryv1.Endpoint{}
		switch {
		case a[len(a)-1] == '!':
			a = a[:len(a)-1]
			ep.Conditions.Ready = new(false)
		case a[len(a)-1] == '?':
			a = a[:len(a)-1]
		default:
			ep.Conditions.Ready = new(true)
		}
		ep.Addresses = []string{a}
		es.Endpoints = append(es.Endpoints, ep)
	}
	return es
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

// The pure rule: every ready address of the Service's slices, both families,
// sorted, once each.
func TestEgressAddresses(t *testing.T) {
	v4, v6 := discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6
	other := gatewaySlice("other", v4, "10.0.0.99")
	other.Labels[discoveryv1.LabelServiceName] = "other"
	elsewhere := gatewaySlice("elsewhere", v4, "10.0.0.98")
	elsewhere.Namespace = "default"
	many := gatewaySlice("many", v4)
	for i := range 1001 {
		many.Endpoints = append(many.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.1.%d.%d", i/250, i%250+1)}})
	}
	for _, tc := range []struct {
		name   string
		slices []*discoveryv1.EndpointSlice
		want   []netip.Addr
	}{
		{"none", nil, nil},
		{"ready only, sorted, once each", []*discoveryv1.EndpointSlice{
			gatewaySlice("a", v4, "10.0.0.9", "10.0.0.10!", "10.0.0.2?"),
			gatewaySlice("b", v4, "10.0.0.9", "10.0.0.3"),
		}, addrs("10.0.0.2", "10.0.0.3", "10.0.0.9")},
		{"other Services and namespaces ignored", []*discoveryv1.EndpointSlice{
			gatewaySlice("a", v4, "10.0.0.1"), other, elsewhere,
		}, addrs("10.0.0.1")},
		{"no ready address", []*discoveryv1.EndpointSlice{gatewaySlice("a", v4, "10.0.0.1!")}, nil},
		{"dual-stack: both families, IPv4 first", []*discoveryv1.EndpointSlice{
			gatewaySlice("v6", v6, "fd00::2", "fd00::1"), gatewaySlice("v4", v4, "10.0.0.1"),
		}, addrs("10.0.0.1", "fd00::1", "fd00::2")},
		{"IPv6 only", []*discoveryv1.EndpointSlice{gatewaySlice("v6", v6, "fd00::2", "fd00::1", "fd00::3!")}, addrs("fd00::1", "fd00::2")},
		{"refused and unparseable addresses skipped", []*discoveryv1.EndpointSlice{
			gatewaySlice("a", v4, "127.0.0.1", "169.254.0.1", "0.0.0.0", "224.0.0.1", "nonsense", "10.0.0.1"),
			gatewaySlice("fqdn", discoveryv1.AddressTypeFQDN, "10.0.0.2"),
		}, addrs("10.0.0.1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, EgressAddresses(gatewayEgress.Namespace, gatewayEgress.Name, tc.slices))
		})
	}
	got := EgressAddresses(gatewayEgress.Namespace, gatewayEgress.Name, []*discoveryv1.EndpointSlice{many})
	assert.Len(t, got, maxEgressAddresses, "at most one EndpointSlice's worth")
	assert.True(t, slices.IsSortedFunc(got, netip.Addr.Compare))
}

// At start-up the last known addresses are read from the egress slices,
// whatever their readiness; a headless mirror's slice is not one.
func TestLastEgressAddresses(t *testing.T) {
	egress := gatewaySlice("web-west", discoveryv1.AddressTypeIPv4, "10.0.0.2!", "10.0.0.1!")
	headless := endpoints("default", "db-west", "db-0", "db-1")
	assert.True(t, isEgressSlice(egress))
	assert.False(t, isEgressSlice(headless))
	assert.True(t, isEgressSlice(gatewaySlice("empty", discoveryv1.AddressTypeIPv4)), "no endpoints: egress, ports kept")
	assert.Equal(t, addrs("10.0.0.1", "10.0.0.2"), lastEgressAddresses([]*discoveryv1.EndpointSlice{headless, egress}))
	assert.Nil(t, lastEgressAddresses([]*discoveryv1.EndpointSlice{headless}))
}

func TestParseEgressService(t *testing.T) {
	n, err := ParseEgressService("mcmirror/mcmirror-gateway-egress")
	require.NoError(t, err)
	assert.Equal(t, gatewayEgress, n)
	for _, bad := range []string{"", "x", "/x", "x/", "a/b/c", "Bad/x", "x/1abc", "x/Y"} {
		_, err := ParseEgressService(bad)
		assert.Error(t, err, bad)
	}
}

// egressFixture is a fixture whose controller follows the egress Service,
// with mirrors of a ClusterIP export (web) and a headless one (db, two
// pods): three egress slices and one headless slice.
func egressFixture(t *testing.T, local ...runtime.Object) *fixture {
	f := newFixture(t, fixtureOptions{egressService: gatewayEgress, local: local}, egressRemote())
	f.convergeAll("west/default/web", "west/default/db")
	return f
}

// egressRemote is west with a ClusterIP export (web) and a headless one
// (db, two pods).
func egressRemote() map[string][]runtime.Object {
	return west(
		exported("default", "web", "true", false, tcp("http", 80)),
		exported("default", "db", "true", true, tcp("http", 80)), endpoints("default", "db", "db-0", "db-1"),
	)
}

var egressSliceNames = []string{"db-0-west", "db-1-west", "web-west"}

// assertEgress checks that every egress slice lists want, one endpoint
// each, at its recorded egress ports, and that the headless slice is the
// per-pod mirrors'.
func (f *fixture) assertEgress(want ...string) {
	f.t.Helper()
	for _, name := range egressSliceNames {
		es := f.slice("default", name)
		require.NotNil(f.t, es, name)
		var got []string
		for _, ep := range es.Endpoints {
			require.Len(f.t, ep.Addresses, 1)
			assert.Nil(f.t, ep.Hostname)
			assert.True(f.t, *ep.Conditions.Ready, name)
			got = append(got, ep.Addresses[0])
		}
		assert.Equal(f.t, want, got, name)
		require.Len(f.t, es.Ports, 1, name)
		assert.Equal(f.t, labels.ParseEgressPorts(f.service("default", name).Annotations[labels.EgressPorts])["80/TCP"], *es.Ports[0].Port, name)
	}
	hs := f.slice("default", "db-west")
	require.Len(f.t, hs.Endpoints, 2)
	for _, ep := range hs.Endpoints {
		assert.Equal(f.t, []string{f.service("default", *ep.Hostname+"-west").Spec.ClusterIP}, ep.Addresses)
	}
}

// setGateway writes the egress Service's EndpointSlice and waits until the
// controller's informer has it.
func (f *fixture) setGateway(es *discoveryv1.EndpointSlice) {
	f.t.Helper()
	cl := f.local.DiscoveryV1().EndpointSlices(es.Namespace)
	_, err := cl.Update(f.ctx, es, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cl.Create(f.ctx, es, metav1.CreateOptions{})
	}
	require.NoError(f.t, err)
	require.Eventually(f.t, func() bool {
		got, ok, _ := f.c.egressSlices.GetStore().Get(es)
		return ok && apiequality.Semantic.DeepEqual(got.(*discoveryv1.EndpointSlice).Endpoints, es.Endpoints)
	}, 10*time.Second, time.Millisecond)
}

// egressConverged waits for the egress addresses want, converges the
// egressFixture's keys, and checks their slices and the gauge.
func (f *fixture) egressConverged(want ...string) {
	f.t.Helper()
	f.waitEgress(want...)
	f.convergeAll("west/default/web", "west/default/db")
	f.assertEgress(want...)
	assert.Equal(f.t, float64(len(want)), egressGauge())
}

// queued takes every key out of the work queue.
func (f *fixture) queued() []string {
	var keys []string
	for f.c.queue.Len() > 0 {
		k, _ := f.c.queue.Get()
		f.c.queue.Forget(k)
		f.c.queue.Done(k)
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

func (f *fixture) waitEgress(want ...string) {
	f.t.Helper()
	require.Eventually(f.t, func() bool { return slices.Equal(f.c.egressAddresses(), addrs(want...)) },
		10*time.Second, time.Millisecond, "egress addresses %v (have %v)", want, f.c.egressAddresses())
}

func (f *fixture) egressEmpty() bool {
	f.c.egressMu.Lock()
	defer f.c.egressMu.Unlock()
	return f.c.egressEmpty
}

func egressGauge() float64 { return testutil.ToFloat64(egressAddressesGauge) }

// With --egress-service every mirror's egress slice lists every ready
// gateway address; a gateway pod replaced enqueues every key, whose sync
// rewrites only the egress slices; while no address is ready the last ones
// are kept.
func TestEgressService(t *testing.T) {
	v4 := discoveryv1.AddressTypeIPv4
	f := egressFixture(t, gatewaySlice("gw-1", v4, "10.244.0.12", "10.244.0.11", "10.244.0.13!"))
	f.waitEgress("10.244.0.11", "10.244.0.12")
	f.assertEgress("10.244.0.11", "10.244.0.12")
	assert.Equal(t, float64(2), egressGauge())

	// A gateway pod is replaced: .12 goes, .14 comes.
	f.queued()
	f.setGateway(gatewaySlice("gw-1", v4, "10.244.0.14", "10.244.0.11"))
	f.waitEgress("10.244.0.11", "10.244.0.14")
	var keys []string
	require.Eventually(t, func() bool {
		keys = append(keys, f.queued()...)
		return slices.Contains(keys, "west/default/db") && slices.Contains(keys, "west/default/web")
	}, 10*time.Second, time.Millisecond, "every key with mirrors is synced again")
	slices.Sort(keys)
	keys = slices.Compact(keys)
	var writes []string
	for _, k := range keys {
		writes = append(writes, f.sync(k)...)
	}
	assert.ElementsMatch(t, []string{"update endpointslices db-0-west", "update endpointslices db-1-west", "update endpointslices web-west"}, writes,
		"only the egress slices are rewritten")
	f.assertEgress("10.244.0.11", "10.244.0.14")
	assert.Equal(t, float64(2), egressGauge())

	// A third replica.
	f.setGateway(gatewaySlice("gw-2", v4, "10.244.0.9"))
	f.egressConverged("10.244.0.9", "10.244.0.11", "10.244.0.14")

	// The third replica goes; then no address is ready (a rollout gone
	// wrong): the mirrors keep the last addresses, and a sync changes
	// nothing.
	f.setGateway(gatewaySlice("gw-2", v4, "10.244.0.9!"))
	require.NoError(t, f.local.DiscoveryV1().EndpointSlices(gatewayEgress.Namespace).Delete(f.ctx, "gw-2", metav1.DeleteOptions{}))
	f.egressConverged("10.244.0.11", "10.244.0.14")
	f.setGateway(gatewaySlice("gw-1", v4, "10.244.0.14!", "10.244.0.11!"))
	require.Eventually(t, f.egressEmpty, 10*time.Second, time.Millisecond)
	assert.Equal(t, addrs("10.244.0.11", "10.244.0.14"), f.c.egressAddresses())
	assert.Equal(t, float64(2), egressGauge(), "the gauge counts the addresses in use")
	assert.Empty(t, f.sync("west/default/web"))
	assert.Empty(t, f.sync("west/default/db"))
	f.assertEgress("10.244.0.11", "10.244.0.14")
	// The Service's slices all gone: the same.
	require.NoError(t, f.local.DiscoveryV1().EndpointSlices(gatewayEgress.Namespace).Delete(f.ctx, "gw-1", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool { return len(f.c.egressSlices.GetStore().List()) == 0 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, addrs("10.244.0.11", "10.244.0.14"), f.c.egressAddresses())
	assert.Empty(t, f.sync("west/default/web"))

	// A ready pod again.
	f.setGateway(gatewaySlice("gw-1", v4, "10.244.0.20"))
	f.egressConverged("10.244.0.20")

	// To IPv6: the address type is immutable, so the slices are recreated.
	f.setGateway(gatewaySlice("gw-1", discoveryv1.AddressTypeIPv6, "fd00::20"))
	f.egressConverged("fd00::20")
	assert.Equal(t, discoveryv1.AddressTypeIPv6, f.slice("default", "web-west").AddressType)
}

// A per-pod mirror whose remote pod is gone (within PodGrace) is not ready
// on every gateway address.
func TestEgressServiceNotReadyPod(t *testing.T) {
	f := newFixture(t, fixtureOptions{egressService: gatewayEgress, podGrace: time.Minute,
		local: []runtime.Object{gatewaySlice("gw-1", discoveryv1.AddressTypeIPv4, "10.244.0.1", "10.244.0.2")}},
		west(exported("default", "db", "true", true, tcp("http", 80)), endpoints("default", "db", "db-0", "db-1")))
	f.converge("west/default/db")
	f.remote("west", endpoints("default", "db", "db-0"))
	f.converge("west/default/db")
	es := f.slice("default", "db-1-west")
	require.Len(t, es.Endpoints, 2)
	for _, ep := range es.Endpoints {
		assert.False(t, *ep.Conditions.Ready)
	}
}

// A controller started while the egress Service has no ready address keeps
// the addresses the mirrors point at; one that never knew any writes egress
// slices without endpoints, and fills them in once an address is ready.
func TestEgressServiceStartup(t *testing.T) {
	f := egressFixture(t, gatewaySlice("gw-1", discoveryv1.AddressTypeIPv4, "10.244.0.1", "10.244.0.2"))
	f.assertEgress("10.244.0.1", "10.244.0.2")
	state := slices.DeleteFunc(f.mirrorState(), func(o runtime.Object) bool {
		return o.(metav1.Object).GetNamespace() == gatewayEgress.Namespace
	})

	// Restart: the gateway has no ready pod meanwhile.
	g := newFixture(t, fixtureOptions{egressService: gatewayEgress,
		local: append(state, gatewaySlice("gw-1", discoveryv1.AddressTypeIPv4, "10.244.0.3!"))}, egressRemote())
	assert.Equal(t, addrs("10.244.0.1", "10.244.0.2"), g.c.egressAddresses())
	assert.Equal(t, float64(2), egressGauge())
	assert.Empty(t, g.sync("west/default/web"))
	assert.Empty(t, g.sync("west/default/db"))

	// A fresh start, no gateway yet.
	h := egressFixture(t)
	assert.Empty(t, h.c.egressAddresses())
	assert.Equal(t, float64(0), egressGauge())
	h.assertEgress()
	h.setGateway(gatewaySlice("gw-1", discoveryv1.AddressTypeIPv4, "10.244.0.5"))
	h.egressConverged("10.244.0.5")
}

// A fixed --egress-address is what every egress slice lists, as before.
func TestEgressFixedAddress(t *testing.T) {
	f := newFixture(t, fixtureOptions{}, west(exported("default", "web", "true", false, tcp("http", 80))))
	f.converge("west/default/web")
	es := f.slice("default", "web-west")
	require.Len(t, es.Endpoints, 1)
	assert.Equal(t, []string{egressIP.String()}, es.Endpoints[0].Addresses)
	assert.Equal(t, []netip.Addr{egressIP}, f.c.egressAddresses())
	assert.Equal(t, float64(1), egressGauge())
	assert.Nil(t, f.c.egressSlices)
}

// Exactly one egress source, and a valid one.
func TestNewEgressOptions(t *testing.T) {
	for _, o := range []Options{
		{},
		{EgressAddress: egressIP, EgressService: gatewayEgress},
		{EgressService: types.NamespacedName{Name: "x"}},
		{EgressService: types.NamespacedName{Namespace: "Bad", Name: "x"}},
		{EgressAddress: netip.MustParseAddr("ff02::1")},
	} {
		o.Cluster, o.Client, o.EgressPorts = "east", fake.NewClientset(), PortRange{First: 1, Last: 2}
		_, err := New(o)
		assert.Error(t, err, "%+v", o)
	}
	c, err := New(Options{Cluster: "east", Client: fake.NewClientset(), EgressPorts: PortRange{First: 1, Last: 2}, EgressService: gatewayEgress})
	require.NoError(t, err)
	assert.NotNil(t, c.egressSlices)
}

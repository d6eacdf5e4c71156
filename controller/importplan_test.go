package controller

import (
	"strconv"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

func sourceSlice(at discoveryv1.AddressType, port int32, addrs ...string) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{AddressType: at, Ports: []discoveryv1.EndpointPort{
		{Name: new("http"), Protocol: new(corev1.ProtocolTCP), Port: new(port)},
		{Name: new("debug"), Protocol: new(corev1.ProtocolTCP), Port: new(int32(6060))},
	}}
	for _, a := range addrs {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: new(true)}})
	}
	return es
}

func liveDerived(headless bool) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: DerivedName("shop", "web"), UID: "derived-uid"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.5.5", ClusterIPs: []string{"10.96.5.5"}}}
	if headless {
		s.Spec.ClusterIP, s.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
	}
	return s
}

func TestDerivedName(t *testing.T) {
	n := DerivedName("shop", "web")
	assert.Regexp(t, `^derived-[0-9a-f]{32}$`, n)
	assert.Equal(t, n, DerivedName("shop", "web"), "stable")
	assert.NotEqual(t, n, DerivedName("shop", "api"))
	assert.NotEqual(t, n, DerivedName("sho", "pweb"), "the namespace and name are kept apart")
}

func TestPlanImport(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	east := importSource{cluster: "east", created: t0.Add(time.Hour), service: testExportService(nil),
		slices: []*discoveryv1.EndpointSlice{sourceSlice(discoveryv1.AddressTypeIPv4, 8080, "10.1.0.5", "10.1.0.4")}}
	west := importSource{cluster: "west", created: t0, service: testExportService(nil),
		slices: []*discoveryv1.EndpointSlice{sourceSlice(discoveryv1.AddressTypeIPv4, 30001, "192.0.2.10")}}

	t.Run("no sources: nothing", func(t *testing.T) {
		p := planImport(importInput{ns: "shop", name: "web", derived: liveDerived(false)})
		assert.False(t, p.exists())
	})

	t.Run("before the derived Service: it, without slices", func(t *testing.T) {
		p := planImport(importInput{ns: "shop", name: "web", sources: []importSource{east, west}, importUID: "si-uid"})
		require.True(t, p.exists())
		assert.Equal(t, mcsv1beta1.ClusterSetIP, p.spec.Type)
		assert.Empty(t, p.spec.IPs)
		assert.Equal(t, []mcsv1beta1.ClusterStatus{{Cluster: "west"}, {Cluster: "east"}}, p.clusters, "in order of precedence")
		d := p.derived
		assert.Equal(t, DerivedName("shop", "web"), d.Name)
		assert.Equal(t, map[string]string{labels.ManagedBy: labels.ManagedByValue, labels.ServiceImport: "web", mcsv1beta1.LabelServiceName: "web"}, d.Labels)
		assert.Empty(t, d.Spec.ClusterIP, "allocated")
		assert.Nil(t, d.Spec.Selector)
		assert.Equal(t, []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}, d.Spec.Ports)
		require.Len(t, d.OwnerReferences, 1)
		assert.Equal(t, "ServiceImport", d.OwnerReferences[0].Kind)
		assert.Empty(t, p.slices)
	})

	t.Run("with the derived Service: its ClusterIP and a slice per cluster", func(t *testing.T) {
		p := planImport(importInput{ns: "shop", name: "web", sources: []importSource{east, west}, derived: liveDerived(false)})
		assert.Equal(t, []string{"10.96.5.5"}, p.spec.IPs)
		require.Len(t, p.slices, 2)
		base := DerivedName("shop", "web")
		e := p.slices[base+"-east"]
		require.NotNil(t, e)
		assert.Equal(t, "east", e.Labels[mcsv1beta1.LabelSourceCluster])
		assert.Equal(t, "web", e.Labels[mcsv1beta1.LabelServiceName])
		assert.Equal(t, base, e.Labels[discoveryv1.LabelServiceName])
		assert.Equal(t, labels.EndpointSliceManagedBy, e.Labels[discoveryv1.LabelManagedBy])
		assert.Equal(t, []discoveryv1.EndpointPort{{Name: new("http"), Protocol: new(corev1.ProtocolTCP), Port: new(int32(8080))}}, e.Ports,
			"the import's ports only, at the source's port")
		require.Len(t, e.Endpoints, 2)
		assert.Equal(t, "10.1.0.4", e.Endpoints[0].Addresses[0], "sorted")
		assert.Equal(t, types.UID("derived-uid"), e.OwnerReferences[0].UID)
		w := p.slices[base+"-west"]
		require.NotNil(t, w)
		assert.Equal(t, int32(30001), *w.Ports[0].Port)
		assert.Equal(t, "192.0.2.10", w.Endpoints[0].Addresses[0])
	})

	t.Run("headless", func(t *testing.T) {
		h := func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }
		src := west
		src.service = testExportService(h)
		src.slices = []*discoveryv1.EndpointSlice{sourceSlice(discoveryv1.AddressTypeIPv4, 80, "10.2.0.1")}
		src.slices[0].Endpoints[0].Hostname = new("web-0")
		p := planImport(importInput{ns: "shop", name: "web", sources: []importSource{src}})
		assert.Equal(t, mcsv1beta1.Headless, p.spec.Type)
		assert.Equal(t, corev1.ClusterIPNone, p.derived.Spec.ClusterIP)
		p = planImport(importInput{ns: "shop", name: "web", sources: []importSource{src}, derived: liveDerived(true)})
		assert.Empty(t, p.spec.IPs)
		es := p.slices[DerivedName("shop", "web")+"-west"]
		require.NotNil(t, es)
		assert.Equal(t, new("web-0"), es.Endpoints[0].Hostname, "hostnames are kept")

		// A ClusterIP derived Service cannot become headless in place.
		p = planImport(importInput{ns: "shop", name: "web", sources: []importSource{src}, derived: liveDerived(false)})
		assert.True(t, p.replace)
		assert.Empty(t, p.slices)
	})

	t.Run("two address types, and a big source", func(t *testing.T) {
		src := east
		v4 := sourceSlice(discoveryv1.AddressTypeIPv4, 80)
		for i := range maxEndpointsPerSlice + 5 {
			v4.Endpoints = append(v4.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.3." + strconv.Itoa(i/250) + "." + strconv.Itoa(i%250)}})
		}
		src.slices = []*discoveryv1.EndpointSlice{v4, sourceSlice(discoveryv1.AddressTypeIPv6, 80, "fd00::1"), v4}
		p := planImport(importInput{ns: "shop", name: "web", sources: []importSource{src}, derived: liveDerived(false)})
		base := DerivedName("shop", "web") + "-east"
		require.Len(t, p.slices, 3)
		assert.Len(t, p.slices[base].Endpoints, maxEndpointsPerSlice)
		assert.Len(t, p.slices[base+"-1"].Endpoints, 5, "each endpoint once, the rest in a second slice")
		assert.Equal(t, discoveryv1.AddressTypeIPv6, p.slices[base+"-ipv6"].AddressType)
	})

	t.Run("same port name, another number: the loser's endpoints do not take the port", func(t *testing.T) {
		// StrictPortConflict of the MCS conformance suite: west is older
		// and exports tcp/42, east tcp/4242 under the same name.
		older := west
		older.service = testExportService(func(s *corev1.Service) { s.Spec.Ports[0].Name, s.Spec.Ports[0].Port = "tcp", 42 })
		older.slices = []*discoveryv1.EndpointSlice{{AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.10"}}},
			Ports:     []discoveryv1.EndpointPort{{Name: new("tcp"), Protocol: new(corev1.ProtocolTCP), Port: new(int32(30042))}}}}
		newer := east
		newer.service = testExportService(func(s *corev1.Service) { s.Spec.Ports[0].Name, s.Spec.Ports[0].Port = "tcp", 4242 })
		newer.slices = []*discoveryv1.EndpointSlice{{AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.9"}}},
			Ports:     []discoveryv1.EndpointPort{{Name: new("tcp"), Protocol: new(corev1.ProtocolTCP), Port: new(int32(4242))}}}}
		p := planImport(importInput{ns: "shop", name: "web", sources: []importSource{older, newer}, derived: liveDerived(false)})
		assert.Equal(t, []mcsv1beta1.ServicePort{{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: 42}}, p.spec.Ports)
		base := DerivedName("shop", "web")
		require.Contains(t, p.slices, base+"-west")
		assert.Len(t, p.slices[base+"-west"].Ports, 1, "the winner serves tcp")
		require.Contains(t, p.slices, base+"-east")
		assert.Empty(t, p.slices[base+"-east"].Ports, "the loser's endpoints take no traffic of port tcp")
	})

	t.Run("a port conflict: the clashing port is left out", func(t *testing.T) {
		src := east
		src.service = testExportService(func(s *corev1.Service) { s.Spec.Ports[0].Protocol = corev1.ProtocolUDP })
		p := planImport(importInput{ns: "shop", name: "web", sources: []importSource{west, src}, derived: liveDerived(false)})
		require.NotEmpty(t, p.merged.Conflicts)
		assert.Equal(t, []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}, p.spec.Ports)
	})
}

package gateway

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/fake"
)

func ptr[T any](v T) *T { return &v }

func exportedService(name, clusterIP string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{labels.Exported: labels.ExportGateway}},
		Spec:       corev1.ServiceSpec{ClusterIP: clusterIP, Ports: ports},
	}
}

type ep struct {
	addr, host string
	ready      *bool
}

func endpointSlice(svc, name, portName string, port int32, eps ...ep) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Port: ptr(port), Protocol: ptr(corev1.ProtocolTCP)}},
	}
	if portName != "" {
		es.Ports[0].Name = ptr(portName)
	}
	for _, e := range eps {
		endpoint := discoveryv1.Endpoint{Addresses: []string{e.addr}, Conditions: discoveryv1.EndpointConditions{Ready: e.ready}}
		if e.host != "" {
			endpoint.Hostname = ptr(e.host)
		}
		es.Endpoints = append(es.Endpoints, endpoint)
	}
	return es
}

// resolve decides from a Service and its EndpointSlices alone.
func TestResolve(t *testing.T) {
	http := corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}
	yes, no := ptr(true), ptr(false)
	web := exportedService("web", "10.96.0.1", http, corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP})
	headless := exportedService("db", corev1.ClusterIPNone, http)
	flat := exportedService("flat", "10.96.0.2", http)
	flat.Labels[labels.Exported] = labels.ExportFlat
	mirror := exportedService("web-paris", "10.96.0.3", http)
	mirror.Labels[labels.MirroredService] = labels.MirroredServiceValue
	unnamed := exportedService("single", "10.96.0.4", corev1.ServicePort{Port: 80})
	publish := exportedService("db2", corev1.ClusterIPNone, http)
	publish.Spec.PublishNotReadyAddresses = true

	webSlices := []*discoveryv1.EndpointSlice{
		endpointSlice("web", "web-a", "http", 8080, ep{addr: "10.0.0.1", ready: yes}, ep{addr: "10.0.0.2", ready: no}),
		endpointSlice("web", "web-b", "http", 8080, ep{addr: "10.0.0.3"}, ep{addr: "not-an-ip", ready: yes}),
		endpointSlice("web", "web-c", "metrics", 9090, ep{addr: "10.0.0.9", ready: yes}),
	}
	dbSlices := []*discoveryv1.EndpointSlice{
		endpointSlice("db", "db-a", "http", 5432, ep{addr: "10.0.1.0", host: "db-0", ready: yes}, ep{addr: "10.0.1.1", host: "db-1", ready: no}),
		endpointSlice("db", "db-b", "http", 5432, ep{addr: "fd00::2", host: "db-2", ready: yes}),
	}
	last := func(n int) int { return n - 1 }
	first := func(int) int { return 0 }

	for _, tc := range []struct {
		name   string
		svc    *corev1.Service
		slices []*discoveryv1.EndpointSlice
		dest   Destination
		pick   func(int) int
		want   string // the target, or
		reason Reason
	}{
		{name: "no Service", dest: Destination{Service: "web", Port: 80}, reason: ReasonNotExported},
		{name: "flat mode", svc: flat, slices: webSlices, dest: Destination{Service: "flat", Port: 80}, reason: ReasonNotExported},
		{name: "a mirror", svc: mirror, slices: webSlices, dest: Destination{Service: "web-paris", Port: 80}, reason: ReasonNotExported},
		{name: "port not exported", svc: web, slices: webSlices, dest: Destination{Service: "web", Port: 81}, reason: ReasonPortNotExposed},
		{name: "a UDP port", svc: web, slices: webSlices, dest: Destination{Service: "web", Port: 53}, reason: ReasonPortNotExposed},
		{name: "pod of a ClusterIP Service", svc: web, slices: webSlices, dest: Destination{Service: "web", Host: "web-0", Port: 80}, reason: ReasonPodNotExported},
		{name: "no such pod", svc: headless, slices: dbSlices, dest: Destination{Service: "db", Host: "db-9", Port: 80}, reason: ReasonPodNotExported},
		{name: "pod not ready", svc: headless, slices: dbSlices, dest: Destination{Service: "db", Host: "db-1", Port: 80}, reason: ReasonNoEndpoint},
		{name: "no slices", svc: web, dest: Destination{Service: "web", Port: 80}, reason: ReasonNoEndpoint},
		{name: "first ready endpoint, by the slice's port of the same name", svc: web, slices: webSlices, dest: Destination{Service: "web", Port: 80}, pick: first, want: "10.0.0.1:8080"},
		{name: "last ready endpoint: ready unknown counts as ready, bad addresses and other ports skipped", svc: web, slices: webSlices, dest: Destination{Service: "web", Port: 80}, pick: last, want: "10.0.0.3:8080"},
		{name: "pod", svc: headless, slices: dbSlices, dest: Destination{Service: "db", Host: "db-0", Port: 80}, want: "10.0.1.0:5432"},
		{name: "IPv6 pod", svc: headless, slices: dbSlices, dest: Destination{Service: "db", Host: "db-2", Port: 80}, want: "[fd00::2]:5432"},
		{name: "not ready, published anyway", svc: publish, slices: dbSlices, dest: Destination{Service: "db2", Host: "db-1", Port: 80}, want: "10.0.1.1:5432"},
		{name: "single unnamed port", svc: unnamed, slices: []*discoveryv1.EndpointSlice{endpointSlice("single", "s", "", 8000, ep{addr: "10.0.2.1"})}, dest: Destination{Service: "single", Port: 80}, want: "10.0.2.1:8000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pick := tc.pick
			if pick == nil {
				pick = first
			}
			// Selector-less Services opted in: what is tested here is
			// the choice among endpoints (trust_endpoints_test.go: which
			// endpoints may be chosen).
			got, reason := resolve(tc.svc, tc.slices, tc.dest, pick, &EndpointPolicy{Selectorless: []string{"*"}})
			assert.Equal(t, tc.reason, reason)
			if tc.want != "" {
				assert.Equal(t, netip.MustParseAddrPort(tc.want), got)
			}
		})
	}
}

// Exports follows the cluster: Services and endpoints that come and go,
// and a Service destination spread over every ready endpoint.
func TestExportsFollowsCluster(t *testing.T) {
	http := corev1.ServicePort{Name: "http", Port: 80}
	unexported := exportedService("secret", "10.96.0.9", http)
	delete(unexported.Labels, labels.Exported)
	client := fake.NewClientset(
		exportedService("web", "10.96.0.1", http),
		endpointSlice("web", "web-a", "http", 8080, ep{addr: "10.0.0.1"}, ep{addr: "10.0.0.2"}),
		endpointSlice("web", "web-b", "http", 8080, ep{addr: "10.0.0.3"}),
		unexported, endpointSlice("secret", "secret-a", "http", 8080, ep{addr: "10.0.9.1"}),
	)
	sel, err := k8slabels.Parse(labels.DefaultExportSelector)
	require.NoError(t, err)
	exports := NewExports(client, sel)
	exports.SetPolicy(EndpointPolicy{Selectorless: []string{"*"}})
	assert.False(t, exports.HasSynced())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, exports.Run(ctx))
	assert.True(t, exports.HasSynced())
	require.Eventually(t, func() bool { return value(exportedServices) == 1 }, 5*time.Second, 5*time.Millisecond)

	webDest := Destination{Namespace: "default", Service: "web", Port: 80}
	seen := map[string]int{}
	for range 300 {
		got, reason := exports.Resolve(webDest)
		require.Empty(t, reason)
		seen[got.String()]++
	}
	assert.Len(t, seen, 3, "a Service destination goes to every ready endpoint: %v", seen)
	_, reason := exports.Resolve(Destination{Namespace: "default", Service: "secret", Port: 80})
	assert.Equal(t, ReasonNotExported, reason)

	// Endpoints go: nothing ready.
	slices := client.DiscoveryV1().EndpointSlices("default")
	for _, name := range []string{"web-a", "web-b"} {
		require.NoError(t, slices.Delete(ctx, name, metav1.DeleteOptions{}))
	}
	require.Eventually(t, func() bool { _, r := exports.Resolve(webDest); return r == ReasonNoEndpoint }, 5*time.Second, 5*time.Millisecond)

	// A Service exported later, with its endpoints.
	_, err = client.CoreV1().Services("default").Create(ctx, exportedService("late", corev1.ClusterIPNone, http), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = slices.Create(ctx, endpointSlice("late", "late-a", "http", 7000, ep{addr: "10.0.3.1", host: "late-0"}), metav1.CreateOptions{})
	require.NoError(t, err)
	lateDest := Destination{Namespace: "default", Service: "late", Host: "late-0", Port: 80}
	require.Eventually(t, func() bool { got, _ := exports.Resolve(lateDest); return got.String() == "10.0.3.1:7000" }, 5*time.Second, 5*time.Millisecond)
	// The gauge is set by the informer's event handler, which runs after
	// the store Resolve reads has changed: wait for it.
	require.Eventually(t, func() bool { return value(exportedServices) == 2 }, 5*time.Second, 5*time.Millisecond)

	// The Service goes.
	require.NoError(t, client.CoreV1().Services("default").Delete(ctx, "late", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool { _, r := exports.Resolve(lateDest); return r == ReasonNotExported }, 5*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { return value(exportedServices) == 1 }, 5*time.Second, 5*time.Millisecond)
}

package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// gatewaySlice is a hand-written EndpointSlice of east's headless Service
// gwNS/gw-egress, as the EndpointSlice controller writes one for the
// gateway's pods; an address ending in "!" is not ready.
func gatewaySlice(gwNS, name string, at discoveryv1.AddressType, addrs ...string) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: gwNS, Name: name, Labels: map[string]string{
			discoveryv1.LabelServiceName: "gw-egress", discoveryv1.LabelManagedBy: "e2e.mcmirror.dev",
		}},
		AddressType: at,
	}
	for _, a := range addrs {
		ready := !strings.HasSuffix(a, "!")
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{strings.TrimSuffix(a, "!")}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
		})
	}
	return es
}

// gatewayEgress writes east's headless Service gwNS/gw-egress, its spec
// given the fields extra, and its slices (east runs no EndpointSlice
// controller). A re-run (-count) finds the slices of the run before: they
// are made afresh, and deleted when t ends. It returns them as created.
func gatewayEgress(t *testing.T, gwNS, extra string, slices ...*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	t.Helper()
	ctx := context.Background()
	east := env.Cluster("east")
	require.NoError(t, east.Apply(ctx, fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata: {name: gw-egress, namespace: %s}
spec: {clusterIP: None%s}
`, gwNS, extra)))
	cl := east.Client.DiscoveryV1().EndpointSlices(gwNS)
	var out []*discoveryv1.EndpointSlice
	for _, es := range slices {
		if err := cl.Delete(ctx, es.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			require.NoError(t, err)
		}
		created, err := cl.Create(ctx, es, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = cl.Delete(context.Background(), es.Name, metav1.DeleteOptions{}) })
		out = append(out, created)
	}
	return out
}

// assertEgressSlices checks that every ClusterIP mirror of ns (per-pod
// mirrors included) has an EndpointSlice listing want, one endpoint each,
// at its recorded egress ports, and that the headless mirrors' slices are
// still their per-pod mirrors'.
func assertEgressSlices(c *assert.CollectT, ctx context.Context, ns string, m map[string]corev1.Service, want []string) {
	list, err := env.Cluster("east").Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelManagedBy + "=" + labels.EndpointSliceManagedBy})
	require.NoError(c, err)
	byService := map[string]discoveryv1.EndpointSlice{}
	for _, s := range list.Items {
		byService[s.Labels[discoveryv1.LabelServiceName]] = s
	}
	for name, s := range m {
		es, ok := byService[name]
		if !assert.True(c, ok, "%s has an EndpointSlice", name) {
			continue
		}
		if s.Spec.ClusterIP == corev1.ClusterIPNone {
			for _, ep := range es.Endpoints {
				assert.NotNil(c, ep.Hostname, "%s: a headless mirror's endpoints are its per-pod mirrors", name)
			}
			continue
		}
		var got []string
		for _, ep := range es.Endpoints {
			require.Len(c, ep.Addresses, 1)
			got = append(got, ep.Addresses[0])
		}
		assert.Equal(c, want, got, "%s: the egress addresses", name)
		assertSlicePorts(c, s, es)
	}
}

// With --egress-service, the real controller points every mirror at every
// ready address of a headless Service of east, follows a changed address,
// and keeps the last ones while none is ready.
func TestEgressService(t *testing.T) {
	const ns, gwNS = "e2e-egress-svc", "e2e-egress-gw"
	ctx := setUp(t, ns, "east", "west")
	namespace(t, gwNS, "east")
	east, west := env.Cluster("east"), env.Cluster("west")

	// The gateway's egress Service, headless, and its EndpointSlice.
	slice := func(addrs ...string) *discoveryv1.EndpointSlice {
		return gatewaySlice(gwNS, "gw-egress-1", discoveryv1.AddressTypeIPv4, addrs...)
	}
	gw := gatewayEgress(t, gwNS, "", slice("192.0.2.21", "192.0.2.22", "192.0.2.29!"))[0]
	update := func(addrs ...string) {
		t.Helper()
		es := slice(addrs...)
		es.ResourceVersion = gw.ResourceVersion
		var err error
		gw, err = east.Client.DiscoveryV1().EndpointSlices(gwNS).Update(ctx, es, metav1.UpdateOptions{})
		require.NoError(t, err)
	}

	require.NoError(t, west.Apply(ctx, statefulSet(ns, "nginx-svc", 2, "true")))
	require.NoError(t, west.Apply(ctx, clusterIPService(ns, "web", 80, "true")))

	ctl := env.StartFleet(t, harness.FleetOptions{Local: "east", Remotes: []string{"west"}, Parts: harness.FleetController,
		Controller: harness.ControllerOptions{EgressService: gwNS + "/gw-egress", Metrics: true}}).Controller
	proc, metrics := ctl.Process, ctl.MetricsAddr

	expect := func(want ...string) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			m := mirrors(c, ns)
			assert.Equal(c, []string{"nginx-svc-set-0-west", "nginx-svc-set-1-west", "nginx-svc-west", "web-west"}, names(m))
			assertEgressSlices(c, ctx, ns, m, want)
			assert.Equal(c, float64(len(want)), harness.MetricValue(c, "http://"+metrics+"/metrics", "coredns_mcmirror_controller_egress_addresses", nil))
		}, wait, tick, "every egress slice lists %v", want)
	}
	expect("192.0.2.21", "192.0.2.22")

	// A gateway pod is replaced: .22 goes, .23 comes; every mirror follows.
	update("192.0.2.23", "192.0.2.21")
	expect("192.0.2.21", "192.0.2.23")

	// No ready address: the mirrors keep the last ones.
	update("192.0.2.23!", "192.0.2.21!")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, proc.Log(c), "Egress Service has no ready address")
	}, wait, tick)
	expect("192.0.2.21", "192.0.2.23")
}

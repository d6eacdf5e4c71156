package gateway

import (
	"net/netip"
	"testing"

	"github.com/mcmirror/mcmirror/internal/endpointpolicy"
	"github.com/mcmirror/mcmirror/internal/labels"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// selected is an exported Service of namespace shop with a selector, as
// an application's Service is.
func selected(name string) *corev1.Service {
	svc := exportedService(name, "10.96.0.20", corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP})
	svc.Namespace = "shop"
	svc.Spec.Selector = map[string]string{"app": name}
	return svc
}

// podSlice is the EndpointSlice the EndpointSlice controller writes for
// svc: its pods, each with its targetRef; edit changes it.
func podSlice(svc *corev1.Service, addr string, edit ...func(*discoveryv1.EndpointSlice)) *discoveryv1.EndpointSlice {
	es := endpointSlice(svc.Name, svc.Name+"-abcde", "http", 8080, ep{addr: addr, ready: new(true)})
	es.Namespace = svc.Namespace
	es.Labels[discoveryv1.LabelManagedBy] = labels.EndpointSliceControllerName
	es.Endpoints[0].TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: svc.Namespace, Name: svc.Name + "-7d9f-x2x4q"}
	for _, f := range edit {
		f(es)
	}
	return es
}

// The ingress dials, by default, only Pods of the Service's namespace that
// the EndpointSlice controller listed: a hand-written slice, a targetRef
// elsewhere, a selector-less Service, an address that is no pod's are all
// refused, each counted by its reason, and the destination has no
// endpoint to dial.
func TestEndpointPolicy(t *testing.T) {
	web := selected("web")
	legacy := selected("legacy") // selector-less, with a hand-written slice
	legacy.Spec.Selector = nil
	handWritten := func(es *discoveryv1.EndpointSlice) {
		es.Labels[discoveryv1.LabelManagedBy] = "someone"
		es.Endpoints[0].TargetRef = nil
	}
	target := func(kind, ns string) func(*discoveryv1.EndpointSlice) {
		return func(es *discoveryv1.EndpointSlice) {
			es.Endpoints[0].TargetRef = &corev1.ObjectReference{Kind: kind, Namespace: ns, Name: "x"}
		}
	}
	infra := []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("192.168.0.0/24")}

	for _, tc := range []struct {
		name   string
		svc    *corev1.Service
		slice  *discoveryv1.EndpointSlice
		policy EndpointPolicy
		refuse string // the reason, or "" when the endpoint is dialled
	}{
		{name: "a pod of the Service's namespace, from the EndpointSlice controller", svc: web, slice: podSlice(web, "10.0.0.1")},
		{name: "IPv6 pod", svc: web, slice: podSlice(web, "fd00::1")},
		{name: "a pod of another namespace", svc: web, slice: podSlice(web, "10.0.0.1", target("Pod", "kube-system")), refuse: endpointpolicy.NotAPod},
		{name: "no targetRef", svc: web, slice: podSlice(web, "10.0.0.1", target("", "")), refuse: endpointpolicy.NotAPod},
		{name: "a node as target", svc: web, slice: podSlice(web, "10.0.0.1", target("Node", "")), refuse: endpointpolicy.NotAPod},
		{name: "a slice of the Service's name in another namespace", svc: web, slice: podSlice(web, "10.0.0.1", func(es *discoveryv1.EndpointSlice) { es.Namespace = "tenant" }), refuse: endpointpolicy.NotAPod},
		{name: "a hand-written slice naming a pod", svc: web, slice: podSlice(web, "10.0.0.1", func(es *discoveryv1.EndpointSlice) { es.Labels[discoveryv1.LabelManagedBy] = "someone" }), refuse: endpointpolicy.Unmanaged},
		{name: "the EndpointSlice mirroring controller's slice (from Endpoints anyone with edit once could write)", svc: web, slice: podSlice(web, "10.0.0.1", func(es *discoveryv1.EndpointSlice) {
			es.Labels[discoveryv1.LabelManagedBy] = "endpointslicemirroring-controller.k8s.io"
		}), refuse: endpointpolicy.Unmanaged},
		{name: "selector-less, not opted in: the API server's ClusterIP", svc: legacy, slice: podSlice(legacy, "10.96.0.1", handWritten), refuse: endpointpolicy.Selectorless},
		{name: "selector-less, not opted in: another namespace's pod", svc: legacy, slice: podSlice(legacy, "10.0.9.9", handWritten, target("Pod", "kube-system")), refuse: endpointpolicy.Selectorless},
		{name: "selector-less, opted in by name", svc: legacy, slice: podSlice(legacy, "10.0.5.5", handWritten), policy: EndpointPolicy{Selectorless: []string{"shop/legacy"}}},
		{name: "selector-less, opted in by namespace", svc: legacy, slice: podSlice(legacy, "10.0.5.5", handWritten), policy: EndpointPolicy{Selectorless: []string{"shop/*"}}},
		{name: "selector-less, opted in: all", svc: legacy, slice: podSlice(legacy, "10.0.5.5", handWritten), policy: EndpointPolicy{Selectorless: []string{"*"}}},
		{name: "selector-less, another Service opted in", svc: legacy, slice: podSlice(legacy, "10.0.5.5", handWritten), policy: EndpointPolicy{Selectorless: []string{"shop/other", "tenant/*"}}, refuse: endpointpolicy.Selectorless},
		{name: "selector-less, opted in, in a denied range", svc: legacy, slice: podSlice(legacy, "10.96.0.1", handWritten), policy: EndpointPolicy{Selectorless: []string{"*"}, Deny: infra}, refuse: endpointpolicy.DeniedCIDR},
		{name: "a pod in a denied range (a host-network pod on a node)", svc: web, slice: podSlice(web, "192.168.0.7"), policy: EndpointPolicy{Deny: infra}, refuse: endpointpolicy.DeniedCIDR},
		{name: "loopback", svc: legacy, slice: podSlice(legacy, "127.0.0.1", handWritten), policy: EndpointPolicy{Selectorless: []string{"*"}}, refuse: endpointpolicy.Address},
		{name: "loopback, even a pod's", svc: web, slice: podSlice(web, "127.0.0.1"), refuse: endpointpolicy.Address},
		{name: "IPv6 loopback", svc: web, slice: podSlice(web, "::1"), refuse: endpointpolicy.Address},
		{name: "IPv4-mapped loopback", svc: web, slice: podSlice(web, "::ffff:127.0.0.1"), refuse: endpointpolicy.Address},
		{name: "link-local: the cloud's metadata service", svc: legacy, slice: podSlice(legacy, "169.254.169.254", handWritten), policy: EndpointPolicy{Selectorless: []string{"*"}}, refuse: endpointpolicy.Address},
		{name: "IPv6 link-local", svc: web, slice: podSlice(web, "fe80::1"), refuse: endpointpolicy.Address},
		{name: "unspecified", svc: web, slice: podSlice(web, "0.0.0.0"), refuse: endpointpolicy.Address},
		{name: "IPv6 unspecified", svc: web, slice: podSlice(web, "::"), refuse: endpointpolicy.Address},
		{name: "multicast", svc: web, slice: podSlice(web, "224.0.0.251"), refuse: endpointpolicy.Address},
		{name: "IPv6 multicast", svc: web, slice: podSlice(web, "ff02::1"), refuse: endpointpolicy.Address},
		{name: "broadcast", svc: web, slice: podSlice(web, "255.255.255.255"), refuse: endpointpolicy.Address},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Destination{Namespace: "shop", Service: tc.svc.Name, Port: 80}
			var refused []string
			all, ready, reason := endpoints(tc.svc, []*discoveryv1.EndpointSlice{tc.slice}, d, &tc.policy, func(r string) { refused = append(refused, r) })
			require.Empty(t, reason)
			before := value(endpointsRefused.WithLabelValues(tc.refuse))
			got, why := resolve(tc.svc, []*discoveryv1.EndpointSlice{tc.slice}, d, func(int) int { return 0 }, &tc.policy)
			if tc.refuse == "" {
				want := netip.AddrPortFrom(netip.MustParseAddr(tc.slice.Endpoints[0].Addresses[0]), 8080)
				assert.Equal(t, []netip.AddrPort{want}, all)
				assert.Equal(t, []netip.AddrPort{want}, ready)
				assert.Empty(t, refused)
				assert.Empty(t, why)
				assert.Equal(t, want, got)
				return
			}
			assert.Empty(t, all, "refused endpoints are no stream's either")
			assert.Empty(t, ready)
			assert.Equal(t, []string{tc.refuse}, refused)
			assert.Equal(t, ReasonNoEndpoint, why, "nothing to dial")
			assert.Equal(t, before+1, value(endpointsRefused.WithLabelValues(tc.refuse)), "counted by its reason")
		})
	}
}

package controller

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/mcmirror/mcmirror/internal/endpointpolicy"
	"github.com/mcmirror/mcmirror/internal/labels"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// podSlice is a slice of shop/web as the EndpointSlice controller writes
// it: each address a ready Pod of the Service's namespace.
func podSlice(at discoveryv1.AddressType, addrs ...string) *discoveryv1.EndpointSlice {
	es := sourceSlice(at, 8080, addrs...)
	es.Namespace = "shop"
	es.Labels = map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: labels.EndpointSliceControllerName}
	for i := range es.Endpoints {
		es.Endpoints[i].TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: fmt.Sprintf("web-%d", i)}
	}
	return es
}

// planned lists the addresses of the import's slice name.
func planned(p importPlan, name string) []string { return endpointsOf(p.slices[name]) }

// endpointsOf lists the addresses of every endpoint of es (none when nil).
func endpointsOf(es *discoveryv1.EndpointSlice) []string {
	var out []string
	if es != nil {
		for _, ep := range es.Endpoints {
			out = append(out, ep.Addresses...)
		}
	}
	return out
}

// Of a linked cluster's flat-mode export, the import carries only what
// the endpoint policy believes (the gateway ingress's rule): Pods of the
// Service's namespace in slices of the EndpointSlice controller; a
// hand-written slice, a target elsewhere, an address never believed, a
// selector-less Service not opted in are left out and counted. The
// local export and a gateway-mode remote's mirror slices are carried as
// they are.
func TestPlanImportEndpointPolicy(t *testing.T) {
	handWritten := podSlice(discoveryv1.AddressTypeIPv4, "10.9.0.1")
	handWritten.Labels[discoveryv1.LabelManagedBy] = "tenant"
	elsewhere := podSlice(discoveryv1.AddressTypeIPv4, "10.9.0.2")
	elsewhere.Endpoints[0].TargetRef.Namespace = "kube-system"
	node := podSlice(discoveryv1.AddressTypeIPv4, "192.168.0.7")
	node.Endpoints[0].TargetRef = &corev1.ObjectReference{Kind: "Node", Name: "node-1"}
	never := podSlice(discoveryv1.AddressTypeIPv4, "127.0.0.1", "169.254.169.254", "224.0.0.1", "0.0.0.0")
	v6 := podSlice(discoveryv1.AddressTypeIPv6, "fd00::5", "fe80::1")
	twoAddrs := podSlice(discoveryv1.AddressTypeIPv4, "10.1.0.8")
	twoAddrs.Endpoints[0].Addresses = append(twoAddrs.Endpoints[0].Addresses, "127.0.0.1")
	good := podSlice(discoveryv1.AddressTypeIPv4, "10.1.0.5", "10.1.0.6")

	west := importSource{cluster: "west", service: testExportService(func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "web"} }),
		screened: true, slices: []*discoveryv1.EndpointSlice{good, handWritten, elsewhere, node, never, v6, twoAddrs}}
	// The local export's slices are its own namespace's: carried as
	// they are, hand-written or not.
	local := importSource{cluster: "east", service: testExportService(nil), slices: []*discoveryv1.EndpointSlice{handWritten}}
	base := DerivedName("shop", "web")
	plan := func(policy endpointpolicy.Policy, sources ...importSource) importPlan {
		return planImport(importInput{ns: "shop", name: "web", sources: sources, derived: liveDerived(false), policy: &policy})
	}

	p := plan(endpointpolicy.Policy{}, west, local)
	assert.Equal(t, []string{"10.1.0.5", "10.1.0.6", "10.1.0.8"}, planned(p, base+"-west"), "the believed pods only, each at its first address")
	assert.Equal(t, []string{"fd00::5"}, planned(p, base+"-west-ipv6"))
	assert.Equal(t, []string{"10.9.0.1"}, planned(p, base+"-east"), "the local export as it is")
	assert.Equal(t, refusals{"west": {
		endpointpolicy.Unmanaged: 1, endpointpolicy.NotAPod: 2, endpointpolicy.Address: 5,
	}}, p.refused)

	// Denied ranges are never carried either.
	p = plan(endpointpolicy.Policy{Deny: []netip.Prefix{netip.MustParsePrefix("10.1.0.4/31")}}, west)
	assert.Equal(t, []string{"10.1.0.6", "10.1.0.8"}, planned(p, base+"-west"))
	assert.Equal(t, 1, p.refused["west"][endpointpolicy.DeniedCIDR])

	// A selector-less Service: nothing, unless opted in; then its
	// hand-written slices are, but still no address never believed.
	legacy := west
	legacy.service = testExportService(nil)
	p = plan(endpointpolicy.Policy{}, legacy)
	assert.Empty(t, planned(p, base+"-west"))
	require.Contains(t, p.slices, base+"-west", "the cluster keeps its (empty) slice")
	assert.Equal(t, refusals{"west": {endpointpolicy.Selectorless: 7, endpointpolicy.Address: 5}}, p.refused)
	p = plan(endpointpolicy.Policy{Selectorless: []string{"shop/web"}}, legacy)
	assert.Equal(t, []string{"10.1.0.5", "10.1.0.6", "10.1.0.8", "10.9.0.1", "10.9.0.2", "192.168.0.7"}, planned(p, base+"-west"))
	assert.Equal(t, refusals{"west": {endpointpolicy.Address: 5}}, p.refused)

	// A refused endpoint does not hide a believed one of its address.
	shadow := podSlice(discoveryv1.AddressTypeIPv4, "10.1.0.5")
	shadow.Labels[discoveryv1.LabelManagedBy] = "tenant"
	first := west
	first.slices = []*discoveryv1.EndpointSlice{shadow, good}
	p = plan(endpointpolicy.Policy{}, first)
	assert.Equal(t, []string{"10.1.0.5", "10.1.0.6"}, planned(p, base+"-west"))
	assert.Equal(t, refusals{"west": {endpointpolicy.Unmanaged: 1}}, p.refused)
}

// All sources together carry at most maxEndpoints, shared fairly: a
// cluster that offers many cannot crowd out one that offers few; one
// over its part keeps its ready endpoints first.
func TestPlanImportBound(t *testing.T) {
	addrs := func(prefix string, n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("%s.%d", prefix, i+10))
		}
		return out
	}
	flood := podSlice(discoveryv1.AddressTypeIPv4, addrs("10.9.0", 20)...)
	// The lowest addresses are not ready: they go first.
	flood.Endpoints[0].Conditions.Ready = new(false)
	flood.Endpoints[1].Conditions.Ready = new(false)
	web := testExportService(func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "web"} })
	west := importSource{cluster: "west", service: web, screened: true, slices: []*discoveryv1.EndpointSlice{flood}}
	paris := importSource{cluster: "paris", service: web, screened: true,
		slices: []*discoveryv1.EndpointSlice{podSlice(discoveryv1.AddressTypeIPv4, addrs("10.2.0", 3)...)}}
	local := importSource{cluster: "east", service: web, slices: []*discoveryv1.EndpointSlice{sourceSlice(discoveryv1.AddressTypeIPv4, 80, addrs("10.0.0", 4)...)}}
	base := DerivedName("shop", "web")

	p := planImport(importInput{ns: "shop", name: "web", sources: []importSource{west, paris, local}, derived: liveDerived(false),
		policy: &endpointpolicy.Policy{}, maxEndpoints: 12})
	assert.Len(t, planned(p, base+"-paris"), 3, "under its part: all of it")
	assert.Len(t, planned(p, base+"-east"), 4)
	w := planned(p, base+"-west")
	assert.Len(t, w, 5, "the rest: 12 - 3 - 4")
	assert.Equal(t, addrs("10.9.0", 7)[2:], w, "ready first, then the lowest addresses")
	assert.Equal(t, refusals{"west": {refusedLimit: 15}}, p.refused)

	p = planImport(importInput{ns: "shop", name: "web", sources: []importSource{west, paris, local}, derived: liveDerived(false),
		policy: &endpointpolicy.Policy{}, maxEndpoints: 6})
	assert.Len(t, planned(p, base+"-paris"), 2, "6 shared by 3")
	assert.Len(t, planned(p, base+"-east"), 2)
	assert.Len(t, planned(p, base+"-west"), 2)
	assert.Equal(t, refusals{"west": {refusedLimit: 18}, "paris": {refusedLimit: 1}, "east": {refusedLimit: 2}}, p.refused)
}

// The gauge and the Events follow what an import leaves out: an Event
// per kind when it changes, none when it does not, and the gauge goes
// back when the import leaves nothing out.
func TestNoteRefusals(t *testing.T) {
	f := newFixture(t, fixtureOptions{}, nil)
	si := &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}}
	value := func(reason string) float64 { return testutil.ToFloat64(importEndpointsRefused.WithLabelValues(reason)) }
	before := value(endpointpolicy.Unmanaged)
	f.c.noteRefusals(si, refusals{"west": {endpointpolicy.Unmanaged: 2, refusedLimit: 1}})
	assert.Equal(t, before+2, value(endpointpolicy.Unmanaged))
	events := f.drainEvents()
	require.Len(t, events, 2)
	assert.Contains(t, events[0], ReasonImportEndpointsRefused)
	assert.Contains(t, events[0], "west: 2 in EndpointSlices the EndpointSlice controller did not write (unmanaged_slice)")
	assert.Contains(t, events[1], ReasonImportEndpointsLimited)
	assert.Contains(t, events[1], "1 of west")

	f.c.noteRefusals(si, refusals{"west": {endpointpolicy.Unmanaged: 2, refusedLimit: 1}})
	assert.Empty(t, f.drainEvents(), "the same: told once")
	f.c.noteRefusals(si, nil)
	assert.Equal(t, before, value(endpointpolicy.Unmanaged))
	assert.Empty(t, f.drainEvents())
}

package gateway

import (
	"net/netip"
	"slices"

	"github.com/mcmirror/mcmirror/internal/labels"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// EndpointPolicy says which endpoints of an exported Service the ingress
// may dial. An EndpointSlice names whatever addresses its writer chose: a
// selector-less Service with a slice written by hand would send peers to
// another namespace's pods, to a ClusterIP that is not exported (the API
// server's included), to a node, or to any host the cluster reaches (the
// class of CVE-2021-25740). So, by default, the ingress dials only an
// endpoint whose targetRef is a Pod of the Service's namespace, in a slice
// written by the EndpointSlice controller from the Service's selector.
// Selector-less Services are dialled only when opted in. Loopback,
// link-local, unspecified, multicast and broadcast addresses are never
// dialled, nor any address in Deny.
type EndpointPolicy struct {
	// Selectorless are the selector-less Services whose endpoints are
	// dialled whoever wrote their EndpointSlices (still never an address
	// above): "NAMESPACE/NAME", "NAMESPACE/*", or "*" for all of them.
	Selectorless []string
	// Deny are ranges never dialled: the nodes', the Services', the API
	// servers', the cloud's metadata service.
	Deny []netip.Prefix

	// loopback lets unit tests dial servers on 127.0.0.1: a fake
	// clientset takes loopback endpoints, an API server refuses them.
	loopback bool
}

// Why an endpoint is not dialled: the values of the
// ingress_endpoints_refused_total metric's reason label.
const (
	refusedAddress      = "address"         // loopback, link-local, unspecified, multicast or broadcast
	refusedDenied       = "denied_cidr"     // in a --deny-cidr range
	refusedSelectorless = "selectorless"    // a selector-less Service not opted in
	refusedUnmanaged    = "unmanaged_slice" // a slice the EndpointSlice controller did not write
	refusedNotPod       = "not_a_pod"       // no targetRef to a Pod of the Service's namespace
)

// selectorlessAllowed reports whether the selector-less Service ns/name is
// opted in.
func (p *EndpointPolicy) selectorlessAllowed(ns, name string) bool {
	return slices.Contains(p.Selectorless, "*") || slices.Contains(p.Selectorless, ns+"/*") ||
		slices.Contains(p.Selectorless, ns+"/"+name)
}

// addressRefusal returns why a may not be dialled whatever the Service, or
// "".
func (p *EndpointPolicy) addressRefusal(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case !a.IsValid(), a.IsUnspecified(), a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast(),
		a.IsInterfaceLocalMulticast(), a.IsMulticast(), a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return refusedAddress
	case a.IsLoopback() && !p.loopback:
		return refusedAddress
	}
	for _, d := range p.Deny {
		if d.Contains(a) {
			return refusedDenied
		}
	}
	return ""
}

// refusal returns why the endpoint ep, at address a, of the slice es may
// not be dialled for svc, or "".
func (p *EndpointPolicy) refusal(svc *corev1.Service, es *discoveryv1.EndpointSlice, ep *discoveryv1.Endpoint, a netip.Addr) string {
	if why := p.addressRefusal(a); why != "" {
		return why
	}
	if es.Namespace != svc.Namespace {
		return refusedNotPod
	}
	if len(svc.Spec.Selector) == 0 {
		if p.selectorlessAllowed(svc.Namespace, svc.Name) {
			return ""
		}
		return refusedSelectorless
	}
	if es.Labels[discoveryv1.LabelManagedBy] != labels.EndpointSliceControllerName {
		return refusedUnmanaged
	}
	if r := ep.TargetRef; r == nil || r.Kind != "Pod" || r.Namespace != svc.Namespace || r.Name == "" {
		return refusedNotPod
	}
	return ""
}

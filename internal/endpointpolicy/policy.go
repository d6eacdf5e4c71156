// Package endpointpolicy is the one rule of which endpoints of an
// exported Service mcmirror believes: the gateway's ingress dials only
// those, and the controller's flat-mode imports carry only those into
// the EndpointSlices kube-proxy programs for a ClusterSetIP. It is pure
// computation, shared so that the two never drift apart.
package endpointpolicy

import (
	"net/netip"
	"slices"

	"github.com/mcmirror/mcmirror/internal/labels"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Policy says which endpoints of an exported Service are believed. An
// EndpointSlice names whatever addresses its writer chose: a selector-less
// Service with a slice written by hand would send peers to another
// namespace's pods, to a ClusterIP that is not exported (the API server's
// included), to a node, or to any host the cluster reaches (the class of
// CVE-2021-25740). So, by default, only an endpoint whose targetRef is a
// Pod of the Service's namespace, in a slice written by the EndpointSlice
// controller from the Service's selector, is believed. Selector-less
// Services are believed only when opted in. Loopback, link-local,
// unspecified, multicast and broadcast addresses never are, nor any
// address in Deny.
type Policy struct {
	// Selectorless are the selector-less Services whose endpoints are
	// believed whoever wrote their EndpointSlices (still never an address
	// above): "NAMESPACE/NAME", "NAMESPACE/*", or "*" for all of them.
	Selectorless []string
	// Deny are ranges never believed: the nodes', the Services', the API
	// servers', the cloud's metadata service.
	Deny []netip.Prefix

	// loopback lets unit tests use servers on 127.0.0.1: a fake clientset
	// takes loopback endpoints, an API server refuses them. Only
	// AllowLoopback sets it; no flag or option reaches it.
	loopback bool
}

// Why an endpoint is not believed: the values of the reason label of the
// metrics that count refusals.
const (
	Address      = "address"         // loopback, link-local, unspecified, multicast or broadcast
	DeniedCIDR   = "denied_cidr"     // in a Deny range
	Selectorless = "selectorless"    // a selector-less Service not opted in
	Unmanaged    = "unmanaged_slice" // a slice the EndpointSlice controller did not write
	NotAPod      = "not_a_pod"       // no targetRef to a Pod of the Service's namespace
)

// Reasons are every reason, in the order Refusal tries them.
var Reasons = []string{Address, DeniedCIDR, Selectorless, Unmanaged, NotAPod}

// AllowLoopback returns p believing loopback addresses too, for unit
// tests whose servers listen on 127.0.0.1.
func (p Policy) AllowLoopback() Policy {
	p.loopback = true
	return p
}

// SelectorlessAllowed reports whether the selector-less Service ns/name is
// opted in.
func (p *Policy) SelectorlessAllowed(ns, name string) bool {
	return slices.Contains(p.Selectorless, "*") || slices.Contains(p.Selectorless, ns+"/*") ||
		slices.Contains(p.Selectorless, ns+"/"+name)
}

// Special reports whether a is an address no linked cluster may send
// anyone to, whatever the Service: loopback (the client's own host),
// link-local (169.254.0.0/16, the cloud's metadata service, and
// fe80::/10), multicast, unspecified, the IPv4 broadcast address, or not
// an address at all. An IPv4 address written as IPv6 (::ffff:127.0.0.1)
// is what it maps to. It is the one definition: the DNS plugin answers
// none of them from a linked cluster, the controller's imports and the
// gateway's ingress refuse them (AddressRefusal).
func Special(a netip.Addr) bool {
	a = a.Unmap()
	return !a.IsValid() || a.IsUnspecified() || a.IsLoopback() || a.IsLinkLocalUnicast() ||
		a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255})
}

// AddressRefusal returns why a is not believed whatever the Service, or
// "".
func (p *Policy) AddressRefusal(a netip.Addr) string {
	a = a.Unmap()
	if Special(a) && !(p.loopback && a.IsLoopback()) {
		return Address
	}
	for _, d := range p.Deny {
		if d.Contains(a) {
			return DeniedCIDR
		}
	}
	return ""
}

// Refusal returns why the endpoint ep, at address a, of the slice es is
// not believed for svc, or "".
func (p *Policy) Refusal(svc *corev1.Service, es *discoveryv1.EndpointSlice, ep *discoveryv1.Endpoint, a netip.Addr) string {
	if why := p.AddressRefusal(a); why != "" {
		return why
	}
	if es.Namespace != svc.Namespace {
		return NotAPod
	}
	if len(svc.Spec.Selector) == 0 {
		if p.SelectorlessAllowed(svc.Namespace, svc.Name) {
			return ""
		}
		return Selectorless
	}
	if es.Labels[discoveryv1.LabelManagedBy] != labels.EndpointSliceControllerName {
		return Unmanaged
	}
	if r := ep.TargetRef; r == nil || r.Kind != "Pod" || r.Namespace != svc.Namespace || r.Name == "" {
		return NotAPod
	}
	return ""
}

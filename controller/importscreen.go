package controller

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/mcmirror/mcmirror/internal/endpointpolicy"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// What an import carries of each source's endpoints (pure, for
// importplan.go). The EndpointSlices of a linked cluster's flat-mode
// export are whatever their writers chose, and the import's slices are
// what kube-proxy programs for the ClusterSetIP: so, of such a source,
// only the endpoints the endpoint policy believes are carried (the rule
// the gateway's ingress dials by, internal/endpointpolicy), and of each
// only its first address, the one kube-proxy and the gateway use. The
// local export and a gateway-mode remote's mirror slices are carried as
// they are: the first is the namespace's own (its owner could point a
// Service of its own there anyway), the second the controller's. And all
// sources together carry at most maxEndpoints, shared fairly.

// refusedLimit is why an endpoint is left out when the import is full:
// the reason label beside the endpoint policy's.
const refusedLimit = "limit"

// importRefusedReasons are every reason an import leaves an endpoint out.
var importRefusedReasons = append(slices.Clone(endpointpolicy.Reasons), refusedLimit)

// refusals counts the endpoints an import leaves out, by source cluster
// and reason.
type refusals map[string]map[string]int

func (r refusals) add(cluster, reason string, n int) {
	if n == 0 {
		return
	}
	if r[cluster] == nil {
		r[cluster] = map[string]int{}
	}
	r[cluster][reason] += n
}

// equal reports whether r and o count the same.
func (r refusals) equal(o refusals) bool {
	return maps.EqualFunc(r, o, func(a, b map[string]int) bool { return maps.Equal(a, b) })
}

// offer is what one source offers the import: its endpoints by address
// type, each once, and the ports of its slices that the import has.
type offer struct {
	cluster string
	eps     map[discoveryv1.AddressType][]discoveryv1.Endpoint
	ports   map[discoveryv1.AddressType]map[string]discoveryv1.EndpointPort
}

func (o *offer) len() int {
	n := 0
	for _, eps := range o.eps {
		n += len(eps)
	}
	return n
}

// makeOffer collects source s's endpoints and ports (those in wanted, by
// name/protocol), screening a flat-mode remote's by policy; what policy
// refuses is counted in refused.
func makeOffer(s importSource, wanted map[string]bool, policy *endpointpolicy.Policy, refused refusals) *offer {
	o := &offer{cluster: s.cluster, eps: map[discoveryv1.AddressType][]discoveryv1.Endpoint{},
		ports: map[discoveryv1.AddressType]map[string]discoveryv1.EndpointPort{}}
	seen := map[discoveryv1.AddressType]map[string]bool{}
	for _, es := range s.slices {
		at := es.AddressType
		if at != discoveryv1.AddressTypeIPv4 && at != discoveryv1.AddressTypeIPv6 {
			continue
		}
		if seen[at] == nil {
			// Each address type the slices have gets its slice, even
			// without an endpoint.
			seen[at], o.ports[at] = map[string]bool{}, map[string]discoveryv1.EndpointPort{}
			o.eps[at] = nil
		}
		for _, port := range es.Ports {
			name, proto := ptr.Deref(port.Name, ""), ptr.Deref(port.Protocol, corev1.ProtocolTCP)
			if k := name + "/" + string(proto); wanted[k] && port.Port != nil {
				o.ports[at][k] = discoveryv1.EndpointPort{Name: new(name), Protocol: new(proto), Port: new(*port.Port), AppProtocol: port.AppProtocol}
			}
		}
		for i := range es.Endpoints {
			ep := &es.Endpoints[i]
			if len(ep.Addresses) == 0 || seen[at][ep.Addresses[0]] {
				continue
			}
			addrs := slices.Clone(ep.Addresses)
			if s.screened {
				// Screened before it counts as seen: a refused endpoint
				// never hides a believed one of the same address.
				if why := screen(s.service, es, ep, policy); why != "" {
					refused.add(s.cluster, why, 1)
					continue
				}
				addrs = addrs[:1]
			}
			seen[at][ep.Addresses[0]] = true
			o.eps[at] = append(o.eps[at], discoveryv1.Endpoint{Addresses: addrs, Hostname: ep.Hostname, Conditions: ep.Conditions})
		}
	}
	return o
}

// screen returns why policy does not believe endpoint ep of es, a slice
// of svc, at its first address, or "".
func screen(svc *corev1.Service, es *discoveryv1.EndpointSlice, ep *discoveryv1.Endpoint, policy *endpointpolicy.Policy) string {
	a, err := netip.ParseAddr(ep.Addresses[0])
	if err != nil || a.Zone() != "" {
		return endpointpolicy.Address
	}
	return policy.Refusal(svc, es, ep, a)
}

// bound leaves at most max endpoints in the offers together, sharing
// them fairly: the smallest offer first, each gets at most an equal part
// of what is left, so one cluster that offers many cannot crowd out the
// others. An offer over its part keeps its ready endpoints first, then
// the lowest addresses; what is cut is counted in refused.
func bound(offers []*offer, max int, refused refusals) {
	order := slices.Clone(offers)
	slices.SortStableFunc(order, func(a, b *offer) int { return cmp.Compare(a.len(), b.len()) })
	left := max
	for i, o := range order {
		part := left / (len(order) - i)
		n := o.len()
		if n <= part {
			left -= n
			continue
		}
		o.keep(part)
		refused.add(o.cluster, refusedLimit, n-part)
		left -= part
	}
}

// keep leaves n endpoints in o: ready ones first, then by address type
// and address.
func (o *offer) keep(n int) {
	type ref struct {
		at discoveryv1.AddressType
		ep discoveryv1.Endpoint
	}
	var all []ref
	for _, at := range slices.Sorted(maps.Keys(o.eps)) {
		for _, ep := range o.eps[at] {
			all = append(all, ref{at, ep})
		}
	}
	ready := func(r ref) bool { return r.ep.Conditions.Ready == nil || *r.ep.Conditions.Ready }
	slices.SortStableFunc(all, func(a, b ref) int {
		if ra, rb := ready(a), ready(b); ra != rb {
			if ra {
				return -1
			}
			return 1
		}
		return cmp.Or(strings.Compare(string(a.at), string(b.at)), strings.Compare(a.ep.Addresses[0], b.ep.Addresses[0]))
	})
	kept := make(map[discoveryv1.AddressType][]discoveryv1.Endpoint, len(o.eps))
	for at := range o.eps {
		kept[at] = nil
	}
	for _, r := range all[:n] {
		kept[r.at] = append(kept[r.at], r.ep)
	}
	o.eps = kept
}

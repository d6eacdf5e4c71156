package controller

// The pure second step of a sync: the EndpointSlices of the mirror
// Services as they are after the Service writes.

import (
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/mcmirror/mcmirror/internal/labels"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxEndpointsPerSlice is the most endpoints the API server takes in one
// EndpointSlice.
const maxEndpointsPerSlice = 1000

// sliceInput is what the EndpointSlices of one key are computed from.
type sliceInput struct {
	cluster, ns, name string
	plan              plan
	// live are the wanted Services as they exist after the Service
	// writes, by name; a wanted Service missing here is in an unknown
	// state (its write failed) or does not exist yet.
	live map[string]*corev1.Service
	// owned are this key's existing EndpointSlices, by name: the headless
	// mirror's endpoints stay in the slice that holds them.
	owned  map[string]*discoveryv1.EndpointSlice
	egress []netip.Addr
	// flat gives a flat-mode mirror copies of remoteSlices (flatSlices).
	flat         bool
	remoteSlices []*discoveryv1.EndpointSlice
	// maxEndpoints is maxEndpointsPerSlice, smaller in tests.
	maxEndpoints int
}

// planSlices returns the desired EndpointSlices by name, and the Services
// (by name) whose EndpointSlices are all accounted for: only theirs may be
// deleted when not desired.
func planSlices(in sliceInput) (map[string]*discoveryv1.EndpointSlice, map[string]bool) {
	desired := map[string]*discoveryv1.EndpointSlice{}
	known := map[string]bool{}
	for _, w := range in.plan.wants {
		live := in.live[w.svc.Name]
		if live == nil {
			continue
		}
		known[w.svc.Name] = true
		switch {
		case w.egress:
			for _, es := range in.egressSlices(live, w) {
				desired[es.Name] = es
			}
		case in.plan.shape == shapeHeadless && w.svc.Name == in.plan.mirrorName:
			for _, es := range in.headlessSlices(live) {
				desired[es.Name] = es
			}
		case in.plan.shape == shapeFlat && in.flat:
			for _, es := range in.flatSlices(live) {
				desired[es.Name] = es
			}
		}
	}
	return desired, known
}

// sliceFor returns an EndpointSlice of svc with the controller's labels.
func (in sliceInput) sliceFor(name string, svc *corev1.Service, at discoveryv1.AddressType) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: in.ns,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: svc.Name,
				discoveryv1.LabelManagedBy:   labels.EndpointSliceManagedBy,
				labels.MirroredService:       labels.MirroredServiceValue,
				labels.ClusterName:           in.cluster,
				labels.ManagedBy:             labels.ManagedByValue,
				labels.RemoteService:         in.name,
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID,
			}},
		},
		AddressType: at,
	}
}

// egressComplete reports whether every port of svc has an egress port.
func egressComplete(svc *corev1.Service) bool {
	allocated := labels.ParseEgressPorts(svc.Annotations[labels.EgressPorts])
	for _, p := range svc.Spec.Ports {
		if _, ok := allocated[labels.EgressPortKey(p.Port, string(p.Protocol))]; !ok {
			return false
		}
	}
	return len(svc.Spec.Ports) > 0
}

// egressSlices points svc's ports at their egress ports, on every egress
// address of each IP family of svc as it is (kube-proxy uses a Service's
// slices of its own families only): one EndpointSlice per family, one
// endpoint per address. The primary family's slice is named as svc and
// exists whatever the addresses (none before any is known); the
// secondary's, <svc>.ipv6 or <svc>.ipv4 (familySliceName), only while the
// egress has addresses of that family.
func (in sliceInput) egressSlices(svc *corev1.Service, w want) []*discoveryv1.EndpointSlice {
	allocated := labels.ParseEgressPorts(svc.Annotations[labels.EgressPorts])
	var ports []discoveryv1.EndpointPort
	for _, p := range svc.Spec.Ports {
		ep, ok := allocated[labels.EgressPortKey(p.Port, string(p.Protocol))]
		if !ok {
			continue
		}
		ports = append(ports, discoveryv1.EndpointPort{
			Name: new(p.Name), Protocol: new(p.Protocol), Port: new(ep), AppProtocol: p.AppProtocol,
		})
	}
	if len(ports) == 0 {
		return nil
	}
	var out []*discoveryv1.EndpointSlice
	for i, at := range in.sliceTypes(svc, w) {
		addrs := addressesOf(in.egress, at)
		name := svc.Name
		if i > 0 {
			if len(addrs) == 0 {
				continue
			}
			name = familySliceName(svc.Name, at)
		}
		es := in.sliceFor(name, svc, at)
		for _, a := range addrs {
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{a.String()},
				Conditions: discoveryv1.EndpointConditions{Ready: new(w.host == "" || w.ready)}})
		}
		es.Ports = slices.Clone(ports)
		out = append(out, es)
	}
	return out
}

// sliceTypes are the address types of the egress slices of svc, primary
// first: those of its IP families as the API server has them, else as
// planned, else (the egress family not known when it was made) that of
// the first egress address (IPv4 first), IPv4 when there is none.
func (in sliceInput) sliceTypes(svc *corev1.Service, w want) []discoveryv1.AddressType {
	fams := svc.Spec.IPFamilies
	if len(fams) == 0 {
		fams = w.svc.Spec.IPFamilies
	}
	if len(fams) == 0 {
		if len(in.egress) == 0 {
			return []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4}
		}
		return []discoveryv1.AddressType{addressType(in.egress[0])}
	}
	var out []discoveryv1.AddressType
	for _, f := range fams[:min(len(fams), 2)] {
		out = append(out, discoveryv1.AddressType(f)) // IPv4 and IPv6 in both APIs
	}
	return out
}

// familySliceName is the name of the egress EndpointSlice of a dual-stack
// mirror svc for its secondary family: <svc>.ipv4 or <svc>.ipv6, a name
// neither a Service's (no dots) nor a headless mirror's second slice
// (<svc>.<n>, digits) can have.
func familySliceName(svc string, at discoveryv1.AddressType) string {
	return svc + "." + strings.ToLower(string(at))
}

// headlessSlices lists, for the headless mirror svc, one endpoint per
// per-pod mirror: its ClusterIP under the remote hostname, ready when the
// remote pod is and its mirror has every egress port. Endpoints are packed
// as the EndpointSlice controller packs them: at most maxEndpoints per
// slice; an endpoint stays in the slice that holds it, new ones fill the
// slices with room, then new slices; a change rewrites few slices. The
// first slice, named as the Service, always exists; the others are named
// <svc>.<n>, a name no Service's slice can have.
func (in sliceInput) headlessSlices(svc *corev1.Service) []*discoveryv1.EndpointSlice {
	eps := map[string]discoveryv1.Endpoint{}
	at := discoveryv1.AddressTypeIPv4
	// A per-pod mirror whose state is unknown (its write failed) keeps
	// the endpoint the slices give it now: its DNS name must not vanish
	// for a write that will be retried.
	held := map[string]discoveryv1.Endpoint{}
	for _, es := range in.owned {
		if es.Labels[discoveryv1.LabelServiceName] != svc.Name {
			continue
		}
		for _, ep := range es.Endpoints {
			if ep.Hostname != nil && len(ep.Addresses) > 0 {
				held[*ep.Hostname] = ep
			}
		}
	}
	for _, w := range in.plan.wants {
		if w.host == "" {
			continue
		}
		ep, ok := held[w.host]
		if pod := in.live[w.svc.Name]; pod != nil {
			ep, ok = discoveryv1.Endpoint{
				Addresses:  []string{pod.Spec.ClusterIP},
				Hostname:   new(w.host),
				Conditions: discoveryv1.EndpointConditions{Ready: new(w.ready && egressComplete(pod))},
			}, true
		}
		if !ok {
			continue
		}
		// A ClusterIP that is none ("", None) does not parse.
		ip, err := netip.ParseAddr(ep.Addresses[0])
		if err != nil || len(eps) > 0 && addressType(ip) != at {
			continue
		}
		at = addressType(ip)
		eps[w.host] = ep
	}
	max := in.maxEndpoints
	if max <= 0 {
		max = maxEndpointsPerSlice
	}

	// Where each endpoint is now: the owned slices of svc, by name.
	var names []string
	where := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(in.owned)) {
		es := in.owned[name]
		if es.Labels[discoveryv1.LabelServiceName] != svc.Name || isEgressSlice(es) && len(es.Endpoints) > 0 {
			continue
		}
		names = append(names, name)
		for _, ep := range es.Endpoints {
			if ep.Hostname != nil {
				if _, dup := where[*ep.Hostname]; !dup {
					where[*ep.Hostname] = name
				}
			}
		}
	}
	if !slices.Contains(names, svc.Name) {
		names = append([]string{svc.Name}, names...)
	}
	groups := map[string][]string{}
	var placeNew []string
	for _, host := range slices.Sorted(maps.Keys(eps)) {
		if n, ok := where[host]; ok && len(groups[n]) < max && in.owned[n].AddressType == at {
			groups[n] = append(groups[n], host)
			continue
		}
		placeNew = append(placeNew, host)
	}
	for _, host := range placeNew {
		i := slices.IndexFunc(names, func(n string) bool {
			return len(groups[n]) < max && (in.owned[n] == nil || in.owned[n].AddressType == at)
		})
		if i < 0 { // every slice is full, or of the other family
			names = append(names, nextSliceName(svc.Name, names))
			i = len(names) - 1
		}
		groups[names[i]] = append(groups[names[i]], host)
	}

	var out []*discoveryv1.EndpointSlice
	for _, n := range names {
		if len(groups[n]) == 0 && n != svc.Name {
			continue
		}
		es := in.sliceFor(n, svc, at)
		for _, host := range groups[n] {
			es.Endpoints = append(es.Endpoints, eps[host])
		}
		slices.SortFunc(es.Endpoints, func(a, b discoveryv1.Endpoint) int {
			return strings.Compare(*a.Hostname, *b.Hostname)
		})
		for _, p := range svc.Spec.Ports {
			es.Ports = append(es.Ports, discoveryv1.EndpointPort{
				Name: new(p.Name), Protocol: new(p.Protocol), Port: new(p.Port), AppProtocol: p.AppProtocol,
			})
		}
		out = append(out, es)
	}
	return out
}

// nextSliceName is the first of <svc>.2, <svc>.3, ... not among names.
func nextSliceName(svc string, names []string) string {
	for n := 2; ; n++ {
		if name := svc + "." + strconv.Itoa(n); !slices.Contains(names, name) {
			return name
		}
	}
}

func addressType(a netip.Addr) discoveryv1.AddressType {
	if a.Is4() || a.Is4In6() {
		return discoveryv1.AddressTypeIPv4
	}
	return discoveryv1.AddressTypeIPv6
}

// garbage returns, sorted, the owned EndpointSlices and Services a sync
// deletes: a Service that is not wanted, and an EndpointSlice that is not
// desired and whose Service is either not wanted or has all its slices
// accounted for (known). What the sync could not account for (a Service
// whose write failed, and its slices) is never collected.
func garbage(p plan, ownedServices map[string]*corev1.Service, ownedSlices map[string]*discoveryv1.EndpointSlice,
	desired map[string]*discoveryv1.EndpointSlice, known map[string]bool) (delSlices, delServices []string) {
	wanted := map[string]bool{}
	for _, w := range p.wants {
		wanted[w.svc.Name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(ownedSlices)) {
		svc := ownedSlices[name].Labels[discoveryv1.LabelServiceName]
		if desired[name] == nil && (!wanted[svc] || known[svc]) {
			delSlices = append(delSlices, name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(ownedServices)) {
		if !wanted[name] {
			delServices = append(delServices, name)
		}
	}
	return delSlices, delServices
}

package controller

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/mcs"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
)

// The import side of the Multi-Cluster Services API: for every Service
// that at least one cluster of the clusterset exports (this one included),
// the controller keeps in this cluster
//
//   - a ServiceImport of the same namespace and name, merged from the
//     exports by the specification's rules (internal/mcs.Merge);
//   - the derived Service, derived-<hash>, a selector-less Service of the
//     import's ports: a ClusterIP for a ClusterSetIP import (that ClusterIP
//     is the ServiceImport's ips), headless for a Headless one;
//   - one EndpointSlice of the derived Service per exporting cluster and
//     address type, labelled as the specification says
//     (multicluster.kubernetes.io/service-name and source-cluster): this
//     cluster's own endpoints directly; a gateway-mode remote's through
//     the endpoints of its mirror (the gateway egress, or the per-pod
//     mirrors of a headless Service); a flat remote's pod addresses.
//
// This file is the computation; importapply.go does the writes.

// derivedPrefix begins the name of every derived Service.
const derivedPrefix = "derived-"

// DerivedName is the name of the derived Service of namespace/name: a
// hash, as the MCS reference implementation and Cilium name theirs, so
// that any name fits and none is a user's. 128 bits of it
// (derivedHashDigits): no two imports of a namespace share a name, not
// even two whose names were searched for a collision (derivedname.go).
func DerivedName(ns, name string) string {
	return derivedPrefix + derivedHash(ns, name)[:derivedHashDigits]
}

// derivedHash is the hex SHA-256 of namespace/name.
func derivedHash(ns, name string) string {
	sum := sha256.Sum256([]byte(ns + "/" + name))
	return hex.EncodeToString(sum[:])
}

// importSource is one cluster's export of the Service, with the endpoints
// through which this cluster reaches it.
type importSource struct {
	cluster string
	created time.Time
	service *corev1.Service
	// slices hold the endpoints and ports that the import's slice of this
	// cluster copies: the local Service's own slices, a gateway-mode
	// remote's mirror slices, or a flat remote's slices.
	slices []*discoveryv1.EndpointSlice
}

// importInput is what the sync of one namespace/name reads.
type importInput struct {
	ns, name string
	sources  []importSource
	// derived is the derived Service as it exists; nil when it does not.
	derived *corev1.Service
	// importUID is the ServiceImport's UID once it exists, for the
	// derived Service's owner reference.
	importUID types.UID
}

// importPlan is what should exist. With no sources, nothing: the
// ServiceImport, the derived Service and its slices are deleted.
type importPlan struct {
	merged mcs.Merged
	// spec and clusters are the ServiceImport's; spec.IPs are the derived
	// Service's ClusterIPs once it has them.
	spec     mcsv1alpha1.ServiceImportSpec
	clusters []mcsv1alpha1.ClusterStatus
	// derived is the desired derived Service; replace is set when the
	// existing one cannot be updated into it (headless and ClusterIP
	// differ, and a ClusterIP is immutable).
	derived *corev1.Service
	replace bool
	// slices are the desired EndpointSlices of the derived Service, by
	// name; empty until the derived Service exists (they name its UID).
	slices map[string]*discoveryv1.EndpointSlice
}

// exists reports whether the import should exist.
func (p importPlan) exists() bool { return p.derived != nil }

func planImport(in importInput) importPlan {
	var p importPlan
	if len(in.sources) == 0 {
		return p
	}
	exports := make([]mcs.Export, len(in.sources))
	for i, s := range in.sources {
		exports[i] = mcs.Export{Cluster: s.cluster, Created: s.created, Service: s.service}
	}
	p.merged = mcs.Merge(exports)
	p.spec = p.merged.Spec
	for _, c := range p.merged.Clusters {
		p.clusters = append(p.clusters, mcsv1alpha1.ClusterStatus{Cluster: c})
	}
	headless := p.spec.Type == mcsv1alpha1.Headless
	p.derived = &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:      DerivedName(in.ns, in.name),
			Namespace: in.ns,
			Labels: map[string]string{
				ManagedBy:                    ManagedByValue,
				labels.ServiceImport:         in.name,
				mcsv1alpha1.LabelServiceName: in.name,
			},
		},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeClusterIP,
			SessionAffinity:       p.spec.SessionAffinity,
			SessionAffinityConfig: p.spec.SessionAffinityConfig,
			InternalTrafficPolicy: p.spec.InternalTrafficPolicy,
			TrafficDistribution:   p.spec.TrafficDistribution,
		},
	}
	if in.importUID != "" {
		p.derived.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: mcsv1alpha1.SchemeGroupVersion.String(), Kind: "ServiceImport", Name: in.name, UID: in.importUID,
		}}
	}
	if headless {
		p.derived.Spec.ClusterIP = corev1.ClusterIPNone
	} else if len(p.spec.IPFamilies) > 1 {
		// Both families where the cluster has both; one where it has
		// one (the mirrors decide the same way).
		p.derived.Spec.IPFamilyPolicy = new(corev1.IPFamilyPolicyPreferDualStack)
	}
	for _, port := range p.spec.Ports {
		p.derived.Spec.Ports = append(p.derived.Spec.Ports, corev1.ServicePort{
			Name: port.Name, Protocol: port.Protocol, AppProtocol: port.AppProtocol, Port: port.Port,
		})
	}
	if in.derived != nil {
		p.replace = (in.derived.Spec.ClusterIP == corev1.ClusterIPNone) != headless
		if !p.replace && !headless {
			p.spec.IPs = slices.Clone(in.derived.Spec.ClusterIPs)
		}
	}
	if in.derived == nil || p.replace {
		return p
	}
	p.slices = map[string]*discoveryv1.EndpointSlice{}
	imported := map[string]int32{}
	for _, port := range p.spec.Ports {
		imported[port.Name+"/"+string(port.Protocol)] = port.Port
	}
	for _, s := range in.sources {
		if !slices.Contains(p.merged.Clusters, s.cluster) {
			continue
		}
		for _, es := range importSlices(in, s, sourcePorts(s.service, imported)) {
			p.slices[es.Name] = es
		}
	}
	return p
}

// sourcePorts are the ports (name/protocol) by which a source's endpoints
// serve the import: those of its Service that the import has as they are.
// A port of the same name and protocol but another number lost a conflict
// (mcs.Merge) to an older export: the import's port is not this source's,
// and its endpoints must not take that port's traffic.
func sourcePorts(svc *corev1.Service, imported map[string]int32) map[string]bool {
	out := map[string]bool{}
	for _, p := range svc.Spec.Ports {
		proto := p.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		k := p.Name + "/" + string(proto)
		if port, ok := imported[k]; ok && port == p.Port {
			out[k] = true
		}
	}
	return out
}

// importSlices are the derived Service's EndpointSlices for source s, one
// per address type its endpoints have: the endpoints of its slices, each
// once, with the ports the import has (matched by name and protocol).
func importSlices(in importInput, s importSource, wanted map[string]bool) []*discoveryv1.EndpointSlice {
	type group struct {
		eps   []discoveryv1.Endpoint
		seen  map[string]bool
		ports map[string]discoveryv1.EndpointPort
	}
	groups := map[discoveryv1.AddressType]*group{}
	for _, es := range s.slices {
		if es.AddressType != discoveryv1.AddressTypeIPv4 && es.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		g := groups[es.AddressType]
		if g == nil {
			g = &group{seen: map[string]bool{}, ports: map[string]discoveryv1.EndpointPort{}}
			groups[es.AddressType] = g
		}
		for _, port := range es.Ports {
			name, proto := "", corev1.ProtocolTCP
			if port.Name != nil {
				name = *port.Name
			}
			if port.Protocol != nil {
				proto = *port.Protocol
			}
			if k := name + "/" + string(proto); wanted[k] && port.Port != nil {
				g.ports[k] = discoveryv1.EndpointPort{Name: new(name), Protocol: new(proto), Port: new(*port.Port), AppProtocol: port.AppProtocol}
			}
		}
		for _, ep := range es.Endpoints {
			if len(ep.Addresses) == 0 || g.seen[ep.Addresses[0]] {
				continue
			}
			g.seen[ep.Addresses[0]] = true
			g.eps = append(g.eps, discoveryv1.Endpoint{
				Addresses:  slices.Clone(ep.Addresses),
				Hostname:   ep.Hostname,
				Conditions: ep.Conditions,
			})
		}
	}
	var out []*discoveryv1.EndpointSlice
	for _, at := range []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6} {
		g := groups[at]
		if g == nil {
			continue
		}
		base := in.derived.Name + "-" + s.cluster
		if at == discoveryv1.AddressTypeIPv6 {
			base += "-ipv6"
		}
		var ports []discoveryv1.EndpointPort
		for _, port := range g.ports {
			ports = append(ports, port)
		}
		slices.SortFunc(ports, func(a, b discoveryv1.EndpointPort) int {
			return cmp.Or(strings.Compare(*a.Name, *b.Name), strings.Compare(string(*a.Protocol), string(*b.Protocol)))
		})
		slices.SortFunc(g.eps, func(a, b discoveryv1.Endpoint) int { return strings.Compare(a.Addresses[0], b.Addresses[0]) })
		// One slice, named for the cluster, holds the first
		// maxEndpointsPerSlice endpoints; the rest go to <name>-<n>.
		for i := 0; i == 0 || i*maxEndpointsPerSlice < len(g.eps); i++ {
			name := base
			if i > 0 {
				name += "-" + strconv.Itoa(i)
			}
			chunk := g.eps[i*maxEndpointsPerSlice : min(len(g.eps), (i+1)*maxEndpointsPerSlice)]
			out = append(out, importSlice(in, s.cluster, name, at, chunk, ports))
		}
	}
	return out
}

// importSlice is one EndpointSlice of the derived Service.
func importSlice(in importInput, cluster, name string, at discoveryv1.AddressType, eps []discoveryv1.Endpoint, ports []discoveryv1.EndpointPort) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: in.ns,
			Labels: map[string]string{
				discoveryv1.LabelServiceName:   in.derived.Name,
				discoveryv1.LabelManagedBy:     EndpointSliceManagedBy,
				ManagedBy:                      ManagedByValue,
				mcsv1alpha1.LabelServiceName:   in.name,
				mcsv1alpha1.LabelSourceCluster: cluster,
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Service", Name: in.derived.Name, UID: in.derived.UID,
			}},
		},
		AddressType: at,
		Endpoints:   eps,
		Ports:       ports,
	}
}

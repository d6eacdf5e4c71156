package controller

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcmirror/mcmirror/internal/endpointpolicy"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/mcs"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
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
	// metadata is what the export carries beside the Service: its
	// ServiceExport's exported labels and annotations, from the stamp.
	metadata mcs.Metadata
	// slices hold the endpoints and ports that the import's slice of this
	// cluster copies: the local Service's own slices, a gateway-mode
	// remote's mirror slices, or a flat remote's slices.
	slices []*discoveryv1.EndpointSlice
	// screened is set for a flat remote: its slices are anyone's who may
	// write EndpointSlices there, and pass the endpoint policy
	// (importscreen.go).
	screened bool
	// families are the IP families by which this cluster reaches the
	// source: the local or flat remote Service's own, a gateway-mode
	// remote's mirror slices' (the egress's).
	families []corev1.IPFamily
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
	// policy screens the endpoints of flat remotes; maxEndpoints bounds
	// the endpoints of all sources together (importscreen.go).
	policy       *endpointpolicy.Policy
	maxEndpoints int
	// kept are the existing slices of the clusters whose links have not
	// synced within the start-up wait (importheld.go): kept as they are,
	// by cluster.
	kept map[string][]*discoveryv1.EndpointSlice
}

// DerivedServiceAnnotation names, on a ServiceImport, its derived Service:
// Gateway API implementations read it to route a ServiceImport backendRef
// to the Service that holds the ClusterSetIP and the endpoints.
const DerivedServiceAnnotation = "multicluster.kubernetes.io/derived-service"

// importPlan is what should exist. With no sources, nothing: the
// ServiceImport, the derived Service and its slices are deleted.
type importPlan struct {
	merged mcs.Merged
	// spec and clusters are the ServiceImport's; spec.IPs are the derived
	// Service's ClusterIPs once it has them.
	spec     mcsv1beta1.ServiceImportSpec
	clusters []mcsv1beta1.ClusterStatus
	// derived is the desired derived Service; replace is set when the
	// existing one cannot be updated into it (headless and ClusterIP
	// differ, and a ClusterIP is immutable).
	derived *corev1.Service
	replace bool
	// slices are the desired EndpointSlices of the derived Service, by
	// name; empty until the derived Service exists (they name its UID).
	slices map[string]*discoveryv1.EndpointSlice
	// refused counts the endpoints the slices leave out, by source
	// cluster and reason; computed with the slices.
	refused refusals
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
		exports[i] = mcs.Export{Cluster: s.cluster, Created: s.created, Service: s.service, Metadata: s.metadata}
	}
	p.merged = mcs.Merge(exports)
	p.spec = p.merged.Spec
	for _, c := range p.merged.Clusters {
		p.clusters = append(p.clusters, mcsv1beta1.ClusterStatus{Cluster: c})
	}
	for _, c := range slices.Sorted(maps.Keys(in.kept)) {
		if !slices.Contains(p.merged.Clusters, c) {
			p.clusters = append(p.clusters, mcsv1beta1.ClusterStatus{Cluster: c})
		}
	}
	headless := p.spec.Type == mcsv1beta1.Headless
	families := importFamilies(in, p.merged.Clusters)
	p.spec.IPFamilies = families
	p.derived = &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:      DerivedName(in.ns, in.name),
			Namespace: in.ns,
			Labels: map[string]string{
				labels.ManagedBy:            labels.ManagedByValue,
				labels.ServiceImport:        in.name,
				mcsv1beta1.LabelServiceName: in.name,
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
			APIVersion: mcsv1beta1.SchemeGroupVersion.String(), Kind: "ServiceImport", Name: in.name, UID: in.importUID,
		}}
	}
	if headless {
		p.derived.Spec.ClusterIP = corev1.ClusterIPNone
	} else {
		setFamilies(p.derived, families)
	}
	for _, port := range p.spec.Ports {
		p.derived.Spec.Ports = append(p.derived.Spec.Ports, corev1.ServicePort{
			Name: port.Name, Protocol: port.Protocol, AppProtocol: port.AppProtocol, Port: port.Port,
		})
	}
	if in.derived != nil {
		p.replace = (in.derived.Spec.ClusterIP == corev1.ClusterIPNone) != headless ||
			!headless && lostPrimary(in.derived, families)
		if !p.replace && !headless {
			p.spec.IPs = slices.Clone(in.derived.Spec.ClusterIPs)
			// The families of the ClusterSetIPs it has.
			p.spec.IPFamilies = slices.Clone(in.derived.Spec.IPFamilies)
		}
	}
	if in.derived == nil || p.replace {
		return p
	}
	p.slices = map[string]*discoveryv1.EndpointSlice{}
	p.refused = refusals{}
	imported := map[string]int32{}
	for _, port := range p.spec.Ports {
		imported[port.Name+"/"+string(port.Protocol)] = port.Port
	}
	var offers []*offer
	for _, s := range in.sources {
		if slices.Contains(p.merged.Clusters, s.cluster) {
			offers = append(offers, makeOffer(s, sourcePorts(s.service, imported), in.policy, p.refused))
		}
	}
	if in.maxEndpoints > 0 {
		bound(offers, in.maxEndpoints, p.refused)
	}
	for _, o := range offers {
		for _, es := range importSlices(in, o) {
			p.slices[es.Name] = es
		}
	}
	// The slices of a cluster whose link has not synced (importheld.go),
	// as they are but owned by the derived Service as it is now.
	for _, kept := range in.kept {
		for _, es := range kept {
			p.slices[es.Name] = importSlice(in, es.Labels[mcsv1beta1.LabelSourceCluster], es.Name, es.AddressType,
				es.Endpoints, es.Ports)
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
		k := p.Name + "/" + string(cmp.Or(p.Protocol, corev1.ProtocolTCP))
		if port, ok := imported[k]; ok && port == p.Port {
			out[k] = true
		}
	}
	return out
}

// importSlices are the derived Service's EndpointSlices for offer o, one
// per address type its slices have, with its endpoints sorted and the
// ports the import has (matched by name and protocol).
func importSlices(in importInput, o *offer) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for _, at := range []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6} {
		eps, ok := o.eps[at]
		if !ok {
			continue
		}
		base := in.derived.Name + "-" + o.cluster
		if at == discoveryv1.AddressTypeIPv6 {
			base += "-ipv6"
		}
		ports := slices.Collect(maps.Values(o.ports[at]))
		slices.SortFunc(ports, func(a, b discoveryv1.EndpointPort) int {
			return cmp.Or(strings.Compare(*a.Name, *b.Name), strings.Compare(string(*a.Protocol), string(*b.Protocol)))
		})
		slices.SortFunc(eps, func(a, b discoveryv1.Endpoint) int { return strings.Compare(a.Addresses[0], b.Addresses[0]) })
		// One slice, named for the cluster, holds the first
		// maxEndpointsPerSlice endpoints; the rest go to <name>-<n>.
		for i := 0; i == 0 || i*maxEndpointsPerSlice < len(eps); i++ {
			name := base
			if i > 0 {
				name += "-" + strconv.Itoa(i)
			}
			chunk := eps[i*maxEndpointsPerSlice : min(len(eps), (i+1)*maxEndpointsPerSlice)]
			out = append(out, importSlice(in, o.cluster, name, at, chunk, ports))
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
				discoveryv1.LabelServiceName:  in.derived.Name,
				discoveryv1.LabelManagedBy:    labels.EndpointSliceManagedBy,
				labels.ManagedBy:              labels.ManagedByValue,
				mcsv1beta1.LabelServiceName:   in.name,
				mcsv1beta1.LabelSourceCluster: cluster,
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

package controller

// The EndpointSlices of a flat-mode mirror, with --mirror-flat-endpoints:
// one copy of each remote EndpointSlice, which DNS in import mode answers
// flat-mode names from (the plugin's `source import`). Each is labelled
// labels.FlatEndpoints, which the cluster DNS's kubernetes plugin does not
// select in import mode (internal/corefile): mcmirror answers every name
// of them, and a second copy of every endpoint would double the DNS's
// memory.

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"

	"github.com/mcmirror/mcmirror/internal/endpointpolicy"
	"github.com/mcmirror/mcmirror/internal/labels"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// headlessLabel marks the EndpointSlices of a headless Service, as the
// EndpointSlice controller marks them: kube-proxy does not even receive
// them (its watch selects !service.kubernetes.io/headless).
const headlessLabel = corev1.IsHeadlessService

// flatSlices copies, for the flat-mode mirror svc, every remote
// EndpointSlice of the key into one local EndpointSlice of svc: its
// addresses, hostnames, conditions and ports, and its
// last-change-trigger-time (the plugin's programming latency). Nothing
// else of the remote is copied: not its pods' names (a targetRef here
// would name a pod of this cluster), nodes or zones. An address the local
// API server would refuse (loopback, link-local, multicast, unspecified)
// is left out, as DNS leaves it out. FQDN slices hold no address to answer.
func (in sliceInput) flatSlices(svc *corev1.Service) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for _, rs := range in.remoteSlices {
		if rs.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		es := in.sliceFor(flatSliceName(svc.Name, rs.Name), svc, rs.AddressType)
		es.Labels[headlessLabel] = ""
		es.Labels[labels.FlatEndpoints] = "true"
		if t, ok := rs.Annotations[labels.EndpointsLastChangeTriggerTime]; ok {
			es.Annotations = map[string]string{labels.EndpointsLastChangeTriggerTime: t}
		}
		for _, ep := range rs.Endpoints {
			var addrs []string
			for _, a := range ep.Addresses {
				ip, err := netip.ParseAddr(a)
				if err != nil || endpointpolicy.Special(ip) {
					continue
				}
				addrs = append(addrs, a)
			}
			if len(addrs) == 0 {
				continue
			}
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
				Addresses: addrs,
				Hostname:  ep.Hostname,
				Conditions: discoveryv1.EndpointConditions{
					Ready: ep.Conditions.Ready, Serving: ep.Conditions.Serving, Terminating: ep.Conditions.Terminating,
				},
			})
		}
		for _, p := range rs.Ports {
			es.Ports = append(es.Ports, discoveryv1.EndpointPort{Name: p.Name, Protocol: p.Protocol, Port: p.Port, AppProtocol: p.AppProtocol})
		}
		out = append(out, es)
	}
	return out
}

// flatSliceName is the name of the copy of remote slice remote of the
// flat-mode mirror svc: <svc>.<remote>, a name no Service's own slice can
// have (a Service's name has no dot); <svc>.<hash> when that is too long
// for a name.
func flatSliceName(svc, remote string) string {
	if name := svc + "." + remote; len(name) <= 253 {
		return name
	}
	h := sha256.Sum256([]byte(remote))
	return svc + "." + hex.EncodeToString(h[:10])
}

package controller

// The last step of a sync: garbage collection of what the plan no longer
// wants, then the release of the egress ports no object records.

import (
	"maps"
	"strings"

	"github.com/mcmirror/mcmirror/internal/labels"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// ledger is what the cluster holds of a key's objects as far as the sync
// knows: its owned objects at the start, then each successful write
// applied. A failed write leaves the old object in it.
type ledger struct {
	services map[string]*corev1.Service
	slices   map[string]*discoveryv1.EndpointSlice
}

// collect deletes what garbage names: slices first, then Services.
func (s *syncer) collect(delSlices, delServices []string) {
	for _, name := range delSlices {
		s.deleteSlice(s.ownedSlices[name])
	}
	for _, name := range delServices {
		s.deleteService(s.ownedServices[name])
	}
}

// releasePorts releases every egress port of the key that neither a wanted
// mirror nor any object the ledger holds records: a port is free only once
// nothing in the cluster points at it.
func (s *syncer) releasePorts() {
	keep := maps.Clone(s.keepPorts)
	for _, svc := range s.final.services {
		for pk := range labels.ParseEgressPorts(svc.Annotations[labels.EgressPorts]) {
			keep[portOwner(svc.Namespace, svc.Name, pk)] = true
		}
	}
	for _, es := range s.final.slices {
		for _, o := range s.slicePortOwners(es) {
			keep[o] = true
		}
	}
	if n := s.c.ports.ReleaseExcept(s.key, keep); n > 0 {
		s.logger.V(2).Info("Released egress ports", "count", n)
		s.c.feedStarved()
	}
}

// slicePortOwners returns the owners of the egress ports an egress
// EndpointSlice points at: kube-proxy sends the mirror's traffic there.
// An egress slice is told by its shape (isEgressSlice), whatever addresses
// it lists; only ports allocated to the slice's own Service count.
func (s *syncer) slicePortOwners(es *discoveryv1.EndpointSlice) []string {
	if !isEgressSlice(es) {
		return nil // a headless mirror's slice: Service ports, not egress ports
	}
	var out []string
	prefix := portOwner(es.Namespace, es.Labels[discoveryv1.LabelServiceName], "")
	for _, p := range es.Ports {
		if p.Port == nil {
			continue
		}
		if owner, ok := s.c.ports.Owner(*p.Port); ok && strings.HasPrefix(owner, prefix) {
			out = append(out, owner)
		}
	}
	return out
}

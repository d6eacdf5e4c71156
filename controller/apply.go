package controller

// The effects of a sync: writes of the planned Services and EndpointSlices,
// and deletions of what the plan let go. Each write records in the ledger
// what the cluster holds afterwards, as far as the sync knows; garbage
// collection and port release go by the ledger (collect.go).

import (
	"context"
	"fmt"
	"maps"

	"github.com/mcmirror/mcmirror/internal/labels"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// applyServices writes the wanted Services (allocating their egress
// ports) and returns them as they exist afterwards, by name. A Service
// whose write failed, or whose create found the name taken before the
// cache knew, is absent: its state is unknown.
func (s *syncer) applyServices(wants []want) map[string]*corev1.Service {
	live := map[string]*corev1.Service{}
	for _, w := range wants {
		svc := s.applyService(w)
		if svc == nil {
			continue
		}
		live[svc.Name] = svc
		if w.host != "" {
			s.status.pods++
		} else {
			s.status.services++
		}
	}
	return live
}

// allocatePorts gives every port of an egress mirror its egress port (the
// one recorded on the existing mirror when it is free) and records them in
// the EgressPorts annotation.
func (s *syncer) allocatePorts(existing, desired *corev1.Service) {
	recorded := map[string]int32{}
	if existing != nil {
		recorded = labels.ParseEgressPorts(existing.Annotations[labels.EgressPorts])
	}
	got := map[string]int32{}
	for _, p := range desired.Spec.Ports {
		pk := labels.EgressPortKey(p.Port, string(p.Protocol))
		owner := portOwner(s.ns, desired.Name, pk)
		s.keepPorts[owner] = true
		port, err := s.c.ports.Allocate(s.key, owner, recorded[pk])
		if err != nil {
			s.portsExhausted(existing, desired, pk)
			continue
		}
		got[pk] = port
	}
	desired.Annotations[labels.EgressPorts] = labels.FormatEgressPorts(got)
}

// applyService creates or updates one wanted Service; it returns the
// Service as it is now, nil when unknown or deleted to be made again.
func (s *syncer) applyService(w want) *corev1.Service {
	c := s.c
	desired := w.svc
	existing := s.ownedServices[desired.Name]
	if existing != nil {
		if why := replaceReason(existing, desired); why != "" {
			// Immutable fields: delete now, create on the next sync
			// (the deletion's event enqueues it).
			s.logger.V(2).Info("Replacing mirror", "service", klog.KObj(existing), "why", why)
			s.deleteService(existing)
			return nil
		}
	}
	if w.egress {
		s.allocatePorts(existing, desired)
	}

	if existing == nil {
		created, err := c.client.CoreV1().Services(s.ns).Create(s.ctx, desired, metav1.CreateOptions{})
		s.wrote("create", "services", desired.Name, err)
		if err != nil {
			// AlreadyExists: not yet in the cache; the next sync sees
			// whose it is. Either way its state is unknown.
			return nil
		}
		s.logger.V(2).Info("Created mirror", "service", klog.KObj(created), "clusterIP", created.Spec.ClusterIP)
		s.final.services[created.Name] = created
		return created
	}
	if !serviceNeedsUpdate(existing, desired) {
		return existing
	}
	updated := existing.DeepCopy()
	maps.Copy(updated.Labels, desired.Labels)
	if updated.Annotations == nil {
		updated.Annotations = map[string]string{}
	}
	maps.Copy(updated.Annotations, desired.Annotations)
	for _, k := range optionalAnnotations {
		if _, ok := desired.Annotations[k]; !ok {
			delete(updated.Annotations, k)
		}
	}
	updated.Spec.Type = corev1.ServiceTypeClusterIP
	updated.Spec.Selector = nil
	updated.Spec.Ports = desired.Spec.Ports
	updated.Spec.PublishNotReadyAddresses = desired.Spec.PublishNotReadyAddresses
	u, err := c.client.CoreV1().Services(s.ns).Update(s.ctx, updated, metav1.UpdateOptions{})
	s.wrote("update", "services", desired.Name, err)
	if err != nil {
		// The cluster still holds existing: its slices stay as they
		// are, its recorded ports stay taken.
		return nil
	}
	s.logger.V(2).Info("Updated mirror", "service", klog.KObj(u))
	s.final.services[u.Name] = u
	return u
}

// optionalAnnotations are the controller's annotations a mirror has only
// at times: removed when the desired mirror lacks them.
var optionalAnnotations = []string{labels.EgressPorts, labels.RemoteHeadless}

// serviceNeedsUpdate compares the fields the controller owns.
func serviceNeedsUpdate(existing, desired *corev1.Service) bool {
	if !metaHolds(existing, desired) {
		return true
	}
	for _, k := range optionalAnnotations {
		_, want := desired.Annotations[k]
		if _, had := existing.Annotations[k]; had && !want {
			return true
		}
	}
	if existing.Spec.Type != corev1.ServiceTypeClusterIP || len(existing.Spec.Selector) > 0 ||
		existing.Spec.PublishNotReadyAddresses != desired.Spec.PublishNotReadyAddresses {
		return true
	}
	if len(existing.Spec.Ports) != len(desired.Spec.Ports) {
		return true
	}
	for i, d := range desired.Spec.Ports {
		e := existing.Spec.Ports[i]
		if e.Name != d.Name || e.Protocol != d.Protocol || e.Port != d.Port || e.TargetPort != d.TargetPort ||
			!apiequality.Semantic.DeepEqual(e.AppProtocol, d.AppProtocol) {
			return true
		}
	}
	return false
}

// deleteService deletes a mirror; one it could not delete stays in the
// ledger, and keeps its ports.
func (s *syncer) deleteService(svc *corev1.Service) {
	if s.deleteOwned("services", svc, s.c.client.CoreV1().Services(svc.Namespace).Delete) {
		delete(s.final.services, svc.Name)
		s.logger.V(2).Info("Deleted mirror", "service", klog.KObj(svc))
	}
}

func (s *syncer) deleteSlice(es *discoveryv1.EndpointSlice) bool {
	if !s.deleteOwned("endpointslices", es, s.c.client.DiscoveryV1().EndpointSlices(es.Namespace).Delete) {
		return false
	}
	delete(s.final.slices, es.Name)
	return true
}

// deleteOwned deletes obj by del, on condition of its UID, and reports
// whether it is gone (NotFound included).
func (s *syncer) deleteOwned(resource string, obj metav1.Object, del func(context.Context, string, metav1.DeleteOptions) error) bool {
	uid := obj.GetUID()
	err := del(s.ctx, obj.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) {
		err = nil
	}
	s.wrote("delete", resource, obj.GetName(), err)
	return err == nil
}

// applySlice creates or updates one EndpointSlice.
func (s *syncer) applySlice(desired *discoveryv1.EndpointSlice) {
	c := s.c
	existing := s.ownedSlices[desired.Name]
	if existing != nil && existing.AddressType != desired.AddressType {
		// The address type is immutable: recreate.
		if !s.deleteSlice(existing) {
			return
		}
		existing = nil
	}
	if existing == nil {
		_, err := c.client.DiscoveryV1().EndpointSlices(s.ns).Create(s.ctx, desired, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			writesTotal.WithLabelValues("create", "endpointslices").Inc()
			s.writes++
			s.sliceConflict(desired)
			return
		}
		s.wrote("create", "endpointslices", desired.Name, err)
		if err == nil {
			s.final.slices[desired.Name] = desired
		}
		return
	}
	if !sliceNeedsUpdate(existing, desired) {
		return
	}
	updated := existing.DeepCopy()
	maps.Copy(updated.Labels, desired.Labels)
	if len(desired.Annotations) > 0 && updated.Annotations == nil {
		updated.Annotations = map[string]string{}
	}
	maps.Copy(updated.Annotations, desired.Annotations)
	updated.OwnerReferences = desired.OwnerReferences
	updated.Endpoints = desired.Endpoints
	updated.Ports = desired.Ports
	_, err := c.client.DiscoveryV1().EndpointSlices(s.ns).Update(s.ctx, updated, metav1.UpdateOptions{})
	s.wrote("update", "endpointslices", desired.Name, err)
	if err == nil {
		s.final.slices[desired.Name] = updated
	}
}

// sliceConflict handles a create refused because the name exists: ours but
// not cached yet (retry), or foreign (report, leave alone, look again
// later: the informer sees only the controller's own slices).
func (s *syncer) sliceConflict(desired *discoveryv1.EndpointSlice) {
	got, err := s.c.client.DiscoveryV1().EndpointSlices(s.ns).Get(s.ctx, desired.Name, metav1.GetOptions{})
	if err != nil {
		s.errs = append(s.errs, fmt.Errorf("create endpointslice %s/%s: exists, and get: %w", s.ns, desired.Name, err))
		return
	}
	if _, owned := ownedKey(got); owned {
		// Made by an earlier sync, not cached yet: its informer event
		// enqueues the key again. It records what it records.
		s.logger.V(4).Info("EndpointSlice exists but is not cached yet", "endpointslice", klog.KObj(got))
		s.final.slices[got.Name] = got
		return
	}
	conflictsTotal.WithLabelValues("endpointslices").Inc()
	s.status.reason = ReasonNameTaken
	s.requeue(foreignSliceRecheck)
	s.logger.Info("EndpointSlice name taken", "endpointslice", klog.KObj(got))
	s.c.recorder.Event(got, corev1.EventTypeWarning, ReasonNameTaken,
		fmt.Sprintf("Name wanted by the mirror of remote Service %s/%s/%s is taken by an EndpointSlice mcmirror does not manage; leaving it alone", s.cluster, s.ns, s.name))
}

// sliceNeedsUpdate compares the fields the controller owns.
func sliceNeedsUpdate(existing, desired *discoveryv1.EndpointSlice) bool {
	return !metaHolds(existing, desired) ||
		!apiequality.Semantic.DeepEqual(existing.OwnerReferences, desired.OwnerReferences) ||
		!apiequality.Semantic.DeepEqual(existing.Endpoints, desired.Endpoints) ||
		!apiequality.Semantic.DeepEqual(existing.Ports, desired.Ports)
}

// metaHolds reports whether existing has every label and annotation of
// desired, with its value.
func metaHolds(existing, desired metav1.Object) bool {
	for _, m := range [][2]map[string]string{
		{existing.GetLabels(), desired.GetLabels()}, {existing.GetAnnotations(), desired.GetAnnotations()},
	} {
		for k, v := range m[1] {
			if m[0][k] != v {
				return false
			}
		}
	}
	return true
}

// wrote counts one write and, when it failed, records the error: the
// sync fails and is retried with backoff (handleErr). A failure the API
// server will repeat (an invalid object, a refusal) is also a warning
// Event on the mirror, so that it does not go unseen.
func (s *syncer) wrote(verb, resource, name string, err error) {
	s.writes++
	if countWrite(verb, resource, err) == nil {
		return
	}
	err = fmt.Errorf("%s %s %s/%s: %w", verb, resource, s.ns, name, err)
	s.errs = append(s.errs, err)
	if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) || apierrors.IsRequestEntityTooLargeError(err) {
		s.c.recorder.Event(mirrorRef(s.cluster, s.ns, s.name), corev1.EventTypeWarning, ReasonWriteFailed, err.Error())
	}
}

// countWrite counts one write, and its error by the API's reason when it
// failed; it returns err.
func countWrite(verb, resource string, err error) error {
	writesTotal.WithLabelValues(verb, resource).Inc()
	if err == nil {
		return nil
	}
	reason := string(apierrors.ReasonForError(err))
	if reason == "" {
		reason = "Unknown"
	}
	writeErrorsTotal.WithLabelValues(verb, resource, reason).Inc()
	return err
}

// mirrorRef is the Event target of key cluster/ns/name: its Service
// mirror, or the remote Service's name when no valid mirror name exists.
func mirrorRef(cluster, ns, name string) *corev1.ObjectReference {
	if m, err := labels.MirrorName(name, cluster); err == nil {
		name = m
	}
	return &corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: ns, Name: name}
}

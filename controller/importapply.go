package controller

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/remote"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// syncImport brings the import of one namespace/name to its plan: the
// ServiceImport, then the derived Service, then its EndpointSlices, then
// the ServiceImport's exported labels and annotations (importmeta.go),
// each written only when it differs. sources and links are importSources'.
func (c *Controller) syncImport(ctx context.Context, key string, sources []importSource, links linkState) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	in := importInput{ns: ns, name: name, sources: sources, policy: &c.opts.EndpointPolicy, maxEndpoints: c.opts.MaxImportEndpoints}
	var si *mcsv1beta1.ServiceImport
	if obj, ok, _ := c.mcs.imports.GetIndexer().GetByKey(key); ok {
		si, _ = obj.(*mcsv1beta1.ServiceImport)
	}
	if si != nil && si.Labels[labels.ManagedBy] != labels.ManagedByValue {
		// Another MCS implementation's: mcmirror stays out of its way.
		return nil
	}
	derivedName := DerivedName(ns, name)
	if obj, ok, _ := c.services.GetIndexer().GetByKey(ns + "/" + derivedName); ok {
		in.derived, _ = obj.(*corev1.Service)
	}
	if in.derived != nil && in.derived.Labels[labels.ManagedBy] != labels.ManagedByValue {
		c.recorder.Eventf(in.derived, corev1.EventTypeWarning, ReasonNameTaken,
			"Service %s/%s holds the name of the derived Service of ServiceImport %s; it is left alone and %s is not imported", ns, derivedName, name, name)
		conflictsTotal.WithLabelValues("services").Inc()
		return nil
	}
	if in.derived != nil && in.derived.Labels[labels.ServiceImport] != name {
		c.derivedTaken(in.derived, name)
		return nil
	}
	existing := c.importSlices(ns, name)
	held, until := c.heldClusters(links, existingClusters(si, existing))
	if len(held) > 0 {
		if now := c.now(); now.Before(until) {
			return importHeld{after: until.Sub(now)}
		}
		if len(sources) == 0 {
			// Nothing synced says anything of it: left as it is.
			return nil
		}
		in.kept = keptSlices(held, existing)
	}
	if _, ok, _ := c.namespaces.GetIndexer().GetByKey(ns); in.sources != nil && !ok {
		return nil
	}
	if in.derived, err = c.migrateDerived(ctx, ns, name, in.derived, len(in.sources) > 0); err != nil {
		return err
	}
	if si != nil {
		in.importUID = si.UID
	}
	p := planImport(in)
	if !p.exists() {
		c.forgetRefusals(key)
		return c.deleteImport(ctx, ns, name, si, in.derived)
	}
	if si == nil {
		si, err = c.mcs.client.MulticlusterV1beta1().ServiceImports(ns).Create(ctx, &mcsv1beta1.ServiceImport{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{labels.ManagedBy: labels.ManagedByValue},
				Annotations: map[string]string{DerivedServiceAnnotation: p.derived.Name}},
			Spec: p.spec,
		}, metav1.CreateOptions{})
		if err := countWrite("create", "serviceimports", err); err != nil {
			return err
		}
		in.importUID = si.UID
		p = planImport(in)
	}
	if len(held) > 0 {
		c.noteKept(si, held)
	}
	if in.derived, err = c.applyDerived(ctx, in.derived, p); err != nil {
		return err
	}
	p = planImport(in)
	c.noteRefusals(si, p.refused)
	if err := c.applyImportSlices(ctx, ns, name, p.slices); err != nil {
		return err
	}
	if !apiequality.Semantic.DeepEqual(si.Spec, p.spec) || si.Annotations[DerivedServiceAnnotation] != p.derived.Name {
		next := si.DeepCopy()
		next.ManagedFields = nil // the server keeps them as they are
		next.Spec = p.spec
		metav1.SetMetaDataAnnotation(&next.ObjectMeta, DerivedServiceAnnotation, p.derived.Name)
		si, err = c.mcs.client.MulticlusterV1beta1().ServiceImports(ns).Update(ctx, next, metav1.UpdateOptions{})
		if err := countWrite("update", "serviceimports", err); err != nil {
			return err
		}
	}
	if !apiequality.Semantic.DeepEqual(si.Status.Clusters, p.clusters) {
		next := si.DeepCopy()
		next.ManagedFields = nil
		next.Status.Clusters = p.clusters
		_, err = c.mcs.client.MulticlusterV1beta1().ServiceImports(ns).UpdateStatus(ctx, next, metav1.UpdateOptions{})
		if err := countWrite("update", "serviceimports/status", err); err != nil {
			return err
		}
	}
	return c.applyImportMetadata(ctx, si, p.merged.Metadata)
}

// importSources are the exports of namespace/name that this cluster can
// reach: its own, and every synced link's; and what is known of the
// links, read in the same look (a link that syncs meanwhile is either a
// source or waited for, never neither).
func (c *Controller) importSources(ns, name string) ([]importSource, linkState) {
	var out []importSource
	if obj, ok, _ := c.services.GetIndexer().GetByKey(ns + "/" + name); ok {
		if svc, _ := obj.(*corev1.Service); svc != nil && c.exportedLocally(svc) {
			s := peerExport(c.opts.Cluster, svc)
			src := importSource{cluster: c.opts.Cluster, created: s.Created, service: svc, metadata: s.Metadata, families: svc.Spec.IPFamilies}
			for _, inf := range c.mcs.exportSlices {
				src.slices = appendSlices(src.slices, inf, ns+"/"+name)
			}
			out = append(out, src)
		}
	}
	ls := linkState{waiting: map[string]time.Time{}, linked: map[string]bool{}}
	sourcesSynced := c.linkSourcesSynced()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !sourcesSynced {
		ls.sourcesUntil = c.startupDeadline(c.startedAt)
	}
	for _, r := range c.links.Serving() {
		ls.linked[r.name] = true
		if !r.synced.Load() {
			ls.waiting[r.name] = c.startupDeadline(r.startedAt)
			continue
		}
		svc := r.exportedService(ns, name)
		if svc == nil {
			continue
		}
		s := peerExport(r.name, svc)
		src := importSource{cluster: r.name, created: s.Created, service: svc, metadata: s.Metadata}
		if labels.ExportMode(svc.Labels) == labels.Flat {
			src.slices, src.screened, src.families = r.slicesOf(ns, name), true, svc.Spec.IPFamilies
		} else if mirror, err := labels.MirrorName(name, r.name); err == nil {
			// The mirror's own slices: the egress, or the per-pod
			// mirrors of a headless Service; of the egress's families.
			src.slices = appendSlices(nil, c.slices, ns+"/"+mirror)
			src.families = sliceFamilies(src.slices)
		}
		out = append(out, src)
	}
	return out, ls
}

// startupDeadline is when a start-up wait that began at start ends (one
// not begun yet begins now).
func (c *Controller) startupDeadline(start time.Time) time.Time {
	if start.IsZero() {
		start = c.now()
	}
	return start.Add(c.opts.LinkStartupTimeout)
}

// exportedLocally reports whether the local Service svc is exported: by
// the export selector, or stamped for a ServiceExport that exists (a stamp
// without one is no export: syncExport removes it); never a mirror.
func (c *Controller) exportedLocally(svc *corev1.Service) bool {
	set := k8slabels.Set(svc.Labels)
	if c.ways[0].Services.Matches(set) { // the export selector's way (New)
		return true
	}
	_, byExport, _ := c.mcs.exports.GetIndexer().GetByKey(svc.Namespace + "/" + svc.Name)
	return byExport && remote.Stamped.Services.Matches(set)
}

// appendSlices appends the EndpointSlices of Service key that inf holds
// (indexed byService), once each.
func appendSlices(out []*discoveryv1.EndpointSlice, inf cache.SharedIndexInformer, key string) []*discoveryv1.EndpointSlice {
	objs, _ := inf.GetIndexer().ByIndex(byService, key)
	for _, obj := range objs {
		es, ok := obj.(*discoveryv1.EndpointSlice)
		if ok && !slices.ContainsFunc(out, func(o *discoveryv1.EndpointSlice) bool { return o.UID == es.UID }) {
			out = append(out, es)
		}
	}
	return out
}

// applyDerived makes the derived Service as p wants it and returns it as
// the API server has it (with its ClusterIPs and UID).
func (c *Controller) applyDerived(ctx context.Context, live *corev1.Service, p importPlan) (*corev1.Service, error) {
	services := c.client.CoreV1().Services(p.derived.Namespace)
	if live != nil && p.replace {
		err := services.Delete(ctx, live.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &live.UID}})
		if err := countWrite("delete", "services", err); err != nil && !apierrors.IsNotFound(err) {
			return nil, err
		}
		live = nil
	}
	if live == nil {
		created, err := services.Create(ctx, p.derived, metav1.CreateOptions{})
		return created, countWrite("create", "services", err)
	}
	next := live.DeepCopy()
	next.Labels = p.derived.Labels
	next.OwnerReferences = p.derived.OwnerReferences
	next.Spec.Ports = p.derived.Spec.Ports
	next.Spec.SessionAffinity = p.derived.Spec.SessionAffinity
	next.Spec.SessionAffinityConfig = p.derived.Spec.SessionAffinityConfig
	next.Spec.InternalTrafficPolicy = p.derived.Spec.InternalTrafficPolicy
	next.Spec.TrafficDistribution = p.derived.Spec.TrafficDistribution
	if p.derived.Spec.IPFamilyPolicy != nil {
		next.Spec.IPFamilyPolicy = p.derived.Spec.IPFamilyPolicy
	}
	if derivedEqual(live, next) {
		return live, nil
	}
	updated, err := services.Update(ctx, next, metav1.UpdateOptions{})
	return updated, countWrite("update", "services", err)
}

// derivedEqual reports whether two derived Services agree on what the
// controller sets. Defaults the API server fills in (a port's TargetPort,
// an affinity's timeout, the traffic policy) count as agreeing.
func derivedEqual(live, next *corev1.Service) bool {
	if !maps.Equal(live.Labels, next.Labels) || !apiequality.Semantic.DeepEqual(live.OwnerReferences, next.OwnerReferences) {
		return false
	}
	if len(live.Spec.Ports) != len(next.Spec.Ports) {
		return false
	}
	for i, a := range live.Spec.Ports {
		b := next.Spec.Ports[i]
		if a.Name != b.Name || a.Protocol != b.Protocol || a.Port != b.Port || !apiequality.Semantic.DeepEqual(a.AppProtocol, b.AppProtocol) {
			return false
		}
	}
	return live.Spec.SessionAffinity == next.Spec.SessionAffinity &&
		ptr.Deref(live.Spec.IPFamilyPolicy, "") == ptr.Deref(next.Spec.IPFamilyPolicy, "")
}

// applyImportSlices makes the derived Service's EndpointSlices exactly
// desired.
func (c *Controller) applyImportSlices(ctx context.Context, ns, name string, desired map[string]*discoveryv1.EndpointSlice) error {
	api := c.client.DiscoveryV1().EndpointSlices(ns)
	var errs []error
	existing := c.importSlices(ns, name)
	for _, es := range existing {
		if _, ok := desired[es.Name]; !ok {
			err := api.Delete(ctx, es.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &es.UID}})
			if err := countWrite("delete", "endpointslices", err); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	}
	for _, want := range desired {
		have := existing[want.Name]
		switch {
		case have == nil:
			_, err := api.Create(ctx, want, metav1.CreateOptions{})
			errs = append(errs, countWrite("create", "endpointslices", err))
		case sliceNeedsUpdate(have, want):
			next := have.DeepCopy()
			next.Labels, next.OwnerReferences = want.Labels, want.OwnerReferences
			next.AddressType, next.Endpoints, next.Ports = want.AddressType, want.Endpoints, want.Ports
			_, err := api.Update(ctx, next, metav1.UpdateOptions{})
			errs = append(errs, countWrite("update", "endpointslices", err))
		}
	}
	return errors.Join(errs...)
}

// importSlices are the existing EndpointSlices of the derived Service of
// namespace/name, by name: those the controller made for this import.
func (c *Controller) importSlices(ns, name string) map[string]*discoveryv1.EndpointSlice {
	return c.derivedSlices(ns, DerivedName(ns, name), name)
}

// derivedSlices are the EndpointSlices of Service ns/derived that the
// controller made for import name, by name. Those of another import are
// never among them, whatever Service they name.
func (c *Controller) derivedSlices(ns, derived, name string) map[string]*discoveryv1.EndpointSlice {
	out := map[string]*discoveryv1.EndpointSlice{}
	objs, _ := c.slices.GetIndexer().ByIndex(byService, ns+"/"+derived)
	for _, obj := range objs {
		if es, ok := obj.(*discoveryv1.EndpointSlice); ok && es.Labels[labels.ManagedBy] == labels.ManagedByValue && es.Labels[mcsv1beta1.LabelServiceName] == name {
			out[es.Name] = es
		}
	}
	return out
}

// deleteImport deletes what the import of namespace/name left: its
// EndpointSlices, the derived Service and the ServiceImport, those the
// controller made.
func (c *Controller) deleteImport(ctx context.Context, ns, name string, si *mcsv1beta1.ServiceImport, derived *corev1.Service) error {
	if err := c.applyImportSlices(ctx, ns, name, nil); err != nil {
		return err
	}
	if derived != nil {
		err := c.client.CoreV1().Services(ns).Delete(ctx, derived.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &derived.UID}})
		if err := countWrite("delete", "services", err); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	if si != nil {
		err := c.mcs.client.MulticlusterV1beta1().ServiceImports(ns).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &si.UID}})
		if err := countWrite("delete", "serviceimports", err); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		klog.FromContext(ctx).V(2).Info("Deleted ServiceImport", "serviceImport", klog.KRef(ns, name))
	}
	return nil
}

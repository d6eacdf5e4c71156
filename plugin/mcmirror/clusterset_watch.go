package mcmirror

import (
	"slices"

	"github.com/mcmirror/mcmirror/internal/labels"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

// The derived Services: for every Service exported by at least one cluster,
// the controller keeps in this cluster a Service derived-<hash> labelled
// with the ServiceImport it stands for (labels.ServiceImport) and its own
// managed-by label. It is a ClusterIP Service for a ClusterSetIP import (its
// ClusterIPs are the ClusterSetIPs) and a headless one for a Headless
// import. The clusterset zones answer from it, and from the exported
// Services the index already holds: the plugin reads no ServiceImport, and
// needs no permission beyond listing and watching Services.

// Derived is a derived Service, trimmed to what DNS needs.
type Derived struct {
	objMeta
	// Import is the ServiceImport's name (labels.ServiceImport): the
	// exported Service's, in the same namespace.
	Import string
	// Managed is whether the controller made it (labels.ManagedBy); see
	// Service.Exported for why it is checked again.
	Managed    bool
	Headless   bool
	ClusterIPs []string
	Ports      []Port
}

// DeepCopyObject implements the runtime.Object interface.
func (d *Derived) DeepCopyObject() runtime.Object {
	c := *d
	c.ClusterIPs = slices.Clone(d.ClusterIPs)
	c.Ports = slices.Clone(d.Ports)
	return &c
}

// toDerived is the informer transform for derived Services.
func toDerived(obj any) (any, error) {
	switch s := obj.(type) {
	case *Derived:
		return s, nil
	case *corev1.Service:
		return &Derived{
			objMeta:    objMeta{Name: s.Name, Namespace: s.Namespace, Version: s.ResourceVersion},
			Import:     s.Labels[labels.ServiceImport],
			Managed:    s.Labels[labels.ManagedBy] == labels.ManagedByValue,
			Headless:   s.Spec.ClusterIP == corev1.ClusterIPNone,
			ClusterIPs: clusterIPs(&s.Spec),
			Ports:      servicePorts(s.Spec.Ports),
		}, nil
	}
	return obj, nil
}

// derivedImportIndex indexes the derived Services by namespace/import.
const derivedImportIndex = "import"

// newDerivedStore makes the store of the local cluster's derived Services.
func (c *watcher) newDerivedStore(cl *cluster) *objectStore {
	return newObjectStore(toDerived, func(obj any) bool {
		d, ok := obj.(*Derived)
		return ok && d.Managed && d.Import != ""
	}, cache.Indexers{derivedImportIndex: func(obj any) ([]string, error) {
		d, ok := obj.(*Derived)
		if !ok || d.Import == "" {
			return nil, nil
		}
		return []string{d.Namespace + "/" + d.Import}, nil
	}}, c.derivedHandler(cl))
}

// derivedHandler queues the group of the import a derived Service stands
// for (both, when its label changed).
func (c *watcher) derivedHandler(cl *cluster) storeHandler {
	enqueue := func(d *Derived) {
		if d.Import != "" {
			c.enqueue(groupKey{d.Namespace, d.Import})
		}
	}
	return handler(
		func(d *Derived, _ bool) { cl.touched(objDerived, 1); enqueue(d) },
		func(old, d *Derived) { cl.touched(objDerived, 0); enqueue(old); enqueue(d) },
		func(d *Derived) { cl.touched(objDerived, -1); enqueue(d) },
	)
}

// Derived implements source: the derived Service of import ns/name, or nil.
// Should there be several, the first by name answers.
func (c *watcher) Derived(ns, name string) *Derived {
	cl := c.cluster(c.local)
	if cl == nil || cl.derived == nil {
		return nil
	}
	objs, err := cl.derived.idx.ByIndex(derivedImportIndex, ns+"/"+name)
	if err != nil {
		return nil
	}
	var best *Derived
	for _, obj := range objs {
		if d, ok := obj.(*Derived); ok && d.Managed && (best == nil || d.Name < best.Name) {
			best = d
		}
	}
	return best
}

package watch

import (
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"

	"k8s.io/client-go/tools/cache"
)

// The derived Services (object/derived.go), watched in the local cluster
// with clusterset.

// derivedImportIndex indexes the derived Services by namespace/import.
const derivedImportIndex = "import"

// newDerivedStore makes the store of the local cluster's derived Services.
func (c *Watcher) newDerivedStore(cl *cluster) *objectStore {
	return newObjectStore(object.ToDerived, func(obj any) bool {
		d, ok := obj.(*object.Derived)
		return ok && d.Managed && d.Import != ""
	}, cache.Indexers{derivedImportIndex: func(obj any) ([]string, error) {
		d, ok := obj.(*object.Derived)
		if !ok || d.Import == "" {
			return nil, nil
		}
		return []string{d.Namespace + "/" + d.Import}, nil
	}}, c.derivedHandler(cl))
}

// derivedHandler queues the group of the import a derived Service stands
// for (both, when its label changed).
func (c *Watcher) derivedHandler(cl *cluster) storeHandler {
	enqueue := func(d *object.Derived) {
		if d.Import != "" {
			c.Enqueue(object.ServiceKey(d.Namespace, d.Import))
		}
	}
	return handler(
		func(d *object.Derived, _ bool) { cl.touched(objDerived, 1); enqueue(d) },
		func(old, d *object.Derived) { cl.touched(objDerived, 0); enqueue(old); enqueue(d) },
		func(d *object.Derived) { cl.touched(objDerived, -1); enqueue(d) },
	)
}

// Derived implements index.Source: the derived Service of import ns/name, or nil.
// Should there be several, the first by name answers.
func (c *Watcher) Derived(ns, name string) *object.Derived {
	cl := c.cluster(c.local)
	if cl == nil || cl.derived == nil {
		return nil
	}
	objs, err := cl.derived.idx.ByIndex(derivedImportIndex, ns+"/"+name)
	if err != nil {
		return nil
	}
	var best *object.Derived
	for _, obj := range objs {
		if d, ok := obj.(*object.Derived); ok && d.Managed && (best == nil || d.Name < best.Name) {
			best = d
		}
	}
	return best
}

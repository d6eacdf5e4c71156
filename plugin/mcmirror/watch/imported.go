package watch

// Import mode (source import): only the local cluster is watched. The
// mcmirror controller, which alone watches the linked clusters, writes
// there a mirror Service for every export (labelled with the cluster and
// the remote Service, and saying its mode and shape: object.Mirror.Export)
// and EndpointSlices for it: per-pod mirrors' ClusterIPs by hostname in
// gateway mode, copies of the remote endpoints in flat mode (the
// controller's --mirror-flat-endpoints). The linked clusters' side of
// index.Source is read from those, so the index answers the same names
// from them as from the linked clusters' own objects, and a linked API
// server serves one controller, however many DNS replicas there are.

import (
	"errors"
	"slices"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"

	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
)

var errImportLinks = errors.New("in import mode (source import) no cluster is linked: the controller watches them")

const (
	// exportIndex indexes the Service mirrors by the export they stand
	// for: cluster/namespace/service.
	exportIndex = "export"
	// exportClusterIndex indexes them by cluster, for Links.
	exportClusterIndex = "export-cluster"
)

func exportOf(obj any) ([]string, error) {
	if m, ok := obj.(*object.Mirror); ok && m.Export != nil {
		return []string{m.Cluster + "/" + m.Namespace + "/" + m.Export.Name}, nil
	}
	return nil, nil
}

func exportClusterOf(obj any) ([]string, error) {
	if m, ok := obj.(*object.Mirror); ok && m.Export != nil {
		return []string{m.Cluster}, nil
	}
	return nil, nil
}

// newMirrorSliceStore makes the store of the mirrors' EndpointSlices.
func (c *Watcher) newMirrorSliceStore(cl *cluster) *objectStore {
	sel := k8slabels.SelectorFromSet(k8slabels.Set{labels.MirroredService: labels.MirroredServiceValue})
	return newObjectStore(sliceTransform(sel, object.ToMirrorSlice), isSlice,
		cache.Indexers{sliceServiceIndex: slicesByService}, c.mirrorSliceHandler(cl))
}

// mirrorSliceHandler queues the group of the export a mirror's slice
// stands for.
func (c *Watcher) mirrorSliceHandler(cl *cluster) storeHandler {
	enqueue := func(s *object.Slice, delta int64) {
		cl.touched(objMirrorSlice, delta)
		if s.Remote != "" {
			c.Enqueue(object.ServiceKey(s.Namespace, s.Remote))
		}
	}
	return handler(
		func(s *object.Slice, initial bool) {
			if !initial && !s.TriggerTime.IsZero() && s.Remote != "" {
				c.noteTrigger(object.ServiceKey(s.Namespace, s.Remote), c.local, s.TriggerTime)
			}
			enqueue(s, 1)
		},
		func(old, s *object.Slice) {
			if old.Remote != s.Remote && old.Remote != "" {
				c.Enqueue(object.ServiceKey(old.Namespace, old.Remote))
			}
			if !s.TriggerTime.IsZero() && !s.TriggerTime.Equal(old.TriggerTime) && s.Remote != "" {
				c.noteTrigger(object.ServiceKey(s.Namespace, s.Remote), c.local, s.TriggerTime)
			}
			enqueue(s, 0)
		},
		func(s *object.Slice) { enqueue(s, -1) },
	)
}

// importedMirror returns the Service mirror of the export ns/name of
// cluster; the one whose name sorts first should two claim it.
func (c *Watcher) importedMirror(cluster, ns, name string) *object.Mirror {
	objs, err := c.localCluster.mirrors.idx.ByIndex(exportIndex, cluster+"/"+ns+"/"+name)
	if err != nil {
		return nil
	}
	var best *object.Mirror
	for _, obj := range objs {
		if m, ok := obj.(*object.Mirror); ok && m.Export != nil && (best == nil || m.Name < best.Name) {
			best = m
		}
	}
	return best
}

// importedSlices returns the EndpointSlices of the mirror of the export
// ns/name of cluster: its own, not its per-pod mirrors'.
func (c *Watcher) importedSlices(cluster, ns, name string) []*object.Slice {
	m := c.importedMirror(cluster, ns, name)
	if m == nil {
		return nil
	}
	objs, err := c.localCluster.mirrorSlices.idx.ByIndex(sliceServiceIndex, ns+"/"+m.Name)
	if err != nil {
		return nil
	}
	out := make([]*object.Slice, 0, len(objs))
	for _, obj := range objs {
		if s, ok := obj.(*object.Slice); ok {
			out = append(out, s)
		}
	}
	return out
}

// importedLinks returns the clusters the local mirrors stand for, in name
// order.
func (c *Watcher) importedLinks() []string {
	names := c.localCluster.mirrors.idx.ListIndexFuncValues(exportClusterIndex)
	names = slices.DeleteFunc(names, func(n string) bool { return n == c.local })
	slices.Sort(names)
	return names
}

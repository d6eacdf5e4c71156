package watch

import (
	"slices"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"

	corev1 "k8s.io/api/core/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
)

// The Services of a cluster are held in three stores, one per watch: the
// export selector's and the ServiceExport stamp's make the exported
// Services (a selector cannot OR two keys), and the federated selector's
// (labels.FederatedSelector, Linkerd's default mirror.linkerd.io/federated
// =member, which the export selector does not select) the federated
// members. A federated member is not exported: it makes no <svc>-<cluster>
// name, nor <svc>-global; it answers its federated Service's name
// (index/federated.go), which the local mirror store holds. The slices of a
// Service any store holds are kept.

// fedTransform returns the informer transform of the federated members
// that sel selects. A member's mode is its export mode when it has one
// (Linkerd's export label, or the ServiceExport stamp), else flat: Linkerd
// reaches the members of a federated Service at their pods' addresses, as
// in flat mode.
func fedTransform(sel k8slabels.Selector) cache.TransformFunc {
	trim := serviceTransform(sel)
	return func(obj any) (any, error) {
		t, err := trim(obj)
		if s, ok := obj.(*corev1.Service); ok && err == nil {
			_, exported := s.Labels[labels.Exported]
			_, stamped := s.Labels[labels.ServiceExportMode]
			if !exported && !stamped {
				t.(*object.Service).Mode = labels.Flat
			}
		}
		return t, err
	}
}

// fedMemberIndex indexes the local federated Services by ns/<member name>,
// for each of their members.
const fedMemberIndex = "federated-member"

// mirrorIndexers returns the indexers of the local mirror store: the
// federated members (here) and, in import mode, the exports the mirrors
// stand for (imported.go).
func mirrorIndexers(imports bool) cache.Indexers {
	if !imports {
		return cache.Indexers{fedMemberIndex: fedMembers}
	}
	return cache.Indexers{fedMemberIndex: fedMembers, exportIndex: exportOf, exportClusterIndex: exportClusterOf}
}

// mirrorTransform returns the transform of the local mirror store: in
// import mode, a mirror keeps the export it stands for.
func mirrorTransform(imports bool) cache.TransformFunc {
	if imports {
		return object.ToMirror
	}
	return object.ToMirrorWithoutExport
}

// fedMembers is the index function of fedMemberIndex.
func fedMembers(obj any) ([]string, error) {
	m, ok := obj.(*object.Mirror)
	if !ok || m.Fed == nil {
		return nil, nil
	}
	names := m.Fed.MemberNames()
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = m.Namespace + "/" + n
	}
	return out, nil
}

// Member implements index.Source.
func (c *Watcher) Member(cluster, ns, name string) *object.Service {
	if c.imports && cluster != c.local {
		return c.Service(cluster, ns, name) // members are not imported: exports are
	}
	cl := c.cluster(cluster)
	if cl == nil || cl.health.withdrawn.Load() {
		return nil
	}
	if s := exportedIn(cl.fedServices, ns+"/"+name); s != nil {
		return s
	}
	return cl.service(ns + "/" + name)
}

// Federations implements index.Source.
func (c *Watcher) Federations(ns, member string) []string {
	cl := c.cluster(c.local)
	if cl == nil || cl.mirrors == nil {
		return nil
	}
	objs, err := cl.mirrors.idx.ByIndex(fedMemberIndex, ns+"/"+member)
	if err != nil {
		return nil
	}
	var out []string
	for _, obj := range objs {
		if m, ok := obj.(*object.Mirror); ok && m.Fed != nil && m.IsMirror {
			out = append(out, m.Name)
		}
	}
	slices.Sort(out)
	return out
}

// serviceStores are the stores of the cluster's Services: its exported
// ones, the export selector's first, and its federated members.
func (cl *cluster) serviceStores() [3]*objectStore {
	return [3]*objectStore{cl.services, cl.mcsServices, cl.fedServices}
}

// service returns the cluster's exported Service key (ns/name), as the
// export selector's watch last said, else as the ServiceExport stamp's
// did; nil when neither exports it. A Service can be in both.
func (cl *cluster) service(key string) *object.Service {
	for _, st := range [2]*objectStore{cl.services, cl.mcsServices} {
		if s := exportedIn(st, key); s != nil {
			return s
		}
	}
	return nil
}

// exportedIn returns the Service key that st holds, selected by its watch's
// selector, or nil.
func exportedIn(st *objectStore, key string) *object.Service {
	obj, ok, _ := st.idx.GetByKey(key)
	if s, _ := obj.(*object.Service); ok && s != nil && s.Exported {
		return s
	}
	return nil
}

package remote

// A link narrowed to some namespaces (link.Namespaces): every list and
// watch of it is, so that what it brings comes from those alone, for the
// DNS plugin and the controller alike. The API server leaves out what a
// field selector can say: the denied namespaces
// (metadata.namespace!=a,metadata.namespace!=b) or the one allowed
// namespace (metadata.namespace=a); the rest (several allowed namespaces)
// is left out as it comes, before any store holds it.

import (
	"strings"

	"github.com/mcmirror/mcmirror/internal/link"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// fieldSelector returns the field selector that narrows a list or watch
// to ns on the API server, or "" when none does all of it.
func fieldSelector(ns link.Namespaces) string {
	if len(ns.Allow) == 1 {
		return "metadata.namespace=" + ns.Allow[0]
	}
	if len(ns.Allow) > 0 {
		return "" // only "this or that": left out as it comes
	}
	parts := make([]string, len(ns.Deny))
	for i, d := range ns.Deny {
		parts[i] = "metadata.namespace!=" + d
	}
	return strings.Join(parts, ",")
}

// allowed reports whether obj is of a namespace ns allows; an object
// without metadata (a watch's error) is.
func allowed(ns link.Namespaces, obj runtime.Object) bool {
	m, err := meta.Accessor(obj)
	return err != nil || ns.Allows(m.GetNamespace())
}

// narrowList leaves the items of list that ns does not allow out of it,
// in place.
func narrowList(ns link.Namespaces, list runtime.Object) error {
	items, err := meta.ExtractList(list)
	if err != nil {
		return err
	}
	kept := items[:0]
	for _, it := range items {
		if allowed(ns, it) {
			kept = append(kept, it)
		}
	}
	if len(kept) == len(items) {
		return nil
	}
	return meta.SetList(list, kept)
}

// narrowEvent reports whether watch event e is kept: a bookmark or an
// error always is, an object only of a namespace ns allows.
func narrowEvent(ns link.Namespaces, e watch.Event) bool {
	switch e.Type {
	case watch.Added, watch.Modified, watch.Deleted:
		return allowed(ns, e.Object)
	}
	return true
}

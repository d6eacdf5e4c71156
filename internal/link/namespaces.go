package link

import (
	"fmt"
	"slices"
	"strings"

	"github.com/mcmirror/mcmirror/internal/labels"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Namespaces narrows a link to some namespaces of the linked cluster:
// every name, mirror and import the link brings comes from them alone,
// and nothing of the others is even received (internal/remote applies
// it to every list and watch of the link). The zero value is every
// namespace. A static link takes it from the configuration (the
// Corefile's allowed_namespaces and denied_namespaces, the controller's
// --link-allowed-namespaces and --link-denied-namespaces), a link Secret
// from its annotations (labels.LinkAllowedNamespaces,
// labels.LinkDeniedNamespaces), so that the DNS plugin and the controller
// of a cluster read the same lists.
type Namespaces struct {
	// Allow, when not empty, are the only namespaces of the link; sorted.
	Allow []string
	// Deny are namespaces of the link never watched; sorted.
	Deny []string
}

// NewNamespaces returns the namespaces allow and deny say: each a
// namespace name, none given twice nor both allowed and denied.
func NewNamespaces(allow, deny []string) (Namespaces, error) {
	var n Namespaces
	for _, l := range []struct {
		what string
		in   []string
		out  *[]string
	}{{"allowed", allow, &n.Allow}, {"denied", deny, &n.Deny}} {
		for _, ns := range l.in {
			if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
				return Namespaces{}, fmt.Errorf("%s namespaces: %q is not a namespace name: %s", l.what, ns, strings.Join(errs, "; "))
			}
			if slices.Contains(*l.out, ns) {
				return Namespaces{}, fmt.Errorf("%s namespaces: %q given twice", l.what, ns)
			}
			*l.out = append(*l.out, ns)
		}
		slices.Sort(*l.out)
	}
	for _, ns := range n.Deny {
		if slices.Contains(n.Allow, ns) {
			return Namespaces{}, fmt.Errorf("namespace %q is both allowed and denied", ns)
		}
	}
	return n, nil
}

// SplitNamespaces splits a comma-separated list of namespaces, as the
// annotations and the flags give them: "a,b, c". An empty list, or an
// empty item, is an error: an operator who writes one means something,
// and nothing would be read as every namespace.
func SplitNamespaces(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("empty list of namespaces (leave it out for every namespace)")
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		if parts[i] = strings.TrimSpace(p); parts[i] == "" {
			return nil, fmt.Errorf("%q: an empty namespace name", s)
		}
	}
	return parts, nil
}

// NamespacesOf returns the namespaces of a link Secret, from its
// annotations.
func NamespacesOf(s *corev1.Secret) (Namespaces, error) {
	var lists [2][]string
	for i, key := range []string{labels.LinkAllowedNamespaces, labels.LinkDeniedNamespaces} {
		v, ok := s.Annotations[key]
		if !ok {
			continue
		}
		l, err := SplitNamespaces(v)
		if err != nil {
			return Namespaces{}, fmt.Errorf("annotation %s: %w", key, err)
		}
		lists[i] = l
	}
	n, err := NewNamespaces(lists[0], lists[1])
	if err != nil {
		return Namespaces{}, fmt.Errorf("annotations %s and %s: %w", labels.LinkAllowedNamespaces, labels.LinkDeniedNamespaces, err)
	}
	return n, nil
}

// All reports whether n is every namespace.
func (n Namespaces) All() bool { return len(n.Allow) == 0 && len(n.Deny) == 0 }

// Allows reports whether the link brings what namespace ns holds.
func (n Namespaces) Allows(ns string) bool {
	if len(n.Allow) > 0 && !slices.Contains(n.Allow, ns) {
		return false
	}
	return !slices.Contains(n.Deny, ns)
}

// Equal reports whether n and o are the same namespaces.
func (n Namespaces) Equal(o Namespaces) bool {
	return slices.Equal(n.Allow, o.Allow) && slices.Equal(n.Deny, o.Deny)
}

// String says which namespaces n is, for logs: "all", "only a,b",
// "all but c", or both.
func (n Namespaces) String() string {
	switch {
	case n.All():
		return "all"
	case len(n.Deny) == 0:
		return "only " + strings.Join(n.Allow, ",")
	case len(n.Allow) == 0:
		return "all but " + strings.Join(n.Deny, ",")
	}
	return "only " + strings.Join(n.Allow, ",") + " but " + strings.Join(n.Deny, ",")
}

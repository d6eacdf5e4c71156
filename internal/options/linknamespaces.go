package options

import (
	"fmt"
	"slices"
	"strings"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/link"
)

// linkNamespacesFlags are the flags of the allowed and the denied
// namespaces of static links.
var linkNamespacesFlags = [2]string{"link-allowed-namespaces", "link-denied-namespaces"}

// LinkNamespaces collects the repeatable --link-allowed-namespaces or
// --link-denied-namespaces NAME=NAMESPACE[,NAMESPACE...]: one list of a
// static link (--link NAME=...).
type LinkNamespaces struct {
	lists map[string][]string
	order []string
}

func (l *LinkNamespaces) String() string {
	out := make([]string, len(l.order))
	for i, n := range l.order {
		out[i] = n + "=" + strings.Join(l.lists[n], ",")
	}
	return strings.Join(out, " ")
}

// Set adds the list of one link.
func (l *LinkNamespaces) Set(v string) error {
	name, list, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return fmt.Errorf("want NAME=NAMESPACE[,NAMESPACE...], got %q", v)
	}
	if err := labels.ValidateClusterName(name); err != nil {
		return err
	}
	if _, dup := l.lists[name]; dup {
		return fmt.Errorf("%q given twice", name)
	}
	nss, err := link.SplitNamespaces(list)
	if err != nil {
		return err
	}
	if l.lists == nil {
		l.lists = map[string][]string{}
	}
	l.lists[name], l.order = nss, append(l.order, name)
	return nil
}

// narrowLinks returns links with the namespaces allowed and denied give
// them; a list that names no link, or that does not make namespaces, is
// an error in the flags' words.
func narrowLinks(links Links, allowed, denied *LinkNamespaces) ([]link.Static, error) {
	out := slices.Clone([]link.Static(links))
	for i, l := range []*LinkNamespaces{allowed, denied} {
		for _, name := range l.order {
			if !slices.ContainsFunc(out, func(s link.Static) bool { return s.Name == name }) {
				return nil, fmt.Errorf("--%s %s: no --link named %q (those of a link Secret are its annotations %s and %s)",
					linkNamespacesFlags[i], name, name, labels.LinkAllowedNamespaces, labels.LinkDeniedNamespaces)
			}
		}
	}
	for i, s := range out {
		ns, err := link.NewNamespaces(allowed.lists[s.Name], denied.lists[s.Name])
		if err != nil {
			return nil, fmt.Errorf("--%s and --%s of link %s: %w", linkNamespacesFlags[0], linkNamespacesFlags[1], s.Name, err)
		}
		out[i].Namespaces = ns
	}
	return out, nil
}

package mcmirror

import (
	"fmt"
	"maps"
	"slices"

	"github.com/coredns/caddy"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/link"
)

// allowed_namespaces CLUSTER NAMESPACE... and denied_namespaces CLUSTER
// NAMESPACE...: the namespaces of the static link CLUSTER that it brings
// (link.Namespaces; a link Secret's are its annotations).

// linkNamespaces are the lists of a Corefile, by static link and list:
// [0] allowed, [1] denied.
type linkNamespaces struct {
	lists map[string]*[2][]string
	at    map[string]string // file:line of the first, for errors
}

// parseLinkNamespaces parses one allowed_namespaces or denied_namespaces
// line into cfg.
func parseLinkNamespaces(c *caddy.Controller, cfg *config, prop string, args []string) error {
	name := args[0]
	if err := labels.ValidateClusterName(name); err != nil {
		return c.Errf("%s: %v", prop, err)
	}
	i := 0
	if prop == "denied_namespaces" {
		i = 1
	}
	if cfg.namespaces.lists == nil {
		cfg.namespaces = linkNamespaces{lists: map[string]*[2][]string{}, at: map[string]string{}}
	}
	l := cfg.namespaces.lists[name]
	if l == nil {
		l = &[2][]string{}
		cfg.namespaces.lists[name], cfg.namespaces.at[name] = l, where(c)
	}
	if l[i] != nil {
		return c.Errf("%s for %q given twice", prop, name)
	}
	l[i] = args[1:]
	// Checked at once, so that the error names this line.
	if _, err := link.NewNamespaces(l[0], l[1]); err != nil {
		return c.Errf("%s %s: %v", prop, name, err)
	}
	return nil
}

// setLinkNamespaces gives, once the whole stanza is read, each static
// link the namespaces its lines say; a line that names no static link
// is an error.
func (cfg *config) setLinkNamespaces() error {
	for _, name := range slices.Sorted(maps.Keys(cfg.namespaces.lists)) {
		i := slices.IndexFunc(cfg.links, func(l link.Static) bool { return l.Name == name })
		if i < 0 {
			return fmt.Errorf("%s - Error during parsing: allowed_namespaces and denied_namespaces: no link named %q "+
				"(those of a link Secret are its annotations %s and %s)",
				cfg.namespaces.at[name], name, labels.LinkAllowedNamespaces, labels.LinkDeniedNamespaces)
		}
		l := cfg.namespaces.lists[name]
		ns, err := link.NewNamespaces(l[0], l[1])
		if err != nil {
			return fmt.Errorf("%s - Error during parsing: %s: %w", cfg.namespaces.at[name], name, err)
		}
		cfg.links[i].Namespaces = ns
	}
	return nil
}

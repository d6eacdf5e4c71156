package mcmirror

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/coredns/caddy"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/link"
)

// allowed_cidrs CLUSTER CIDR...: the flat-mode endpoint addresses of a
// linked cluster that are answered (index/cidrs.go).

// parseCIDRs parses an allow-list: canonical prefixes such as 10.8.0.0/16
// or fd00:8::/64.
func parseCIDRs(args []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(args))
	for _, a := range args {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR (ADDRESS/BITS, such as 10.8.0.0/16)", a)
		}
		if p.Addr().Zone() != "" {
			return nil, fmt.Errorf("%q: a CIDR has no zone", a)
		}
		if m := p.Masked(); m != p {
			return nil, fmt.Errorf("%q has host bits set; did you mean %s?", a, m)
		}
		out = append(out, p)
	}
	return out, nil
}

// allowedCIDRs are the allow-lists of a Corefile, by linked cluster.
type allowedCIDRs struct {
	lists map[string][]netip.Prefix
	at    map[string]string // file:line of each, for errors
}

// parseAllowedCIDRs parses `allowed_cidrs CLUSTER CIDR...` into cfg.
func parseAllowedCIDRs(c *caddy.Controller, cfg *config, args []string) error {
	name := args[0]
	if err := labels.ValidateClusterName(name); err != nil {
		return c.Errf("allowed_cidrs: %v", err)
	}
	if _, ok := cfg.allowed.lists[name]; ok {
		return c.Errf("allowed_cidrs for %q given twice", name)
	}
	l, err := parseCIDRs(args[1:])
	if err != nil {
		return c.Errf("allowed_cidrs %s: %v", name, err)
	}
	if cfg.allowed.lists == nil {
		cfg.allowed = allowedCIDRs{lists: map[string][]netip.Prefix{}, at: map[string]string{}}
	}
	cfg.allowed.lists[name], cfg.allowed.at[name] = l, where(c)
	return nil
}

// checkAllowedCIDRs checks, once the whole stanza is read, that each
// allowed_cidrs names a cluster that can be linked: not this one, and a
// static link unless link_secrets may bring it.
func (cfg *config) checkAllowedCIDRs() error {
	for _, name := range slices.Sorted(maps.Keys(cfg.allowed.lists)) {
		at := cfg.allowed.at[name]
		if name == cfg.cluster {
			return fmt.Errorf("%s - Error during parsing: allowed_cidrs: %q is this cluster, whose addresses are not filtered", at, name)
		}
		linked := slices.ContainsFunc(cfg.links, func(l link.Static) bool { return l.Name == name })
		if !linked && !cfg.secrets && !cfg.imports {
			return fmt.Errorf("%s - Error during parsing: allowed_cidrs: no link named %q", at, name)
		}
	}
	return nil
}

package mcmirror

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/coredns/caddy"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"
)

// In flat mode the plugin answers the endpoint addresses a linked cluster
// publishes, so whoever can write an EndpointSlice there chooses where
// clients here connect: this cluster's API server, a node, a metadata
// service. allowed_cidrs bounds, per link, the addresses that are answered.

// cidrs is the allow-list of one linked cluster; nil allows everything.
type cidrs []netip.Prefix

// parseCIDRs parses an allow-list: canonical prefixes such as 10.8.0.0/16
// or fd00:8::/64.
func parseCIDRs(args []string) (cidrs, error) {
	out := make(cidrs, 0, len(args))
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

// allows reports whether the endpoint address ip may be answered. An IPv4
// address written as IPv6 (::ffff:10.96.0.1) is what it maps to, as the A
// record the index makes of it: it is checked as IPv4.
func (l cidrs) allows(ip string) bool {
	if l == nil {
		return true
	}
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	a = a.Unmap()
	for _, p := range l {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// allowedCIDRs are the allow-lists of a Corefile, by linked cluster.
type allowedCIDRs struct {
	lists map[string][]netip.Prefix
	at    map[string]string // file:line of each, for errors
}

// parseAllowedCIDRs parses `allowed_cidrs CLUSTER CIDR...` into cfg.
func parseAllowedCIDRs(c *caddy.Controller, cfg *config) error {
	args := c.RemainingArgs()
	if len(args) < 2 {
		return c.ArgErr()
	}
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
		if !linked && !cfg.secrets {
			return fmt.Errorf("%s - Error during parsing: allowed_cidrs: no link named %q", at, name)
		}
	}
	return nil
}

// drops remembers, per service group, which addresses each EndpointSlice
// had dropped at the group's last build, so that a drop is logged and
// counted when a slice first shows it, not at every rebuild.
type drops struct {
	mu   sync.Mutex
	seen map[object.GroupKey]map[string][]string // slice (cluster/ns/name) → its dropped addresses
}

// dropped is what one build dropped from one EndpointSlice.
type dropped struct {
	cluster, ns, slice, svc string
	addrs                   []string
}

// note records the drops of one build of group k: addresses a slice did
// not drop at the group's last build are counted, and logged in one line
// per slice.
func (d *drops) note(k object.GroupKey, now []dropped) {
	d.mu.Lock()
	defer d.mu.Unlock()
	last := d.seen[k]
	if len(now) == 0 {
		delete(d.seen, k)
		return
	}
	cur := make(map[string][]string, len(now))
	for _, e := range now {
		id := e.cluster + "/" + e.ns + "/" + e.slice
		cur[id] = e.addrs
		before := make(map[string]bool, len(last[id]))
		for _, a := range last[id] {
			before[a] = true
		}
		var fresh []string
		for _, a := range e.addrs {
			if !before[a] {
				fresh = append(fresh, a)
			}
		}
		if len(fresh) == 0 {
			continue
		}
		droppedAddresses.WithLabelValues(e.cluster).Add(float64(len(fresh)))
		log.Warningf("Cluster %s: EndpointSlice %s/%s of Service %s publishes %s, outside its allowed_cidrs: not answered",
			e.cluster, e.ns, e.slice, e.svc, listSome(fresh, 5))
	}
	if d.seen == nil {
		d.seen = map[object.GroupKey]map[string][]string{}
	}
	d.seen[k] = cur
}

// listSome joins at most n of ss, saying how many more there are: a log
// line stays short whatever a cluster publishes.
func listSome(ss []string, n int) string {
	if len(ss) <= n {
		return strings.Join(ss, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(ss[:n], ", "), len(ss)-n)
}

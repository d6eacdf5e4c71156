package index

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"

	"github.com/mcmirror/mcmirror/internal/endpointpolicy"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"
)

// In flat mode the plugin answers the endpoint addresses a linked cluster
// publishes, so whoever can write an EndpointSlice there chooses where
// clients here connect: this cluster's API server, a node, a metadata
// service. A linked cluster's special addresses (loopback, link-local,
// multicast, unspecified: endpointpolicy.Special, the rule the controller's
// imports and the gateway follow too) are never answered, and
// allowed_cidrs bounds, per link, the others (Options.AllowedCIDRs; the
// handler's setup_cidrs.go parses them). The local cluster's own
// addresses are answered as they are.

// cidrs is the allow-list of one linked cluster; nil allows every address
// that is not special.
type cidrs []netip.Prefix

// allows reports whether the endpoint address a of a linked cluster may be
// answered. An IPv4 address written as IPv6 (::ffff:10.96.0.1) is what it
// maps to, as the A record the index makes of it: it is checked as IPv4.
func (l cidrs) allows(a netip.Addr) bool {
	a = a.Unmap()
	if endpointpolicy.Special(a) {
		return false
	}
	if l == nil {
		return true
	}
	for _, p := range l {
		if p.Contains(a) {
			return true
		}
	}
	return false
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
		var special, outside []string
		for _, a := range e.addrs {
			if before[a] {
				continue
			}
			if ip, err := netip.ParseAddr(a); err == nil && endpointpolicy.Special(ip) {
				special = append(special, a)
			} else {
				outside = append(outside, a)
			}
		}
		droppedAddresses.WithLabelValues(e.cluster).Add(float64(len(special) + len(outside)))
		if len(special) > 0 {
			log.Warningf("Cluster %s: EndpointSlice %s/%s of Service %s publishes %s, loopback, link-local, multicast or unspecified: never answered from a linked cluster",
				e.cluster, e.ns, e.slice, e.svc, listSome(special, 5))
		}
		if len(outside) > 0 {
			log.Warningf("Cluster %s: EndpointSlice %s/%s of Service %s publishes %s, outside its allowed_cidrs: not answered",
				e.cluster, e.ns, e.slice, e.svc, listSome(outside, 5))
		}
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

package index

import (
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"

	"github.com/miekg/dns"
)

// The clusterset zones (clusterset.local) answer the names of the
// Multi-Cluster Services DNS specification (KEP-1645, schema 1.0.0), from
// the same index as mcmirror's own names, for every Service this cluster
// imports: one with a derived Service (watch/clusterset.go).
//
//	<svc>.<ns>.svc.<zone>                     ClusterSetIP: the derived Service's ClusterIPs;
//	                                          Headless: every cluster's ready addresses
//	<host>.<cluster>.<svc>.<ns>.svc.<zone>    Headless: one pod of one cluster
//	_<port>._<proto>.<either of those>        SRV
//	dns-version.<zone>                        TXT "1.0.0"
//
// and PTR for the ClusterSetIPs, and for the pod addresses of a Headless
// import's flat-mode exports (2.4.3: the only ones without a PTR record
// already; a local pod's is the kubernetes plugin's, a per-pod mirror's
// mcmirror's in its own zone). A clusterset zone is mcmirror's alone:
// every other name of it is NXDOMAIN, never handed down the plugin chain
// (the handler's serve_clusterset.go).

// imported is what the clusterset zones answer of a group: its derived
// Service, the ServiceImport's stand-in.
type imported struct {
	from     *object.Derived
	headless bool
	// names is <svc>.<ns>.svc.<zone> per forward zone; "" in mcmirror's.
	names []string
	// v4 and v6 are the ClusterSetIPs (the derived Service's ClusterIPs),
	// 4 and 16 octets each; none for a Headless import.
	v4, v6 []byte
	// ports are the derived Service's: the import's.
	ports []object.Port
}

// buildImport computes the import of group k from its derived Service d,
// returning old when it was built from the same object.
func (x *Index) buildImport(k object.GroupKey, d *object.Derived, old *imported) *imported {
	if old != nil && old.from == d && object.Version(d) != "" {
		return old
	}
	imp := &imported{from: d, headless: d.Headless, ports: d.Ports, names: make([]string, len(x.zones))}
	for zi := x.nMirror; zi < len(x.zones); zi++ {
		imp.names[zi] = k.Svc + "." + k.NS + ".svc." + x.zones[zi]
	}
	if d.Headless {
		return imp
	}
	seen := map[netip.Addr]bool{}
	for _, ip := range d.ClusterIPs {
		a, err := netip.ParseAddr(ip)
		if err != nil {
			continue
		}
		if a = a.Unmap().WithZone(""); seen[a] {
			continue
		}
		seen[a] = true
		appendAddr(&imp.v4, &imp.v6, a)
	}
	return imp
}

// importTargets calls f with each SRV target of h, the name of a
// ClusterSetIP import, until f returns false: the name itself, per port.
func (h *Hit) importTargets(f func(t Target) bool) {
	imp := h.g.imp
	t := Target{Name: imp.names[h.r.zi], V4: imp.v4, V6: imp.v6, First: true}
	for j := range imp.ports {
		if h.match(&imp.ports[j], imp.ports[:j]) {
			t.Port = uint16(imp.ports[j].Port)
			if !f(t) {
				return
			}
			t.First = false
		}
	}
}

// csVoid reports whether g's import is Headless without a ready address in
// any cluster, nor a pod: its name does not exist, as the specification
// has it ("If there are no ready endpoints for the headless Service, the
// answer should be NXDOMAIN").
func (g *group) csVoid() bool {
	if !g.imp.headless || len(g.v4)+len(g.v6) > 0 {
		return false
	}
	for _, m := range g.members {
		if len(m.pods) > 0 {
			return false
		}
	}
	return true
}

// csEntry is one name of the cs table.
type csEntry struct {
	name string
	r    ref
}

// csEntries lists the names group g puts in the cs table through slot s:
// per clusterset zone, the Service's name and, for a Headless import, the
// <cluster>.<svc> parent of each cluster's pods (pods are found below it,
// as below a member's name); the PTR names of the ClusterSetIPs, and of
// the pod addresses of a Headless import's flat-mode members, which point
// at <host>.<cluster>.<svc>.<ns>.svc in the first clusterset zone.
func (x *Index) csEntries(s *slot, g *group) []csEntry {
	if g == nil || g.imp == nil {
		return nil
	}
	var out []csEntry
	for zi := x.nMirror; zi < len(x.zones); zi++ {
		out = append(out, csEntry{g.imp.names[zi], ref{s: s, m: -1, p: -1, zi: uint8(zi), kind: KindCS}})
		if !g.imp.headless {
			continue
		}
		for i, m := range g.members {
			if len(m.pods) > 0 {
				out = append(out, csEntry{m.names[zi], ref{s: s, m: int16(i), p: -1, zi: uint8(zi), kind: KindCSPod}})
			}
		}
	}
	if !x.ptr || len(out) == 0 {
		return out
	}
	// PTR records point into the first clusterset zone.
	eachAddr(g.imp.v4, g.imp.v6, func(ip net.IP) {
		if rev, err := dns.ReverseAddr(ip.String()); err == nil {
			out = append(out, csEntry{rev, ref{s: s, m: -1, p: -1, zi: uint8(x.nMirror), kind: KindPTR}})
		}
	})
	if !g.imp.headless {
		return out
	}
	for i, m := range g.members {
		if m.local || m.gateway {
			continue
		}
		for p := range m.pods {
			eachAddr(m.podV4(&m.pods[p]), m.podV6(&m.pods[p]), func(ip net.IP) {
				if rev, err := dns.ReverseAddr(ip.String()); err == nil {
					out = append(out, csEntry{rev, ref{s: s, m: int16(i), p: int32(p), zi: uint8(x.nMirror), kind: KindPTR}})
				}
			})
		}
	}
	return out
}

// podPTR reports whether r is the PTR name of a pod address.
func (r ref) podPTR() bool { return r.kind == KindPTR && r.m >= 0 }

// installCS puts the clusterset names of g, group s's new build (nil: it
// is gone), in place of those of old, and adds to again the groups to
// rebuild because s let go of a name they want. x.mu is held.
//
// The names of the Services are each one group's by construction. The
// PTR name of an address is not: a linked cluster chooses its pods'
// addresses, and may choose one that is a ClusterSetIP or another
// import's pod. A ClusterSetIP's PTR name is always its import's; a pod
// address's goes to the first group that names it, the others wait (in
// csLosers) until it lets go.
func (x *Index) installCS(s *slot, old, g *group, again *[]object.GroupKey) {
	had, has := old != nil && old.imp != nil, g != nil && g.imp != nil
	if had != has {
		ns := s.key.NS
		if has {
			x.csNS[ns]++
		} else if x.csNS[ns]--; x.csNS[ns] <= 0 {
			delete(x.csNS, ns)
		}
	}
	was, now := x.csEntries(s, old), x.csEntries(s, g)
	if len(was) == len(now) {
		same := true
		for i := range was {
			same = same && was[i] == now[i]
		}
		for i := 0; same && i < len(now); i++ {
			same = x.cs[now[i].name] == now[i].r // not lost to another group
		}
		if same {
			return // the same names, meaning the same members of the slot's group
		}
	}
	var keeps map[string]bool // now's names, once a name let go has losers
	wanted := func(name string) bool {
		if keeps == nil {
			keeps = make(map[string]bool, len(now))
			for _, n := range now {
				keeps[n.name] = true
			}
		}
		return keeps[name]
	}
	for _, e := range was {
		have, ok := x.cs[e.name]
		switch {
		case ok && have.s == s:
			delete(x.cs, e.name)
			if len(x.csLosers[e.name]) > 0 && !wanted(e.name) {
				*again = append(*again, x.csLosers[e.name]...)
				delete(x.csLosers, e.name)
			}
		case len(x.csLosers[e.name]) > 0 && !wanted(e.name):
			// A name lost to another group, and no longer wanted.
			left := slices.DeleteFunc(slices.Clone(x.csLosers[e.name]), func(k object.GroupKey) bool { return k == s.key })
			if len(left) == 0 {
				delete(x.csLosers, e.name)
			} else {
				x.csLosers[e.name] = left
			}
		}
	}
	for _, e := range now {
		if have, ok := x.cs[e.name]; ok && have.s != s && (e.r.podPTR() || !have.podPTR()) {
			if !slices.Contains(x.csLosers[e.name], s.key) {
				x.csLosers[e.name] = append(x.csLosers[e.name], s.key)
			}
			continue
		} else if ok && have.s != s && !slices.Contains(x.csLosers[e.name], have.s.key) {
			// A ClusterSetIP's PTR name, held by another import's pod.
			x.csLosers[e.name] = append(x.csLosers[e.name], have.s.key)
		}
		x.cs[e.name] = e.r
	}
}

// CSWhat is what a name of a clusterset zone is.
type CSWhat uint8

const (
	CSNone    CSWhat = iota // no such name: NXDOMAIN
	CSEmpty                 // an empty non-terminal: NODATA
	CSApex                  // the zone's apex: its SOA
	CSVersion               // dns-version: TXT
	CSName                  // a name of the cs table, or below one: the Hit's
)

// FindCS returns what name (lowercased) of the clusterset zone zone is,
// and its kind for the answers metric.
func (x *Index) FindCS(name, zone string) (Hit, CSWhat, Kind) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	switch rel := name[:len(name)-len(zone)]; {
	case rel == "":
		return Hit{}, CSApex, KindCSZone
	case rel == "dns-version.":
		return Hit{}, CSVersion, KindCSZone
	case rel == "svc.":
		if len(x.csNS) > 0 {
			return Hit{}, CSEmpty, KindCSZone
		}
		return Hit{}, CSNone, KindCSZone
	case len(rel) > len(".svc.") && strings.HasSuffix(rel, ".svc.") && !strings.ContainsAny(rel[:len(rel)-5], `.\`):
		if x.csNS[rel[:len(rel)-5]] > 0 {
			return Hit{}, CSEmpty, KindCSZone
		}
		return Hit{}, CSNone, KindCSZone
	}
	if name[0] != '_' {
		if r, ok := x.resolveCS(name); ok {
			return Hit{g: r.s.g, r: r}, CSName, r.kind
		}
		return Hit{}, CSNone, x.csBelow(name, zone)
	}
	// _<proto>.<name> and _<port>._<proto>.<name>, on a Service or a pod.
	first, rest, ok := cutLabel(name)
	if !ok {
		return Hit{}, CSNone, KindSRV
	}
	h := Hit{proto: first[1:]}
	if rest[0] == '_' {
		var second string
		if second, rest, ok = cutLabel(rest); !ok {
			return Hit{}, CSNone, KindSRV
		}
		h.port, h.proto = first[1:], second[1:]
	}
	if r, ok := x.resolveCS(rest); ok && (r.kind == KindCS || r.p >= 0) {
		h.g, h.r = r.s.g, r
		return h, CSName, KindSRV
	}
	return Hit{}, CSNone, x.csBelow(name, zone)
}

// resolveCS returns the ref of a name of a clusterset zone: a name of the
// cs table, or a pod below its cluster's <cluster>.<svc> name. x.mu is
// held.
func (x *Index) resolveCS(name string) (ref, bool) {
	if r, ok := x.cs[name]; ok {
		return r, r.kind != KindPTR
	}
	host, parent, ok := cutLabel(name)
	if !ok {
		return ref{}, false
	}
	r, ok := x.cs[parent]
	if !ok || r.kind != KindCSPod || r.p >= 0 {
		return ref{}, false
	}
	p := r.s.g.members[r.m].findPod(host, name, int(r.zi))
	if p < 0 {
		return ref{}, false
	}
	r.p = int32(p)
	return r, true
}

// csBelow returns the kind of a name of zone that does not exist, for the
// answers metric: below an import's names, an unknown pod or port; else
// the zone's.
func (x *Index) csBelow(name, zone string) Kind {
	for off, end := dns.NextLabel(name, 0); !end && len(name)-off > len(zone); off, end = dns.NextLabel(name, off) {
		if r, ok := x.cs[name[off:]]; ok && r.kind != KindPTR {
			if name[0] == '_' {
				return KindSRV
			}
			return KindCSPod
		}
	}
	return KindCSZone
}

package mcmirror

import (
	"cmp"
	"net"
	"slices"
	"strings"
	"sync"

	"github.com/mcmirror/mcmirror/internal/labels"

	"github.com/miekg/dns"
)

// source is what the index is built from: the trimmed objects of the local
// cluster and of every linked cluster. The informers implement it
// (controller.go); tests use a fake.
type source interface {
	// Links returns the names of the linked remote clusters.
	Links() []string
	// Service returns the exported Service ns/name of cluster (the local
	// cluster included), or nil when it does not export one.
	Service(cluster, ns, name string) *Service
	// Slices returns the EndpointSlices of Service ns/name of cluster.
	Slices(cluster, ns, name string) []*Slice
	// Mirror returns the local mirror Service ns/name, or nil.
	Mirror(ns, name string) *Mirror
	// HasSynced reports whether the source holds what the clusters hold
	// and the index has caught up with it.
	HasSynced() bool
}

// nameKind is the kind of a name, for the answers metric.
type nameKind uint8

const (
	kindCluster nameKind = iota // <svc>-<cluster>.<ns>.svc.<zone>
	kindPod                     // <host>.<svc>-<cluster>.<ns>.svc.<zone>
	kindGlobal                  // <svc>-global.<ns>.svc.<zone>
	kindSRV                     // _<port>._<proto>.<any of the above>
	kindPTR                     // reverse name of a mirror ClusterIP
	numKinds
)

var kindNames = [numKinds]string{"cluster", "pod", "global", "srv", "ptr"}

func (k nameKind) String() string { return kindNames[k] }

// groupKey names a service group: every name derived from Service svc of
// namespace ns, whichever cluster exports it. A change to any object of the
// group rebuilds the whole group, and nothing else.
type groupKey struct{ ns, svc string }

func (k groupKey) String() string { return k.ns + "/" + k.svc }

// entry holds the precomputed answers for one name. Entries are immutable
// once in the index: an update installs new ones. The RR slices are shared
// by every answer, so they are clipped (len == cap) and an append by a later
// plugin copies rather than writes into them, as plugin/file's answers.
type entry struct {
	owner groupKey
	kind  nameKind
	a     []dns.RR
	aaaa  []dns.RR
	srv   []dns.RR
	extra []dns.RR // glue for srv
	ptr   []dns.RR
}

// records returns the answer and additional records of qtype.
func (e *entry) records(qtype uint16) (answer, extra []dns.RR) {
	switch qtype {
	case dns.TypeA:
		return e.a, nil
	case dns.TypeAAAA:
		return e.aaaa, nil
	case dns.TypeSRV:
		return e.srv, e.extra
	case dns.TypePTR:
		return e.ptr, nil
	}
	return nil, nil
}

// index maps every name mcmirror answers for, lowercased, to its answers.
// A lookup is one map read under a read lock; all the work is done when a
// group changes.
type index struct {
	src   source
	local string   // this cluster's name
	zones []string // forward zones, lowercased; the first names PTR targets
	ttl   uint32
	ptr   bool // a reverse zone is served, so build PTR names

	mu    sync.RWMutex
	names map[string]*entry
	// wants is every name each group produced at its last build, owned or
	// not, so that the next build can remove those it no longer produces.
	wants map[groupKey][]string
	// losers are the groups that produced a name another group owns
	// (svc "a-b" of cluster "c" and svc "a" of cluster "b-c" are both
	// "a-b-c"); they are rebuilt when the owner lets go of it.
	losers map[string][]groupKey
	// counts of records by type, for the records metric.
	counts recordCounts

	// health says which gateways are down (gateway_health; else nil).
	// gateways are the clusters with gateway-mode members in each group.
	health   *gatewayHealth
	gateways map[groupKey][]string

	// allowed are the allow-lists of the linked clusters that have one
	// (allowed_cidrs): their flat-mode addresses outside are dropped.
	allowed map[string]cidrs
	// drops has each drop logged and counted once.
	drops drops
}

type recordCounts struct{ a, aaaa, srv, ptr int }

func (c *recordCounts) add(e *entry, sign int) {
	c.a += sign * len(e.a)
	c.aaaa += sign * len(e.aaaa)
	c.srv += sign * len(e.srv)
	c.ptr += sign * len(e.ptr)
}

func newIndex(src source, local string, zones []string, ttl uint32, ptr bool) *index {
	return &index{
		src:    src,
		local:  local,
		zones:  zones,
		ttl:    ttl,
		ptr:    ptr,
		names:  map[string]*entry{},
		wants:  map[groupKey][]string{},
		losers: map[string][]groupKey{},
	}
}

// lookup returns the entry of name, which must be lowercased, or nil.
func (x *index) lookup(name string) *entry {
	x.mu.RLock()
	e := x.names[name]
	x.mu.RUnlock()
	return e
}

// claimed reports whether name (lowercased, inside zone) lies below a name
// of the index: an unknown pod or port of a known Service, which is NXDOMAIN
// rather than someone else's name.
func (x *index) claimed(name, zone string) (nameKind, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	// Label by label, as dns.NextLabel splits them: a dot escaped inside
	// a label (`a\.nginx-svc-west`) does not make a name below ours.
	for off, end := dns.NextLabel(name, 0); !end && len(name)-off > len(zone); off, end = dns.NextLabel(name, off) {
		if _, ok := x.names[name[off:]]; ok {
			if name[0] == '_' {
				return kindSRV, true
			}
			return kindPod, true
		}
	}
	return 0, false
}

// len returns the number of names in the index.
func (x *index) len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.names)
}

// sync rebuilds the names of group k from the source and installs them. It
// returns the groups that must be rebuilt because k let go of a name they
// want.
func (x *index) sync(k groupKey) []groupKey {
	health := x.health.load()
	built, gateways := x.build(k, health)
	again := x.install(k, built, gateways)
	if x.health.load() != health { // changed before install recorded k
		again = append(again, k)
	}
	return again
}

func (x *index) install(k groupKey, built map[string]*entry, gateways []string) []groupKey {
	x.mu.Lock()
	defer x.mu.Unlock()

	x.noteGateways(k, gateways)
	var again []groupKey
	for _, name := range x.wants[k] {
		if _, still := built[name]; still {
			continue
		}
		if e, ok := x.names[name]; ok && e.owner == k {
			x.counts.add(e, -1)
			delete(x.names, name)
			again = append(again, x.losers[name]...)
			delete(x.losers, name)
		}
	}

	wants := make([]string, 0, len(built))
	for name, e := range built {
		wants = append(wants, name)
		cur, ok := x.names[name]
		if ok && cur.owner != k {
			if groupLess(cur.owner, k) {
				if !slices.Contains(x.losers[name], k) {
					log.Warningf("%s: name %s is already %s's; the cluster and service names overlap", k, strings.TrimSuffix(name, "."), cur.owner)
					x.losers[name] = append(x.losers[name], k)
				}
				continue
			}
			if !slices.Contains(x.losers[name], cur.owner) {
				log.Warningf("%s: name %s taken from %s; the cluster and service names overlap", k, strings.TrimSuffix(name, "."), cur.owner)
				x.losers[name] = append(x.losers[name], cur.owner)
			}
		}
		if ok {
			x.counts.add(cur, -1)
		}
		x.counts.add(e, 1)
		x.names[name] = e
	}
	if len(wants) == 0 {
		delete(x.wants, k)
	} else {
		x.wants[k] = wants
	}

	indexNames.Set(float64(len(x.names)))
	indexRecords.WithLabelValues("A").Set(float64(x.counts.a))
	indexRecords.WithLabelValues("AAAA").Set(float64(x.counts.aaaa))
	indexRecords.WithLabelValues("SRV").Set(float64(x.counts.srv))
	indexRecords.WithLabelValues("PTR").Set(float64(x.counts.ptr))
	return again
}

// groupLess orders groups for a contested name: the first keeps it.
func groupLess(a, b groupKey) bool {
	return cmp.Or(cmp.Compare(a.ns, b.ns), cmp.Compare(a.svc, b.svc)) < 0
}

// member is one cluster's share of a service group: what its own names
// answer, and what it adds to the -global names.
type member struct {
	cluster string
	// rel is the service-level name without the zone:
	// <svc>-<cluster>.<ns>.svc, or <svc>.<ns>.svc for the local cluster.
	rel string
	// ips answer the service-level name when pods is empty.
	ips   []string
	ports []Port
	// pods, when not empty, are the per-pod names (headless Services):
	// the service-level name answers all their addresses, and its SRV
	// records point at them.
	pods []pod
	// ptr asks for PTR records of the addresses: they are mirror
	// ClusterIPs, which only mcmirror can name well.
	ptr bool
	// gateway marks a linked cluster's gateway-mode member: it leaves the
	// -global names while that cluster's gateway is down.
	gateway bool
}

type pod struct {
	host  string
	ips   []string
	ports []Port
}

// build computes every name of group k, leaving out of the -global names
// the members health hides. It returns the names, and the clusters that
// have a gateway-mode member in the group.
func (x *index) build(k groupKey, health *healthState) (map[string]*entry, []string) {
	var members []member
	var dropped []dropped
	for _, c := range x.src.Links() {
		s := x.src.Service(c, k.ns, k.svc)
		if s == nil || s.ExternalName {
			continue
		}
		mname, err := labels.MirrorName(s.Name, c)
		if err != nil {
			log.Debugf("%s: not exported from %s: %v", k, c, err)
			continue
		}
		m := member{cluster: c, rel: mname + "." + k.ns + ".svc"}
		if s.Mode == labels.Flat {
			x.endpoints(&m, s, x.src.Slices(c, k.ns, k.svc), x.allowed[c], &dropped)
		} else {
			m.gateway = true
			x.mirrors(&m, s, mname)
		}
		members = append(members, m)
	}
	x.drops.note(k, dropped)

	out := map[string]*entry{}
	if len(members) == 0 && x.src.Service(x.local, k.ns, k.svc) == nil {
		return out, nil // nobody exports it: nothing is claimed
	}
	if s := x.src.Service(x.local, k.ns, k.svc); s != nil && !s.ExternalName {
		m := member{cluster: x.local, rel: k.svc + "." + k.ns + ".svc"}
		if s.Headless {
			x.endpoints(&m, s, x.src.Slices(x.local, k.ns, k.svc), nil, nil)
		} else {
			m.ips, m.ports = s.ClusterIPs, s.Ports
		}
		// The local member only joins -global: its own names are the
		// kubernetes plugin's.
		members = append(members, m)
	}

	global := k.svc + "-" + labels.Global + "." + k.ns + ".svc"
	for _, zone := range x.zones {
		var all []target
		for _, m := range members {
			ts := m.targets(zone)
			if !health.hides(m) {
				all = append(all, ts...)
			}
			if m.cluster == x.local {
				continue
			}
			x.addNames(out, k, kindCluster, m.rel+"."+zone, ts, m.addresses())
			for _, p := range m.pods {
				fq := p.host + "." + m.rel + "." + zone
				x.addNames(out, k, kindPod, fq, podTargets(fq, p), p.ips)
			}
		}
		if len(global)+len(zone) < 255 {
			var ips []string
			for _, m := range members {
				if !health.hides(m) {
					ips = append(ips, m.addresses()...)
				}
			}
			x.addNames(out, k, kindGlobal, global+"."+zone, all, ips)
		}
	}
	if x.ptr {
		for _, m := range members {
			if !m.ptr {
				continue
			}
			if len(m.pods) == 0 {
				x.ptrs(out, k, m.rel+"."+x.zones[0], m.ips)
			}
			for _, p := range m.pods {
				x.ptrs(out, k, p.host+"."+m.rel+"."+x.zones[0], p.ips)
			}
		}
	}
	return out, gatewayClusters(members)
}

// mirrors fills a gateway-mode member from the local mirror Services, by
// Linkerd's rules: a headless Service with named endpoints is mirrored per
// pod, anything else by one ClusterIP. A pod whose mirror does not exist yet
// is left out: a record is only given when it can be routed.
func (x *index) mirrors(m *member, s *Service, mname string) {
	mirror := x.src.Mirror(s.Namespace, mname)
	if mirror != nil && mirror.Cluster != m.cluster {
		mirror = nil // a mirror of another cluster's Service of that name
	}
	var sls []*Slice
	if s.Headless {
		sls = x.src.Slices(m.cluster, s.Namespace, s.Name)
	}
	// A mirror made as a ClusterIP Service (the Service had no named
	// endpoints when it was mirrored) stays one: answer its ClusterIP.
	if !s.Headless || !named(sls) || (mirror != nil && !mirror.Headless) {
		if mirror != nil && !mirror.Headless && len(mirror.ClusterIPs) > 0 {
			m.ips, m.ports, m.ptr = mirror.ClusterIPs, mirror.Ports, true
		}
		return
	}
	seen := map[string]bool{}
	for _, sl := range sls {
		for _, e := range sl.Endpoints {
			if e.Hostname == "" || seen[e.Hostname] || !(e.Ready || s.PublishNotReady) {
				continue
			}
			seen[e.Hostname] = true
			pname, err := labels.EndpointMirrorName(e.Hostname, m.cluster)
			if err != nil {
				continue
			}
			pm := x.src.Mirror(s.Namespace, pname)
			if pm == nil || pm.Cluster != m.cluster || pm.HeadlessOf != mname || pm.Headless || len(pm.ClusterIPs) == 0 {
				continue
			}
			m.pods = append(m.pods, pod{host: e.Hostname, ips: pm.ClusterIPs, ports: pm.Ports})
		}
	}
	m.ptr = true
	slices.SortFunc(m.pods, func(a, b pod) int { return cmp.Compare(a.host, b.host) })
}

// named reports whether any endpoint has a hostname.
func named(sls []*Slice) bool {
	for _, sl := range sls {
		for _, e := range sl.Endpoints {
			if e.Hostname != "" {
				return true
			}
		}
	}
	return false
}

// endpoints fills a member from the ready endpoints themselves: flat mode,
// and the local cluster's headless Services. A headless Service gets one
// name per pod (its hostname, or its address with dashes as CoreDNS's
// kubernetes plugin names it); a ClusterIP one answers all its endpoints.
// Addresses allow does not allow are left out, and added to out.
func (x *index) endpoints(m *member, s *Service, sls []*Slice, allow cidrs, out *[]dropped) {
	byHost := map[string]int{}
	seenIP := map[string]bool{}
	for _, sl := range sls {
		var bad []string
		for _, e := range sl.Endpoints {
			if !(e.Ready || s.PublishNotReady) {
				continue
			}
			for _, ip := range e.Addresses {
				if seenIP[ip] || net.ParseIP(ip) == nil {
					continue
				}
				seenIP[ip] = true
				if !allow.allows(ip) {
					bad = append(bad, ip)
					continue
				}
				if !s.Headless {
					m.ips = append(m.ips, ip)
					m.ports = addPorts(m.ports, sl.Ports)
					continue
				}
				host := e.Hostname
				if host == "" {
					host = dashed(ip)
				}
				i, ok := byHost[host]
				if !ok {
					i = len(m.pods)
					byHost[host] = i
					m.pods = append(m.pods, pod{host: host})
				}
				m.pods[i].ips = append(m.pods[i].ips, ip)
				m.pods[i].ports = addPorts(m.pods[i].ports, sl.Ports)
			}
		}
		if len(bad) > 0 && out != nil {
			*out = append(*out, dropped{cluster: m.cluster, ns: sl.Namespace, slice: sl.Name, svc: s.Name, addrs: bad})
		}
	}
	slices.SortFunc(m.pods, func(a, b pod) int { return cmp.Compare(a.host, b.host) })
	slices.Sort(m.ips)
}

func addPorts(have, add []Port) []Port {
	for _, p := range add {
		if !slices.Contains(have, p) {
			have = append(have, p)
		}
	}
	return have
}

// dashed turns an address into a DNS label, as CoreDNS's kubernetes plugin
// names endpoints without a hostname.
func dashed(ip string) string {
	if strings.Contains(ip, ".") {
		return strings.ReplaceAll(ip, ".", "-")
	}
	return strings.ReplaceAll(ip, ":", "-")
}

// addresses returns every address the member's service-level name answers.
func (m member) addresses() []string {
	if len(m.pods) == 0 {
		return m.ips
	}
	var ips []string
	for _, p := range m.pods {
		ips = append(ips, p.ips...)
	}
	return ips
}

// target is one SRV target: a port of a name, with the addresses that name
// resolves to (the glue).
type target struct {
	name string
	port Port
	ips  []string
}

// targets returns the SRV targets of the member's service-level name in
// zone: one per port, or per pod and port for a per-pod member, as the
// Kubernetes DNS specification has it for ClusterIP and headless Services.
func (m member) targets(zone string) []target {
	var ts []target
	if len(m.pods) == 0 {
		fq := m.rel + "." + zone
		for _, p := range m.ports {
			ts = append(ts, target{name: fq, port: p, ips: m.ips})
		}
		return ts
	}
	for _, p := range m.pods {
		ts = append(ts, podTargets(p.host+"."+m.rel+"."+zone, p)...)
	}
	return ts
}

func podTargets(fq string, p pod) []target {
	ts := make([]target, 0, len(p.ports))
	for _, port := range p.ports {
		ts = append(ts, target{name: fq, port: port, ips: p.ips})
	}
	return ts
}

// addNames adds name, and its _<port>._<proto> names, to out.
func (x *index) addNames(out map[string]*entry, k groupKey, kind nameKind, name string, ts []target, ips []string) {
	if !validName(name) {
		return
	}
	e := &entry{owner: k, kind: kind}
	e.a, e.aaaa = x.addressRRs(name, ips)
	e.srv, e.extra = x.srvRRs(name, ts)
	out[name] = e

	// _<port>._<proto>.<name> for each named port, and the empty
	// non-terminal _<proto>.<name> above it (NODATA, not NXDOMAIN).
	type portKey struct{ name, proto string }
	byPort := map[portKey][]target{}
	for _, t := range ts {
		if t.port.Name != "" {
			pk := portKey{t.port.Name, t.port.Protocol}
			byPort[pk] = append(byPort[pk], t)
		}
	}
	for pk, pts := range byPort {
		proto := "_" + pk.proto + "." + name
		pname := "_" + pk.name + "." + proto
		if !validName(pname) {
			continue
		}
		pe := &entry{owner: k, kind: kindSRV}
		pe.srv, pe.extra = x.srvRRs(pname, pts)
		out[pname] = pe
		if _, ok := out[proto]; !ok {
			out[proto] = &entry{owner: k, kind: kindSRV}
		}
	}
}

// ptrs adds the PTR names of ips, pointing at name, to out.
func (x *index) ptrs(out map[string]*entry, k groupKey, name string, ips []string) {
	for _, ip := range ips {
		rev, err := dns.ReverseAddr(ip)
		if err != nil {
			continue
		}
		out[rev] = &entry{owner: k, kind: kindPTR, ptr: []dns.RR{&dns.PTR{
			Hdr: dns.RR_Header{Name: rev, Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: x.ttl},
			Ptr: name,
		}}}
	}
}

// addressRRs returns the A and AAAA records of name, without duplicates.
func (x *index) addressRRs(name string, ips []string) (a, aaaa []dns.RR) {
	seen := make(map[string]bool, len(ips))
	for _, s := range ips {
		ip := net.ParseIP(s)
		if ip == nil || seen[s] {
			continue
		}
		seen[s] = true
		if ip4 := ip.To4(); ip4 != nil {
			a = append(a, &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: x.ttl}, A: ip4})
			continue
		}
		aaaa = append(aaaa, &dns.AAAA{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: x.ttl}, AAAA: ip})
	}
	return slices.Clip(a), slices.Clip(aaaa)
}

// srvRRs returns the SRV records of name for ts, and the glue of their
// targets. The weights split 100 evenly, as CoreDNS's kubernetes plugin
// does.
func (x *index) srvRRs(name string, ts []target) (srv, extra []dns.RR) {
	if len(ts) == 0 {
		return nil, nil
	}
	type dup struct {
		name string
		port int32
	}
	seen := map[dup]bool{}
	uniq := ts[:0:0]
	for _, t := range ts {
		d := dup{t.name, t.port.Port}
		if !seen[d] {
			seen[d] = true
			uniq = append(uniq, t)
		}
	}
	weight := uint16(100 / len(uniq))
	glued := map[string]bool{}
	srv = make([]dns.RR, 0, len(uniq))
	for _, t := range uniq {
		srv = append(srv, &dns.SRV{
			Hdr:      dns.RR_Header{Name: name, Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: x.ttl},
			Priority: 0,
			Weight:   weight,
			Port:     uint16(t.port.Port),
			Target:   t.name,
		})
		if !glued[t.name] {
			glued[t.name] = true
			a, aaaa := x.addressRRs(t.name, t.ips)
			extra = append(extra, a...)
			extra = append(extra, aaaa...)
		}
	}
	return srv, slices.Clip(extra)
}

// validName reports whether name fits in the DNS: labels of at most 63
// octets, 255 in all.
func validName(name string) bool {
	_, ok := dns.IsDomainName(name)
	return ok
}

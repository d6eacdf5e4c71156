package index

import (
	"cmp"
	"hash/maphash"
	"net/netip"
	"slices"
	"strings"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"

	"github.com/miekg/dns"
)

// A group is what the index keeps of one Service ns/svc across every
// cluster that exports it: compact data from which answers are made at
// query time (hit.go, and the handler's answer.go), not precomputed
// records. A group is immutable once installed; a change installs a new
// one, reusing the members whose objects did not change.
type group struct {
	key object.GroupKey
	// members are the clusters that export the Service, the local one
	// first (it leads -global answers), then the links in the source's
	// order.
	members []*member
	// hidden marks the members health keeps out of the -global names.
	hidden []bool
	// global is <svc>-global.<ns>.svc.<zone> per forward zone; "" when
	// it would not be a valid name.
	global []string
	// v4 and v6 are the -global addresses: the visible members', in
	// member order, each address once.
	v4, v6 []byte
	// lost marks the names another group took (names.go), -global's
	// first, then each member's: changed only under the index's lock,
	// and read only under it.
	lost []bool
	// imp is what the clusterset zones answer of the Service: its
	// derived Service's; nil without one (clusterset.go).
	imp *imported
}

// member is one cluster's share of a group.
type member struct {
	cluster string
	local   bool
	// gateway marks a linked cluster's gateway-mode member: it leaves the
	// -global names while that cluster's gateway is down.
	gateway bool
	// ptr asks for PTR records of the addresses: they are mirror
	// ClusterIPs, which only mcmirror can name well.
	ptr bool
	// names is the service-level name per forward zone:
	// <svc>-<cluster>.<ns>.svc.<zone>, or <svc>.<ns>.svc.<zone> for the
	// local cluster (the kubernetes plugin's name, a -global SRV target);
	// in a clusterset zone, <cluster>.<svc>.<ns>.svc.<zone>, for every
	// cluster.
	names []string
	// v4 and v6 are every address, 4 and 16 octets each: the pods' in
	// pod order when there are pods. A query sub-slices them, so an
	// answer shares them rather than copying.
	v4, v6 []byte
	// ports are the service-level name's when there are no pods.
	ports []object.Port
	// pods, sorted by name, are the per-pod names of a headless Service.
	pods []pod
	// podNames is each pod's name per zone (pod i, zone z at
	// i*len(zones)+z): the name in the index, the SRV target and the glue
	// owner, one string for all three.
	podNames []string
	// byHash is each pod's index (low 32 bits) under the hash of its host
	// (high 32 bits), sorted: a query finds its pod by a binary search of
	// this dense array and one comparison of names, not by comparing
	// hosts, each in its own string, at every step (see findPod).
	byHash []uint64
	// portSets are the pods' distinct port lists, shared.
	portSets [][]object.Port
	// from is what the member was built from: a later build reuses the
	// member when none of it changed.
	from []any
	// dropped are the addresses allowed_cidrs left out.
	dropped []dropped
	// bad counts the names left out for not being valid DNS names.
	bad int
}

// pod is one per-pod name: its addresses in the member's v4 and v6 (index
// and count, in addresses) and its ports.
type pod struct {
	i4, n4, i6, n6 uint32
	ports          uint32 // index in portSets
}

func (m *member) podV4(p *pod) []byte { return m.v4[p.i4*4 : (p.i4+p.n4)*4] }
func (m *member) podV6(p *pod) []byte { return m.v6[p.i6*16 : (p.i6+p.n6)*16] }

// podName returns pod i's name in zone zi.
func (m *member) podName(i, zi int) string { return m.podNames[i*len(m.names)+zi] }

// hostSeed seeds the hashes of hosts: random, so that a linked cluster
// cannot choose pod names that collide.
var hostSeed = maphash.MakeSeed()

func hostHash(host string) uint64 { return maphash.String(hostSeed, host) &^ (1<<32 - 1) }

// indexPods fills m.byHash from m.podNames.
func (m *member) indexPods() {
	m.byHash = make([]uint64, len(m.pods))
	for i := range m.pods {
		name := m.podName(i, 0)
		m.byHash[i] = hostHash(name[:strings.IndexByte(name, '.')]) | uint64(i)
	}
	slices.Sort(m.byHash)
}

// findPod returns the index of the pod whose name in zone zi is name, of
// which host is the first label, or -1.
func (m *member) findPod(host, name string, zi int) int {
	if len(m.pods) == 1 {
		// One pod (a StatefulSet spread one pod to a cluster): compare its
		// name, without hashing the host or reading the hash array.
		if m.podName(0, zi) == name {
			return 0
		}
		return -1
	}
	h := hostHash(host)
	// The hashes are uniform: start where h would be, and walk to the
	// first entry not below it, typically a few entries away in the same
	// cache line, where a binary search would touch several.
	n := len(m.byHash)
	i := int((h >> 32) * uint64(n) >> 32)
	for i > 0 && m.byHash[i-1] >= h {
		i--
	}
	for i < n && m.byHash[i] < h {
		i++
	}
	for ; i < n && m.byHash[i]&^(1<<32-1) == h; i++ {
		if p := int(uint32(m.byHash[i])); m.podName(p, zi) == name {
			return p
		}
	}
	return -1
}

// builder collects a member's addresses and pods.
type builder struct {
	m *member
	// old is the cluster's member at the last build: its name strings
	// are reused for the pods that are still there.
	old  *member
	seen map[netip.Addr]bool
	// byHost is each pod's index by host; hosts the pods' hosts.
	byHost map[string]int
	hosts  []string
	// first and more collect each pod's addresses (most have one)
	// before they are packed in pod order.
	first []netip.Addr
	more  map[int][]netip.Addr
	ports [][]object.Port
	// loose are addresses without a valid pod name: they answer the
	// member's name, and no pod's.
	loose []netip.Addr
}

func newBuilder(m, old *member) *builder {
	return &builder{m: m, old: old, seen: map[netip.Addr]bool{}, byHost: map[string]int{}}
}

// addr adds a service-level address; false when it was there already.
func (b *builder) addr(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	if b.seen[a] {
		return false
	}
	b.seen[a] = true
	appendAddr(&b.m.v4, &b.m.v6, a)
	return true
}

// appendAddr appends a to *v4 or *v6, by its family, and reports whether
// it is IPv4.
func appendAddr(v4, v6 *[]byte, a netip.Addr) bool {
	if a.Is4() {
		v := a.As4()
		*v4 = append(*v4, v[:]...)
		return true
	}
	v := a.As16()
	*v6 = append(*v6, v[:]...)
	return false
}

// podAddr adds an address of pod host with ports; false when the address
// is the member's already.
func (b *builder) podAddr(host string, a netip.Addr, ports []object.Port) bool {
	a = a.Unmap().WithZone("")
	if b.seen[a] {
		return false
	}
	b.seen[a] = true
	i, ok := b.byHost[host]
	if !ok {
		i = len(b.hosts)
		b.byHost[host] = i
		b.hosts = append(b.hosts, host)
		b.first = append(b.first, a)
		b.ports = append(b.ports, ports)
		return true
	}
	b.ports[i] = addPorts(b.ports[i], ports)
	if b.more == nil {
		b.more = map[int][]netip.Addr{}
	}
	b.more[i] = append(b.more[i], a)
	return true
}

// looseAddr adds an address of no pod name.
func (b *builder) looseAddr(a netip.Addr) {
	a = a.Unmap().WithZone("")
	if !b.seen[a] {
		b.seen[a] = true
		b.loose = append(b.loose, a)
	}
}

// finish packs the pods, sorted by host, with their names in zones.
// Pods whose name is not a valid DNS name are left out and counted; their
// addresses still answer the member's name.
func (b *builder) finish(zones []string) {
	m := b.m
	order := make([]int, len(b.hosts))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(i, j int) int { return cmp.Compare(b.hosts[i], b.hosts[j]) })
	m.pods = make([]pod, 0, len(order))
	m.podNames = make([]string, 0, len(order)*len(zones))
	var loose []netip.Addr
	j := 0 // walks the old member's pods, sorted by host too
	for _, i := range order {
		host := b.hosts[i]
		addrs := append([]netip.Addr{b.first[i]}, b.more[i]...)
		n := len(m.podNames)
		if reuse := b.oldNames(host, &j, zones); reuse != nil {
			m.podNames = append(m.podNames, reuse...)
		} else {
			ok := true
			for zi := range zones {
				name := host + "." + m.names[zi]
				ok = ok && validName(name)
				m.podNames = append(m.podNames, name)
			}
			if !ok {
				m.bad++
				noteInvalid(m.cluster, m.podNames[n])
				m.podNames = m.podNames[:n]
				loose = append(loose, addrs...)
				continue
			}
		}
		p := pod{i4: uint32(len(m.v4) / 4), i6: uint32(len(m.v6) / 16), ports: b.portSet(b.ports[i])}
		for _, a := range addrs {
			if appendAddr(&m.v4, &m.v6, a) {
				p.n4++
			} else {
				p.n6++
			}
		}
		m.pods = append(m.pods, p)
	}
	for _, a := range append(loose, b.loose...) {
		appendAddr(&m.v4, &m.v6, a)
	}
	m.v4, m.v6 = slices.Clip(m.v4), slices.Clip(m.v6)
	m.pods, m.podNames = slices.Clip(m.pods), slices.Clip(m.podNames)
	m.indexPods()
}

// oldNames returns the old member's names of pod host, when it had that
// pod under the same names; *j walks the old pods in host order.
func (b *builder) oldNames(host string, j *int, zones []string) []string {
	old := b.old
	if old == nil || !slices.Equal(old.names, b.m.names) {
		return nil
	}
	nz := len(zones)
	for ; *j < len(old.pods); *j++ {
		name := old.podNames[*j*nz]
		h := name[:strings.IndexByte(name, '.')]
		if h == host {
			return old.podNames[*j*nz : *j*nz+nz]
		}
		if h > host {
			return nil
		}
	}
	return nil
}

// portSet returns the index of ps in the member's portSets, adding it.
func (b *builder) portSet(ps []object.Port) uint32 {
	for i, have := range b.m.portSets {
		if slices.Equal(have, ps) {
			return uint32(i)
		}
	}
	b.m.portSets = append(b.m.portSets, ps)
	return uint32(len(b.m.portSets) - 1)
}

// buildMember computes the member of cluster for Service s, or nil when
// it has nothing to give. old, the cluster's member at the last build, is
// returned as it is when it was built from the same objects.
func (x *Index) buildMember(k object.GroupKey, cluster string, s *object.Service, old *member) *member {
	return x.makeMember(k, cluster, s, old, "")
}

// makeMember is buildMember; with fed, a federated Service's name, the
// member of a linked cluster is named <cluster>.<fed>.<ns>.svc.<zone> in
// every zone (federated.go), and must be flat.
func (x *Index) makeMember(k object.GroupKey, cluster string, s *object.Service, old *member, fed string) *member {
	local := cluster == x.local
	var rel string
	switch {
	case local:
		rel = k.Svc + "." + k.NS + ".svc"
	case fed != "":
		rel = cluster + "." + fed + "." + k.NS + ".svc"
	default:
		mname, err := labels.MirrorName(s.Name, cluster)
		if err != nil {
			log.Debugf("%s: not exported from %s: %v", k, cluster, err)
			return nil
		}
		rel = mname + "." + k.NS + ".svc"
	}
	var sls []*object.Slice
	if local && s.Headless || !local && (s.Mode == labels.Flat || s.Headless) {
		sls = x.src.Slices(cluster, k.NS, k.Svc)
	}
	from := sources(s, sls)
	gateway := !local && s.Mode != labels.Flat
	if gateway && fed != "" {
		return nil
	}
	if old != nil && !gateway && reusable(old.from, from) {
		return old // nothing it was built from changed
	}

	m := &member{cluster: cluster, local: local, gateway: gateway, names: make([]string, len(x.zones))}
	for zi, z := range x.zones {
		m.names[zi] = rel + "." + z
		if zi >= x.nMirror && fed == "" {
			// A clusterset zone: <cluster>.<svc>.<ns>.svc.<zone>, the
			// parent of the cluster's pods there (clusterset.go).
			m.names[zi] = cluster + "." + k.Svc + "." + k.NS + ".svc." + z
		}
		if !validName(m.names[zi]) {
			m.bad++
			noteInvalid(cluster, m.names[zi])
			return nil
		}
	}
	switch {
	case gateway:
		x.mirrors(m, old, s, rel[:len(rel)-len(k.NS)-5], sls)
	case local && !s.Headless:
		b := newBuilder(m, nil)
		for _, ip := range s.ClusterIPs {
			if a, err := netip.ParseAddr(ip); err == nil {
				b.addr(a)
			}
		}
		m.ports = s.Ports
	default:
		var allow cidrs
		var out *[]dropped
		if !local {
			allow, out = x.allowed[cluster], &m.dropped
		}
		x.endpoints(m, old, s, sls, allow, out)
	}
	m.from = from
	return m
}

// sources lists the objects a member is built from, for reusable.
func sources(s *object.Service, sls []*object.Slice) []any {
	from := make([]any, 0, 1+len(sls))
	from = append(from, s)
	for _, sl := range sls {
		from = append(from, sl)
	}
	return from
}

// reusable reports whether a member built from old can stand for one built
// from now: the same objects, each with a resourceVersion (the informers
// replace an object on every change; a test's fake that edits in place
// has no versions, and is always rebuilt).
func reusable(old, now []any) bool {
	if len(old) != len(now) {
		return false
	}
	for i := range old {
		if old[i] != now[i] || object.Version(now[i]) == "" {
			return false
		}
	}
	return true
}

// mirrors fills a gateway-mode member from the local mirror Services, by
// Linkerd's rules: a headless Service with named endpoints is mirrored per
// pod, anything else by one ClusterIP. A pod whose mirror does not exist yet
// is left out: a record is only given when it can be routed.
func (x *Index) mirrors(m, old *member, s *object.Service, mname string, sls []*object.Slice) {
	mirror := x.src.Mirror(s.Namespace, mname)
	if mirror != nil && mirror.Cluster != m.cluster {
		mirror = nil // a mirror of another cluster's Service of that name
	}
	b := newBuilder(m, old)
	// A mirror made as a ClusterIP Service (the Service had no named
	// endpoints when it was mirrored) stays one: answer its ClusterIP.
	if !s.Headless || !named(sls) || (mirror != nil && !mirror.Headless) {
		if mirror != nil && !mirror.Headless && len(mirror.ClusterIPs) > 0 {
			for _, ip := range mirror.ClusterIPs {
				if a, err := netip.ParseAddr(ip); err == nil {
					b.addr(a)
				}
			}
			m.ports, m.ptr = mirror.Ports, true
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
			if !object.ValidLabel(e.Hostname) {
				m.bad++
				noteInvalid(m.cluster, e.Hostname)
				continue
			}
			pname, err := labels.EndpointMirrorName(e.Hostname, m.cluster)
			if err != nil {
				continue
			}
			pm := x.src.Mirror(s.Namespace, pname)
			if pm == nil || pm.Cluster != m.cluster || pm.HeadlessOf != mname || pm.Headless || len(pm.ClusterIPs) == 0 {
				continue
			}
			for _, ip := range pm.ClusterIPs {
				if a, err := netip.ParseAddr(ip); err == nil {
					b.podAddr(e.Hostname, a, pm.Ports)
				}
			}
		}
	}
	m.ptr = true
	b.finish(x.zones)
}

// named reports whether any endpoint has a hostname.
func named(sls []*object.Slice) bool {
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
// Addresses are compared by value. A linked cluster's (out set) that
// allow does not allow are left out, and added to out.
func (x *Index) endpoints(m, old *member, s *object.Service, sls []*object.Slice, allow cidrs, out *[]dropped) {
	b := newBuilder(m, old)
	for _, sl := range sls {
		var bad []string
		for _, e := range sl.Endpoints {
			if !(e.Ready || s.PublishNotReady) {
				continue
			}
			badHost := e.Hostname != "" && !object.ValidLabel(e.Hostname)
			if badHost {
				m.bad++
				noteInvalid(m.cluster, e.Hostname)
			}
			for _, ip := range e.Addresses {
				a, err := netip.ParseAddr(ip)
				if err != nil || a.Zone() != "" {
					continue
				}
				if out != nil && !allow.allows(a) {
					if !b.seen[a.Unmap()] {
						bad = append(bad, ip)
					}
					continue
				}
				if !s.Headless {
					if b.addr(a) {
						m.ports = addPorts(m.ports, sl.Ports)
					}
					continue
				}
				if badHost {
					b.looseAddr(a)
					continue
				}
				host := e.Hostname
				if host == "" {
					host = dashed(ip)
				}
				b.podAddr(host, a, sl.Ports)
			}
		}
		if len(bad) > 0 && out != nil {
			*out = append(*out, dropped{cluster: m.cluster, ns: sl.Namespace, slice: sl.Name, svc: s.Name, addrs: bad})
		}
	}
	b.finish(x.zones)
}

func addPorts(have, add []object.Port) []object.Port {
	for _, p := range add {
		if !slices.Contains(have, p) {
			have = append(slices.Clip(have), p)
		}
	}
	return have
}

// dashed turns an address, as the EndpointSlice writes it, into a DNS
// label, exactly as CoreDNS's kubernetes plugin names endpoints without a
// hostname (endpointHostname): dots or colons become dashes, and an IPv6
// name ending in a dash gets a 0 (fd00::  is fd00--0).
func dashed(ip string) string {
	if strings.Contains(ip, ".") {
		return strings.ReplaceAll(ip, ".", "-")
	}
	h := strings.ReplaceAll(ip, ":", "-")
	if strings.HasSuffix(h, "-") {
		h += "0"
	}
	return h
}

// validName reports whether name fits in the DNS: labels of at most 63
// octets, 255 in all.
func validName(name string) bool {
	_, ok := dns.IsDomainName(name)
	return ok
}

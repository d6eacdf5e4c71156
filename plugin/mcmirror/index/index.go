// Package index is the in-memory index of the mcmirror plugin: every name
// it answers, lowercased, mapped to the service group that answers it,
// with the compact data the answers are made of. It is built from a Source
// (the watches of package watch, or a fake) one group at a time (Sync),
// and read by the handler (Find, Claimed, FindCS, and Hit's methods). It
// does no I/O.
package index

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"

	"github.com/miekg/dns"
)

// Source is what the index is built from: the trimmed objects of the local
// cluster and of every linked cluster. The watches implement it
// (watch.Watcher); tests use a fake (indextest.Source).
type Source interface {
	// Links returns the names of the linked remote clusters.
	Links() []string
	// Service returns the exported Service ns/name of cluster (the local
	// cluster included), or nil when it does not export one.
	Service(cluster, ns, name string) *object.Service
	// Slices returns the EndpointSlices of Service ns/name of cluster.
	Slices(cluster, ns, name string) []*object.Slice
	// Mirror returns the local mirror Service ns/name, or nil.
	Mirror(ns, name string) *object.Mirror
	// Derived returns the local derived Service of the ServiceImport
	// ns/name, or nil (always nil without clusterset zones).
	Derived(ns, name string) *object.Derived
	// Member returns Service ns/name of cluster as a federated member: as
	// the federated members' watch holds it, else as an export; nil when
	// neither holds it.
	Member(cluster, ns, name string) *object.Service
	// Federations returns the names of the local federated Services of
	// namespace ns that list a member named member, in any cluster.
	Federations(ns, member string) []string
	// HasSynced reports whether the first sync is done: the clusters were
	// listed (or, for a linked one, had startup_timeout to be) and the
	// index caught up with them. It stays true from then on.
	HasSynced() bool
}

// Kind is the kind of a name, for the answers metric.
type Kind uint8

const (
	KindCluster Kind = iota // <svc>-<cluster>.<ns>.svc.<zone>
	KindPod                 // <host>.<svc>-<cluster>.<ns>.svc.<zone>
	KindGlobal              // <svc>-global.<ns>.svc.<zone>
	KindSRV                 // _<port>._<proto>.<any of the above>
	KindPTR                 // reverse name of a mirror ClusterIP, of a ClusterSetIP, or of a flat-mode pod of a Headless import
	KindCS                  // <svc>.<ns>.svc.<clusterset zone>
	// KindCSPod is <host>.<cluster>.<svc>.<ns>.svc.<clusterset zone> of a
	// Headless import, and, as a ref without a pod (p < 0), the empty
	// non-terminal <cluster>.<svc>.<ns>.svc.<clusterset zone> above it.
	KindCSPod
	KindCSZone    // any other name of a clusterset zone: its apex, dns-version, svc, <ns>.svc
	KindFederated // <svc>-federated.<ns>.svc.<zone> (federated.go)
	// NumKinds is the number of kinds.
	NumKinds
)

var kindNames = [NumKinds]string{"cluster", "pod", "global", "srv", "ptr", "clusterset", "clusterset-pod", "clusterset-zone", "federated"}

func (k Kind) String() string { return kindNames[k] }

// slot is where a group's names find its current data: a rebuild swaps
// the group in the slot, and names whose meaning did not change are not
// touched.
type slot struct {
	key object.GroupKey
	g   *group
}

// ref is a name of the index: which group, member and pod it is.
type ref struct {
	s    *slot
	p    int32 // pod index; -1 for the member's own name
	m    int16 // member index; -1 for a -global name
	zi   uint8 // forward zone of the name (PTR: its target's, 0)
	kind Kind
}

// Index maps every name mcmirror answers for, lowercased, to the group that
// answers it. A lookup is one map read under a read lock; the handler makes
// the answer from the group's compact data (Hit).
type Index struct {
	src   Source
	local string // this cluster's name
	// zones are the forward zones, lowercased: mcmirror's (the first
	// nMirror; the first of them names PTR targets), then the clusterset
	// zones (clusterset.go), where mcmirror's names do not exist.
	zones   []string
	nMirror int
	ptr     bool // a reverse zone is served, so build PTR names

	mu    sync.RWMutex
	names map[string]ref
	slots map[object.GroupKey]*slot
	// losers are the groups that produced a name another group owns
	// (svc "a-b" of cluster "c" and svc "a" of cluster "b-c" are both
	// "a-b-c"); they are rebuilt when the owner lets go of it. A name is
	// owned with everything below it: its pods and its SRV names.
	losers map[string][]object.GroupKey
	// cs holds the names of the clusterset zones, and the PTR names of
	// the ClusterSetIPs: no two groups make the same one (each name holds
	// its namespace and Service as labels of their own), so none is
	// contested. csNS counts the imports of each namespace, for the empty
	// non-terminals <ns>.svc and svc of the clusterset zones.
	cs   map[string]ref
	csNS map[string]int
	// csLosers are, by PTR name of the cs table, the groups that want it
	// while another holds it (installCS): rebuilt when it lets go.
	csLosers map[string][]object.GroupKey
	// counts of addresses and names, for the records metric.
	counts recordCounts

	// down is which clusters' gateways are down (gateways.go); nil while
	// every one is alive. With trackGateways (gateway_health), gateways
	// are the clusters with gateway-mode members in each group.
	down          atomic.Pointer[gatewayState]
	trackGateways bool
	gateways      map[object.GroupKey][]string

	// allowed are the allow-lists of the linked clusters that have one
	// (allowed_cidrs): their flat-mode addresses outside are dropped.
	allowed map[string]cidrs
	// drops has each drop logged and counted once.
	drops drops
}

type recordCounts struct{ a, aaaa, srv, ptr int }

func (c *recordCounts) add(g *group, sign int) {
	if g == nil {
		return
	}
	for i, m := range g.members {
		if m.local || !g.own(i) {
			continue
		}
		c.a += sign * len(m.v4) / 4
		c.aaaa += sign * len(m.v6) / 16
		c.srv += sign * (len(m.ports) + len(m.pods))
		if m.ptr {
			c.ptr += sign * (len(m.v4)/4 + len(m.v6)/16)
		}
	}
}

// Options are the settings of an Index.
type Options struct {
	// Cluster is this cluster's name.
	Cluster string
	// Zones are mcmirror's forward zones, lowercased; the first names the
	// targets of PTR records.
	Zones []string
	// ClusterSet are the zones, lowercased, that answer the names of the
	// Multi-Cluster Services DNS specification (clusterset.go).
	ClusterSet []string
	// PTR has the reverse names of the mirror ClusterIPs and ClusterSetIPs
	// made: a reverse zone is served.
	PTR bool
	// AllowedCIDRs bounds, per linked cluster, the flat-mode endpoint
	// addresses answered (allowed_cidrs): a cluster without a list is not
	// bounded, one with an empty list has none answered.
	AllowedCIDRs map[string][]netip.Prefix
	// GatewayHealth has the index keep which groups have gateway-mode
	// members of each cluster, for SetGatewaysDown (gateway_health).
	GatewayHealth bool
}

// New returns an empty index of what src holds; Sync builds its groups.
func New(src Source, o Options) *Index {
	x := &Index{
		src:           src,
		local:         o.Cluster,
		zones:         append(slices.Clip(o.Zones), o.ClusterSet...),
		nMirror:       len(o.Zones),
		ptr:           o.PTR,
		trackGateways: o.GatewayHealth,
		names:         map[string]ref{},
		slots:         map[object.GroupKey]*slot{},
		losers:        map[string][]object.GroupKey{},
		cs:            map[string]ref{},
		csNS:          map[string]int{},
		csLosers:      map[string][]object.GroupKey{},
	}
	for c, l := range o.AllowedCIDRs {
		if x.allowed == nil {
			x.allowed = map[string]cidrs{}
		}
		x.allowed[c] = cidrs(l)
	}
	return x
}

// Hit is a name found in the index, with what the query asks of it.
type Hit struct {
	g    *group
	r    ref
	port string // _<port>, for an SRV name, without the underscore
	// proto is _<proto> of an SRV name or its parent, without the
	// underscore; "" for the name itself.
	proto string
}

// Kind returns the kind of name for the answers metric.
func (h *Hit) Kind() Kind {
	if h.proto != "" {
		return KindSRV
	}
	return h.r.kind
}

// Find returns what name (lowercased) is in the index: a name itself, or
// _<port>._<proto> or _<proto> below one. A name whose first label starts
// with an underscore is neither a name of the table nor a pod (their labels
// are object.ValidLabel's), so it is looked up only below its underscore labels.
func (x *Index) Find(name string) (Hit, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if len(name) == 0 || name[0] != '_' {
		if r, ok := x.resolve(name); ok {
			return Hit{g: r.s.g, r: r}, true
		}
		if r, ok := x.cs[name]; ok && r.kind == KindPTR { // a ClusterSetIP's
			return Hit{g: r.s.g, r: r}, true
		}
		return Hit{}, false
	}
	first, rest, ok := cutLabel(name)
	if !ok {
		return Hit{}, false
	}
	if len(rest) == 0 || rest[0] != '_' {
		if r, ok := x.resolve(rest); ok && r.kind != KindPTR {
			return Hit{g: r.s.g, r: r, proto: first[1:]}, true
		}
		return Hit{}, false
	}
	second, rest, ok := cutLabel(rest)
	if !ok {
		return Hit{}, false
	}
	if r, ok := x.resolve(rest); ok && r.kind != KindPTR {
		return Hit{g: r.s.g, r: r, port: first[1:], proto: second[1:]}, true
	}
	return Hit{}, false
}

// resolve returns the ref of name: a name of the table, or a pod below a
// member's name, found in that member's pods by the hash of its host. Pods are
// not in the table: one map entry per endpoint would cost a third of the
// index's memory. The caller holds x.mu.
func (x *Index) resolve(name string) (ref, bool) {
	if r, ok := x.names[name]; ok {
		return r, true
	}
	host, parent, ok := cutLabel(name)
	if !ok {
		return ref{}, false
	}
	r, ok := x.names[parent]
	if !ok || r.kind != KindCluster {
		return ref{}, false
	}
	p := r.s.g.members[r.m].findPod(host, name, int(r.zi))
	if p < 0 {
		return ref{}, false
	}
	r.p, r.kind = int32(p), KindPod
	return r, true
}

// cutLabel splits the first label off name, unless it holds an escape.
func cutLabel(name string) (label, rest string, ok bool) {
	i := strings.IndexByte(name, '.')
	if i < 0 || i+1 >= len(name) || strings.IndexByte(name[:i], '\\') >= 0 {
		return "", "", false
	}
	return name[:i], name[i+1:], true
}

// Lookup returns what name is in the index, or nil: as Find, less an SRV
// name of a port or protocol the name does not have.
func (x *Index) Lookup(name string) *Hit {
	h, ok := x.Find(name)
	if !ok || !h.Exists() {
		return nil
	}
	return &h
}

// Claimed reports whether name (lowercased, inside zone) lies below a name
// of the index: an unknown pod or port of a known Service, which is NXDOMAIN
// rather than someone else's name.
func (x *Index) Claimed(name, zone string) (Kind, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	// Label by label, as dns.NextLabel splits them: a dot escaped inside
	// a label (`a\.nginx-svc-west`) does not make a name below ours.
	for off, end := dns.NextLabel(name, 0); !end && len(name)-off > len(zone); off, end = dns.NextLabel(name, off) {
		if _, ok := x.names[name[off:]]; ok {
			if name[0] == '_' {
				return KindSRV, true
			}
			return KindPod, true
		}
	}
	return 0, false
}

// Len returns the number of names in mcmirror's zones (the clusterset
// zones' are not counted).
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.names)
}

// Sync rebuilds group k from the source and installs it. It returns the
// groups that must be rebuilt because k let go of a name they want, or
// whose gateway states changed while it was built. The watches call it
// from one goroutine: two builds of a group never race.
func (x *Index) Sync(k object.GroupKey) []object.GroupKey {
	health := x.down.Load()
	x.mu.RLock()
	var old *group
	if s := x.slots[k]; s != nil {
		old = s.g
	}
	x.mu.RUnlock()
	g := x.build(k, old, health)
	again := append(x.install(k, g), x.federations(k)...)
	if x.down.Load() != health { // changed before install recorded k
		again = append(again, k)
	}
	return again
}

// build computes group k, reusing old's members that did not change; nil
// when nobody exports the Service.
func (x *Index) build(k object.GroupKey, old *group, health *gatewayState) *group {
	if name, ok := k.Federated(); ok {
		return x.buildFederated(k, name, old)
	}
	if !object.ValidLabel(k.NS) || !object.ValidLabel(k.Svc) {
		// A name a remote API server should not have let through:
		// it could add a label and shadow another name.
		if x.exportedAnywhere(k) {
			noteInvalid("", k.String())
		}
		return nil
	}
	g := &group{key: k}
	var dropped []dropped
	add := func(c string, s *object.Service) {
		if s == nil {
			return
		}
		if s.ExternalName {
			noteExternalName(c, k)
			return
		}
		m := x.buildMember(k, c, s, old.member(c))
		if m == nil {
			return
		}
		g.members = append(g.members, m)
		dropped = append(dropped, m.dropped...)
	}
	add(x.local, x.src.Service(x.local, k.NS, k.Svc))
	for _, c := range x.src.Links() {
		add(c, x.src.Service(c, k.NS, k.Svc))
	}
	x.drops.note(k, dropped)
	var d *object.Derived
	if x.nMirror < len(x.zones) {
		d = x.src.Derived(k.NS, k.Svc)
	}
	if len(g.members) == 0 && d == nil {
		return nil // nobody exports it, nor imports it: nothing is claimed
	}
	g.hidden = make([]bool, len(g.members))
	for i, m := range g.members {
		g.hidden[i] = health.hides(m)
	}
	g.global = make([]string, len(x.zones))
	for zi, z := range x.zones[:x.nMirror] {
		if len(g.members) == 0 {
			break // imported only: no -global name
		}
		if name := k.Svc + "-" + labels.Global + "." + k.NS + ".svc." + z; validName(name) {
			g.global[zi] = name
		}
	}
	g.v4, g.v6 = globalAddrs(g)
	if d != nil {
		var was *imported
		if old != nil {
			was = old.imp
		}
		g.imp = x.buildImport(k, d, was)
	}
	return g
}

// exportedAnywhere reports whether any cluster has a Service k.
func (x *Index) exportedAnywhere(k object.GroupKey) bool {
	if x.src.Service(x.local, k.NS, k.Svc) != nil {
		return true
	}
	for _, c := range x.src.Links() {
		if x.src.Service(c, k.NS, k.Svc) != nil {
			return true
		}
	}
	return false
}

// member returns g's member of cluster, or nil.
func (g *group) member(cluster string) *member {
	if g == nil {
		return nil
	}
	for _, m := range g.members {
		if m.cluster == cluster {
			return m
		}
	}
	return nil
}

// globalAddrs returns the addresses of g's visible members, in member
// order, each once.
func globalAddrs(g *group) (v4, v6 []byte) {
	n4, n6, parts := 0, 0, 0
	for i, m := range g.members {
		if g.hidden[i] {
			continue
		}
		n4, n6 = n4+len(m.v4), n6+len(m.v6)
		if len(m.v4)+len(m.v6) > 0 {
			parts++
		}
	}
	if parts == 1 { // one member: its addresses are unique already
		for i, m := range g.members {
			if !g.hidden[i] && len(m.v4)+len(m.v6) > 0 {
				return m.v4, m.v6
			}
		}
	}
	v4, v6 = make([]byte, 0, n4), make([]byte, 0, n6)
	seen4 := make(map[[4]byte]struct{}, n4/4)
	seen6 := map[[16]byte]struct{}{}
	for i, m := range g.members {
		if g.hidden[i] {
			continue
		}
		for j := 0; j < len(m.v4); j += 4 {
			a := [4]byte(m.v4[j : j+4])
			if _, ok := seen4[a]; !ok {
				seen4[a] = struct{}{}
				v4 = append(v4, a[:]...)
			}
		}
		for j := 0; j < len(m.v6); j += 16 {
			a := [16]byte(m.v6[j : j+16])
			if _, ok := seen6[a]; !ok {
				seen6[a] = struct{}{}
				v6 = append(v6, a[:]...)
			}
		}
	}
	return slices.Clip(v4), slices.Clip(v6)
}

// own reports whether g holds the name of member i: not the local one
// (the kubernetes plugin's), nor one another group took.
func (g *group) own(i int) bool { return !g.members[i].local && !g.lost[i+1] }

// groupLess orders groups for a contested name: the first keeps it.
func groupLess(a, b object.GroupKey) bool {
	return cmp.Or(cmp.Compare(a.NS, b.NS), cmp.Compare(a.Svc, b.Svc)) < 0
}

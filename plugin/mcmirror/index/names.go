package index

import (
	"bytes"
	"net"
	"slices"
	"strings"

	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"
	"github.com/miekg/dns"
)

// The name table: install puts a built group's names in the index. A name
// belongs to one group; a group's names come in units, each owned or lost
// whole: the -global name (unit -1) and each member's name (unit i) with
// its PTR names, and the pods below it, which are not in the table: Find
// looks a pod up in the member that owns its parent name. When two groups produce the same name
// (svc "a-b" of cluster "c" and svc "a" of cluster "b-c" are both
// "a-b-c"), the first by groupLess keeps the whole unit, and the other is
// rebuilt when it lets go.
//
// A rebuild touches only the names of members that changed: a member whose
// names are the same at the same position keeps its entries, which Find
// the new group through the slot.

// install puts g, group k's new build (nil: k is gone), in the index. It
// returns the groups to rebuild because k let go of a name they want.
func (x *Index) install(k object.GroupKey, g *group) []object.GroupKey {
	x.mu.Lock()
	defer x.mu.Unlock()

	var cs []string
	if g != nil {
		cs = gatewayClusters(g.members)
	}
	x.noteGateways(k, cs)
	s := x.slots[k]
	if s == nil {
		if g == nil {
			return nil
		}
		s = &slot{key: k}
		x.slots[k] = s
	}
	old := s.g
	x.counts.add(old, -1)

	var again []object.GroupKey
	keep := []bool(nil)
	if g != nil {
		g.lost = make([]bool, len(g.members)+1)
		keep = make([]bool, len(g.members))
	}
	if old != nil {
		for j, om := range old.members {
			if om.local || old.lost[j+1] {
				continue
			}
			if g != nil && j < len(g.members) && g.members[j].cluster == om.cluster && sameNames(om, g.members[j]) {
				keep[j] = true
				continue
			}
			x.drop(s, old, j, &again)
		}
		if !old.lost[0] && (g == nil || !slices.Equal(old.global, g.global)) {
			x.drop(s, old, -1, &again)
		}
	}
	s.g = g
	x.installCS(s, old, g, &again)
	if g == nil {
		delete(x.slots, k)
		x.publish()
		return again
	}
	for i, m := range g.members {
		if !m.local && !keep[i] {
			x.add(s, i, &again)
		}
	}
	if old == nil || old.lost[0] || !slices.Equal(old.global, g.global) {
		x.add(s, -1, &again)
	}
	x.counts.add(g, 1)
	x.publish()
	return again
}

// publish sets the index gauges.
func (x *Index) publish() {
	indexNames.Set(float64(len(x.names) + len(x.cs)))
	indexRecords.WithLabelValues("A").Set(float64(x.counts.a))
	indexRecords.WithLabelValues("AAAA").Set(float64(x.counts.aaaa))
	indexRecords.WithLabelValues("SRV").Set(float64(x.counts.srv))
	indexRecords.WithLabelValues("PTR").Set(float64(x.counts.ptr))
}

// sameNames reports whether b has exactly a's names in the table, so that
// the entries of a stand for b. Pod names are not in the table (Find
// looks them up in their member), so a change of pods costs no write
// unless PTR names, made of the addresses, change.
func sameNames(a, b *member) bool {
	if a == b {
		return true
	}
	if !slices.Equal(a.names, b.names) || a.ptr != b.ptr {
		return false
	}
	if a.ptr {
		if !bytes.Equal(a.v4, b.v4) || !bytes.Equal(a.v6, b.v6) || !slices.Equal(a.podNames, b.podNames) {
			return false
		}
		for i := range a.pods {
			if a.pods[i] != b.pods[i] {
				return false
			}
		}
	}
	return true
}

// unitNames calls f with each name of unit u of s's group (u = -1: the
// -global names), the unit's own names first.
func (x *Index) unitNames(s *slot, u int, f func(name string, r ref) bool) {
	g := s.g
	if u < 0 {
		kind := KindGlobal
		if _, ok := s.key.Federated(); ok {
			kind = KindFederated
		}
		for zi, name := range g.global {
			if name != "" && !f(name, ref{s: s, m: -1, p: -1, zi: uint8(zi), kind: kind}) {
				return
			}
		}
		return
	}
	m := g.members[u]
	for zi, name := range m.names[:x.nMirror] { // not the clusterset zones'
		if !f(name, ref{s: s, m: int16(u), p: -1, zi: uint8(zi), kind: KindCluster}) {
			return
		}
	}
	if !m.ptr || !x.ptr || x.nMirror == 0 {
		return // PTR records point into the first of mcmirror's zones
	}
	if len(m.pods) == 0 {
		eachAddr(m.v4, m.v6, func(ip net.IP) {
			if rev, err := dns.ReverseAddr(ip.String()); err == nil {
				f(rev, ref{s: s, m: int16(u), p: -1, kind: KindPTR})
			}
		})
		return
	}
	for i := range m.pods {
		p := &m.pods[i]
		eachAddr(m.podV4(p), m.podV6(p), func(ip net.IP) {
			if rev, err := dns.ReverseAddr(ip.String()); err == nil {
				f(rev, ref{s: s, m: int16(u), p: int32(i), kind: KindPTR})
			}
		})
	}
}

func eachAddr(v4, v6 []byte, f func(net.IP)) {
	for i := 0; i < len(v4); i += 4 {
		f(net.IP(v4[i : i+4]))
	}
	for i := 0; i < len(v6); i += 16 {
		f(net.IP(v6[i : i+16]))
	}
}

// drop removes the names of unit u of g, installed through s, that are
// still s's, and asks for the groups that wanted them.
func (x *Index) drop(s *slot, g *group, u int, again *[]object.GroupKey) {
	cur := s.g
	s.g = g // unitNames reads the slot's group
	x.unitNames(s, u, func(name string, r ref) bool {
		if have, ok := x.names[name]; ok && have.s == s {
			delete(x.names, name)
			*again = append(*again, x.losers[name]...)
			delete(x.losers, name)
		}
		return true
	})
	s.g = cur
}

// add installs the names of unit u of s's group: all of them, or none
// when another group keeps its first name.
func (x *Index) add(s *slot, u int, again *[]object.GroupKey) {
	g := s.g
	first := true
	x.unitNames(s, u, func(name string, r ref) bool {
		have, ok := x.names[name]
		if ok && have.s != s {
			if r.kind == KindPTR {
				return true // below a name of ours: someone else's by another route
			}
			if groupLess(have.s.key, s.key) {
				if !slices.Contains(x.losers[name], s.key) {
					log.Warningf("%s: name %s is already %s's, with every name below it; the cluster and service names overlap", s.key, strings.TrimSuffix(name, "."), have.s.key)
					x.losers[name] = append(x.losers[name], s.key)
				}
				if first {
					g.lost[u+1] = true
					return false
				}
				return true
			}
			if !slices.Contains(x.losers[name], have.s.key) {
				log.Warningf("%s: name %s taken from %s, with every name below it; the cluster and service names overlap", s.key, strings.TrimSuffix(name, "."), have.s.key)
			}
			x.take(have, name, again)
		}
		first = false
		x.names[name] = r
		return true
	})
}

// take removes the whole unit that holds name from its group, which is
// rebuilt when name is free again.
func (x *Index) take(have ref, name string, again *[]object.GroupKey) {
	loser := have.s
	u := int(have.m)
	if have.kind == KindGlobal || have.kind == KindFederated {
		u = -1
	}
	x.counts.add(loser.g, -1)
	x.drop(loser, loser.g, u, again)
	loser.g.lost[u+1] = true
	x.counts.add(loser.g, 1)
	if !slices.Contains(x.losers[name], loser.key) {
		x.losers[name] = append(x.losers[name], loser.key)
	}
}

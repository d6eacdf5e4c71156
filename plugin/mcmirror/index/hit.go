package index

import "github.com/mcmirror/mcmirror/plugin/mcmirror/object"

// What a name found holds, for the handler to make records of: addresses
// (packed, 4 and 16 octets each, sub-slices of the group's own: an answer
// shares them rather than copying), SRV targets, a PTR target. Nothing
// here allocates.

// Addresses returns the A (v4) or AAAA addresses of h, packed.
func (h *Hit) Addresses(v6 bool) []byte {
	g := h.g
	if h.proto != "" || h.r.kind == KindPTR {
		return nil
	}
	var v []byte
	switch {
	case h.r.kind == KindCS && !g.imp.headless:
		v = g.imp.v4 // the ClusterSetIPs
		if v6 {
			v = g.imp.v6
		}
	case h.r.kind == KindCSPod && h.r.p < 0:
		return nil // <cluster>.<svc>: no records of its own
	case h.r.m < 0:
		v = g.v4
		if v6 {
			v = g.v6
		}
	case h.r.p < 0:
		m := g.members[h.r.m]
		v = m.v4
		if v6 {
			v = m.v6
		}
	default:
		m := g.members[h.r.m]
		p := &m.pods[h.r.p]
		v = m.podV4(p)
		if v6 {
			v = m.podV6(p)
		}
	}
	return v
}

// SRV reports whether h is a name SRV records are made for: the name
// itself or _<port>._<proto> below it; not _<proto> alone (an empty
// non-terminal) nor a reverse name.
func (h *Hit) SRV() bool { return h.r.kind != KindPTR && (h.proto == "" || h.port != "") }

// PTR returns the name the reverse name h points at; false when h is not
// a reverse name.
func (h *Hit) PTR() (string, bool) {
	if h.r.kind != KindPTR {
		return "", false
	}
	switch {
	case h.r.m < 0: // a ClusterSetIP
		return h.g.imp.names[h.r.zi], true
	case h.r.p >= 0: // a pod, in a mirror zone or a clusterset zone
		return h.g.members[h.r.m].podName(int(h.r.p), int(h.r.zi)), true
	default:
		return h.g.members[h.r.m].names[0], true
	}
}

// match reports whether port p, after the ports before it in its list,
// answers h: every distinct port number for the name itself, the named
// ports of h.proto for _<proto>, and port h.port of it for
// _<port>._<proto>.
func (h *Hit) match(p *object.Port, before []object.Port) bool {
	if h.proto == "" {
		for i := range before {
			if before[i].Port == p.Port {
				return false
			}
		}
		return true
	}
	return p.Name != "" && p.Protocol == h.proto && (h.port == "" || p.Name == h.port)
}

// Target is one SRV target as EachTarget hands it out.
type Target struct {
	Name   string
	Port   uint16
	V4, V6 []byte // its addresses, packed, for the glue
	// First is whether this is the first target of the name: its glue
	// goes in once.
	First bool
}

// EachTarget calls f with each SRV target of h, in order (the members in
// group order, the local one first; pods by name; ports in order), until f
// returns false.
func (h *Hit) EachTarget(f func(t Target) bool) {
	g := h.g
	zi := int(h.r.zi)
	switch {
	case h.r.kind == KindCS && !g.imp.headless:
		h.importTargets(f)
		return
	case h.r.kind == KindCSPod && h.r.p < 0:
		return
	}
	lo, hi := 0, len(g.members)
	if h.r.m >= 0 {
		lo, hi = int(h.r.m), int(h.r.m)+1
	}
	var t Target
	for i := lo; i < hi; i++ {
		if h.r.m < 0 && g.hidden[i] {
			continue
		}
		m := g.members[i]
		if len(m.pods) == 0 {
			if h.r.kind == KindCS {
				// A clusterset zone names pods only: a member without
				// any (a ClusterIP export of a Headless import) has no
				// name to be a target.
				continue
			}
			t = Target{Name: m.names[zi], V4: m.v4, V6: m.v6, First: true}
			for j := range m.ports {
				if h.match(&m.ports[j], m.ports[:j]) {
					t.Port = uint16(m.ports[j].Port)
					if !f(t) {
						return
					}
					t.First = false
				}
			}
			continue
		}
		plo, phi := 0, len(m.pods)
		if h.r.p >= 0 {
			plo, phi = int(h.r.p), int(h.r.p)+1
		}
		for j := plo; j < phi; j++ {
			p := &m.pods[j]
			ports := m.portSets[p.ports]
			t = Target{Name: m.podName(j, zi), V4: m.podV4(p), V6: m.podV6(p), First: true}
			for k := range ports {
				if h.match(&ports[k], ports[:k]) {
					t.Port = uint16(ports[k].Port)
					if !f(t) {
						return
					}
					t.First = false
				}
			}
		}
	}
}

// Exists reports whether the name of h exists: an SRV name (or the
// _<proto> above one) only when it has a target, the name of a Headless
// import in a clusterset zone only when it has an address or a pod
// (csVoid); any other name found does.
func (h *Hit) Exists() bool {
	if h.proto == "" {
		return h.r.kind != KindCS || !h.g.csVoid()
	}
	found := false
	h.EachTarget(func(Target) bool { found = true; return false })
	return found
}

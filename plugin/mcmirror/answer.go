package mcmirror

import (
	"net"

	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"

	"github.com/miekg/dns"
)

// Answers are made at query time from a group's compact data. The common
// replies are one allocation each, the message, its question, the records
// and the list of them together: one address record (a ClusterIP, one
// pod), a few addresses (a -global name of a few clusters), one SRV target
// and its glue (a pod, a one-port Service). Others cost three whatever
// their size: the message (with its question), one []dns.RR for the
// answer and additional sections, and one array of the records themselves.
// Owner names are the question's name; SRV targets and glue owners are the
// pod's or member's one name string; addresses are sub-slices of the
// member's packed addresses.

// reply is a message and its question, allocated together.
type reply struct {
	msg dns.Msg
	q   [1]dns.Question
}

// newReply returns an authoritative reply to r with rcode.
func newReply(r *dns.Msg, rcode int) *dns.Msg { return (&reply{}).init(r, rcode) }

// init makes rp an authoritative reply to r with rcode, and returns its
// message.
func (rp *reply) init(r *dns.Msg, rcode int) *dns.Msg {
	m := &rp.msg
	m.Id = r.Id
	m.Response = true
	m.Opcode = r.Opcode
	if m.Opcode == dns.OpcodeQuery {
		m.RecursionDesired = r.RecursionDesired
		m.CheckingDisabled = r.CheckingDisabled
	}
	m.Authoritative = true
	m.Rcode = rcode
	rp.q[0] = r.Question[0]
	m.Question = rp.q[:]
	return m
}

// answer returns the reply to r, asking for a name of h (name, lowercased)
// of class IN, made from the index, or nil if h has no record of the type
// asked for (NODATA): at most limit answer records, with TC set if that
// left some out, and room for extra more records (the OPT record the
// server's writer adds).
func (h *hit) answer(r *dns.Msg, name string, ttl uint32, limit, extra int) *dns.Msg {
	switch qtype := r.Question[0].Qtype; qtype {
	case dns.TypeA, dns.TypeAAAA:
		v6 := qtype == dns.TypeAAAA
		v := h.addresses(v6)
		n := len(v) / 4
		if v6 {
			n = len(v) / 16
		}
		switch {
		case n == 1:
			return oneAddressReply(r, name, v, v6, ttl, extra)
		case n > 1 && n <= fewAddresses && n <= limit:
			return fewAddressReply(r, name, v, v6, ttl, extra)
		case n > 0:
			rrs, cut := addressRRs(name, v, v6, ttl, limit, extra)
			return withRecords(r, rrs, len(rrs), extra, cut)
		}
	case dns.TypeSRV:
		if h.r.kind != kindPTR && (h.proto == "" || h.port != "") {
			return h.srvReply(r, name, ttl, limit, extra)
		}
	case dns.TypePTR:
		if h.r.kind == kindPTR {
			return withRecords(r, h.ptrRR(name, ttl, extra), 1, extra, false)
		}
	}
	return nil
}

// withRecords returns the reply to r of rrs: the first nAnswer in the
// answer section, the others (and the room for extra more) in the
// additional section; TC set if cut.
func withRecords(r *dns.Msg, rrs []dns.RR, nAnswer, extra int, cut bool) *dns.Msg {
	m := newReply(r, dns.RcodeSuccess)
	m.Truncated = cut
	m.Answer = rrs[:nAnswer:nAnswer]
	if len(rrs) > nAnswer || extra > 0 {
		m.Extra = rrs[nAnswer:]
	}
	return m
}

// srvRec is an SRV record and room for the glue of its target, allocated
// together.
type srvRec struct {
	srv  dns.SRV
	a    dns.A
	aaaa dns.AAAA
}

// maxRecords bounds the answer records made for a reply that must fit in
// size octets: no record is shorter than 16 octets on the wire (a
// compressed owner and an A record's data), so more than size/16 cannot
// fit. A reply cut there has TC set by the plugin; the server's writer
// truncates it further to the client's buffer.
func maxRecords(size int) int { return size / 16 }

// addresses returns the A (v4) or AAAA addresses of h.
func (h *hit) addresses(v6 bool) []byte {
	g := h.g
	if h.proto != "" || h.r.kind == kindPTR {
		return nil
	}
	var v []byte
	switch {
	case h.r.kind == kindCS && !g.imp.headless:
		v = g.imp.v4 // the ClusterSetIPs
		if v6 {
			v = g.imp.v6
		}
	case h.r.kind == kindCSPod && h.r.p < 0:
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

// addressRRs returns the A or AAAA records of v, owned by name, at most
// limit of them, in one allocation besides rrs, and whether that left
// some out; rrs gets room for extra more records (the OPT record the
// server's writer adds).
func addressRRs(name string, v []byte, v6 bool, ttl uint32, limit, extra int) (rrs []dns.RR, cut bool) {
	size := 4
	if v6 {
		size = 16
	}
	n := min(len(v)/size, limit)
	cut = n < len(v)/size
	rrs = make([]dns.RR, n, n+extra)
	if v6 {
		recs := make([]dns.AAAA, n)
		for i := range recs {
			recs[i] = dns.AAAA{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: ttl}, AAAA: net.IP(v[i*16 : i*16+16 : i*16+16])}
			rrs[i] = &recs[i]
		}
		return rrs, cut
	}
	recs := make([]dns.A, n)
	for i := range recs {
		recs[i] = dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: net.IP(v[i*4 : i*4+4 : i*4+4])}
		rrs[i] = &recs[i]
	}
	return rrs, cut
}

// oneAddressReply returns the reply to r of the one A or AAAA record of
// v, owned by name, with room for extra more records: the most common
// answer (a ClusterIP, one pod's address), in one allocation.
func oneAddressReply(r *dns.Msg, name string, v []byte, v6 bool, ttl uint32, extra int) *dns.Msg {
	hdr := dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}
	var m *dns.Msg
	var rrs []dns.RR
	if v6 {
		rp := &struct {
			reply
			aaaa dns.AAAA
			rrs  [2]dns.RR
		}{}
		hdr.Rrtype = dns.TypeAAAA
		rp.aaaa = dns.AAAA{Hdr: hdr, AAAA: net.IP(v[:16:16])}
		rp.rrs[0] = &rp.aaaa
		m, rrs = rp.init(r, dns.RcodeSuccess), rp.rrs[:]
	} else {
		rp := &struct {
			reply
			a   dns.A
			rrs [2]dns.RR
		}{}
		rp.a = dns.A{Hdr: hdr, A: net.IP(v[:4:4])}
		rp.rrs[0] = &rp.a
		m, rrs = rp.init(r, dns.RcodeSuccess), rp.rrs[:]
	}
	m.Answer = rrs[:1:1]
	if extra > 0 {
		m.Extra = rrs[1:1:2]
	}
	return m
}

// fewAddresses is the most addresses fewAddressReply puts in one
// allocation: a Service's -global name in a few clusters.
const fewAddresses = 4

// fewAddressReply returns the reply to r of the A or AAAA records of v
// (at most fewAddresses), owned by name, with room for extra more records
// (at most one), in one allocation.
func fewAddressReply(r *dns.Msg, name string, v []byte, v6 bool, ttl uint32, extra int) *dns.Msg {
	hdr := dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}
	var m *dns.Msg
	var rrs []dns.RR
	if v6 {
		rp := &struct {
			reply
			aaaa [fewAddresses]dns.AAAA
			rrs  [fewAddresses + 1]dns.RR
		}{}
		hdr.Rrtype = dns.TypeAAAA
		for i := range len(v) / 16 {
			rp.aaaa[i] = dns.AAAA{Hdr: hdr, AAAA: net.IP(v[i*16 : i*16+16 : i*16+16])}
			rp.rrs[i] = &rp.aaaa[i]
		}
		m, rrs = rp.init(r, dns.RcodeSuccess), rp.rrs[:len(v)/16]
	} else {
		rp := &struct {
			reply
			a   [fewAddresses]dns.A
			rrs [fewAddresses + 1]dns.RR
		}{}
		for i := range len(v) / 4 {
			rp.a[i] = dns.A{Hdr: hdr, A: net.IP(v[i*4 : i*4+4 : i*4+4])}
			rp.rrs[i] = &rp.a[i]
		}
		m, rrs = rp.init(r, dns.RcodeSuccess), rp.rrs[:len(v)/4]
	}
	n := len(rrs)
	m.Answer = rrs[:n:n]
	if extra > 0 {
		m.Extra = rrs[n : n : n+1]
	}
	return m
}

// match reports whether port p, after the ports before it in its list,
// answers h: every distinct port number for the name itself, the named
// ports of h.proto for _<proto>, and port h.port of it for
// _<port>._<proto>.
func (h *hit) match(p *object.Port, before []object.Port) bool {
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

// target is one SRV target as eachTarget hands it out.
type target struct {
	name   string
	port   uint16
	v4, v6 []byte
	// first is whether this is the first target of the name: its glue
	// goes in once.
	first bool
}

// eachTarget calls f with each SRV target of h, in order (the members in
// group order, the local one first; pods by name; ports in order), until f
// returns false.
func (h *hit) eachTarget(f func(t target) bool) {
	g := h.g
	zi := int(h.r.zi)
	switch {
	case h.r.kind == kindCS && !g.imp.headless:
		h.importTargets(f)
		return
	case h.r.kind == kindCSPod && h.r.p < 0:
		return
	}
	lo, hi := 0, len(g.members)
	if h.r.m >= 0 {
		lo, hi = int(h.r.m), int(h.r.m)+1
	}
	var t target
	for i := lo; i < hi; i++ {
		if h.r.m < 0 && g.hidden[i] {
			continue
		}
		m := g.members[i]
		if len(m.pods) == 0 {
			if h.r.kind == kindCS {
				// A clusterset zone names pods only: a member without
				// any (a ClusterIP export of a Headless import) has no
				// name to be a target.
				continue
			}
			t = target{name: m.names[zi], v4: m.v4, v6: m.v6, first: true}
			for j := range m.ports {
				if h.match(&m.ports[j], m.ports[:j]) {
					t.port = uint16(m.ports[j].Port)
					if !f(t) {
						return
					}
					t.first = false
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
			t = target{name: m.podName(j, zi), v4: m.podV4(p), v6: m.podV6(p), first: true}
			for k := range ports {
				if h.match(&ports[k], ports[:k]) {
					t.port = uint16(ports[k].Port)
					if !f(t) {
						return
					}
					t.first = false
				}
			}
		}
	}
}

// exists reports whether the SRV name (or the _<proto> above one) of h has
// a target: if not, it does not exist.
func (h *hit) exists() bool {
	found := false
	h.eachTarget(func(target) bool { found = true; return false })
	return found
}

// srvReply returns the reply to r of the SRV records of h owned by name,
// at most limit, and the glue of their targets, with room for extra more
// records, or nil if h has no target. The weights split 100 evenly, as
// CoreDNS's kubernetes plugin does. A reply of one target (a pod, a
// ClusterIP Service of one port) is one allocation; others three, and
// more only when a target has several addresses of a family.
func (h *hit) srvReply(r *dns.Msg, name string, ttl uint32, limit, extra int) *dns.Msg {
	n, g4, g6, total := 0, 0, 0, 0
	var first target
	h.eachTarget(func(t target) bool {
		if total == 0 {
			first = t
		}
		total++
		if n < limit {
			n++
			if t.first {
				g4 += len(t.v4) / 4
				g6 += len(t.v6) / 16
			}
		}
		return true
	})
	switch {
	case n == 0:
		return nil
	case total == 1 && g4 <= 1 && g6 <= 1:
		return oneSRVReply(r, name, first, ttl, extra)
	}
	g4, g6 = min(g4, limit), min(g6, limit)
	weight := uint16(100 / total)
	rrs := make([]dns.RR, n, n+g4+g6+extra)
	recs := make([]srvRec, n)
	var as []dns.A
	var aaaas []dns.AAAA
	if g4 > n {
		as = make([]dns.A, g4)
	}
	if g6 > n {
		aaaas = make([]dns.AAAA, g6)
	}
	i, i4, i6 := 0, 0, 0
	h.eachTarget(func(t target) bool {
		if i == n {
			return false
		}
		recs[i].srv = dns.SRV{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: ttl}, Weight: weight, Port: t.port, Target: t.name}
		rrs[i] = &recs[i].srv
		i++
		if !t.first {
			return true
		}
		for j := 0; j < len(t.v4) && i4 < g4; j += 4 {
			var a *dns.A
			if as != nil {
				a = &as[i4]
			} else {
				a = &recs[i4].a
			}
			*a = dns.A{Hdr: dns.RR_Header{Name: t.name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: net.IP(t.v4[j : j+4 : j+4])}
			rrs = append(rrs, a)
			i4++
		}
		for j := 0; j < len(t.v6) && i6 < g6; j += 16 {
			var a *dns.AAAA
			if aaaas != nil {
				a = &aaaas[i6]
			} else {
				a = &recs[i6].aaaa
			}
			*a = dns.AAAA{Hdr: dns.RR_Header{Name: t.name, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: ttl}, AAAA: net.IP(t.v6[j : j+16 : j+16])}
			rrs = append(rrs, a)
			i6++
		}
		return true
	})
	return withRecords(r, rrs, n, extra, n < total)
}

// oneSRVReply returns the reply to r of the one SRV record of t, owned by
// name, and the glue of t (at most one address of each family), with room
// for extra more records, in one allocation.
func oneSRVReply(r *dns.Msg, name string, t target, ttl uint32, extra int) *dns.Msg {
	rp := &struct {
		reply
		srvRec
		rrs [4]dns.RR
	}{}
	m := rp.init(r, dns.RcodeSuccess)
	rp.srv = dns.SRV{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: ttl}, Weight: 100, Port: t.port, Target: t.name}
	rp.rrs[0] = &rp.srv
	rrs := rp.rrs[:1]
	if len(t.v4) == 4 {
		rp.a = dns.A{Hdr: dns.RR_Header{Name: t.name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: net.IP(t.v4[:4:4])}
		rrs = append(rrs, &rp.a)
	}
	if len(t.v6) == 16 {
		rp.aaaa = dns.AAAA{Hdr: dns.RR_Header{Name: t.name, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: ttl}, AAAA: net.IP(t.v6[:16:16])}
		rrs = append(rrs, &rp.aaaa)
	}
	m.Answer = rrs[:1:1]
	if len(rrs) > 1 || extra > 0 {
		m.Extra = rrs[1:len(rrs):min(len(rrs)+extra, len(rp.rrs))]
	}
	return m
}

// ptrRR returns the PTR record of h, owned by name.
func (h *hit) ptrRR(name string, ttl uint32, extra int) []dns.RR {
	var target string
	switch {
	case h.r.m < 0: // a ClusterSetIP
		target = h.g.imp.names[h.r.zi]
	case h.r.p >= 0: // a pod, in a mirror zone or a clusterset zone
		target = h.g.members[h.r.m].podName(int(h.r.p), int(h.r.zi))
	default:
		target = h.g.members[h.r.m].names[0]
	}
	rp := &struct {
		ptr dns.PTR
		rrs [2]dns.RR
	}{ptr: dns.PTR{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: ttl}, Ptr: target}}
	rp.rrs[0] = &rp.ptr
	return rp.rrs[: 1 : 1+min(extra, 1)]
}

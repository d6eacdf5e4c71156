package mcmirror

import (
	"github.com/coredns/coredns/request"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/index"

	"github.com/miekg/dns"
)

// The clusterset zones (clusterset.local) answer the names of the
// Multi-Cluster Services DNS specification (KEP-1645), from the index's
// clusterset names (index/clusterset.go): a clusterset zone is mcmirror's
// alone, every other name of it is NXDOMAIN, never handed down the plugin
// chain.

// csSchemaVersion is the schema version of the specification answered.
const csSchemaVersion = "1.0.0"

// serveClusterset answers r, for qname (lowercased) in the clusterset zone
// m.Zones[zi]. Nothing follows mcmirror there: a name it does not have is
// NXDOMAIN (SERVFAIL before the first sync), whatever fallthrough says.
func (m *MCMirror) serveClusterset(w dns.ResponseWriter, r *dns.Msg, qname string, zi int) (int, error) {
	q := r.Question[0]
	if isTransfer(q.Qtype) || q.Qclass != dns.ClassINET {
		return dns.RcodeRefused, nil
	}
	h, what, kind := m.index.FindCS(qname, m.Zones[zi])
	var msg *dns.Msg
	switch what {
	case index.CSApex:
		if q.Qtype == dns.TypeSOA {
			msg = newReply(r, dns.RcodeSuccess)
			msg.Answer = []dns.RR{dns.Copy(m.soa[zi][0])}
		}
	case index.CSVersion:
		if q.Qtype == dns.TypeTXT {
			msg = newReply(r, dns.RcodeSuccess)
			msg.Answer = []dns.RR{&dns.TXT{
				Hdr: dns.RR_Header{Name: qname, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: m.ttl},
				Txt: []string{csSchemaVersion},
			}}
		}
	case index.CSName:
		state := request.Request{W: w, Req: r}
		limit, extra := maxRecords(state.Size()), 0
		if r.IsEdns0() != nil {
			extra = 1 // room for the OPT record the server's writer adds
		}
		msg = answer(&h, r, qname, m.ttl, limit, extra)
		if msg == nil && !h.Exists() {
			what, kind = index.CSNone, h.Kind()
		}
	}
	if what == index.CSNone {
		rcode := dns.RcodeNameError
		if !m.src.HasSynced() {
			rcode = dns.RcodeServerFailure
		}
		return m.negative(w, r, zi, kind, rcode)
	}
	if msg == nil {
		return m.negative(w, r, zi, kind, dns.RcodeSuccess) // NODATA
	}
	if !m.write(w, r, msg) {
		return dns.RcodeServerFailure, errNotWritten
	}
	countAnswer(kind, dns.RcodeSuccess)
	return dns.RcodeSuccess, nil
}

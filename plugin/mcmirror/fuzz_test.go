package mcmirror

import (
	"context"
	"encoding/binary"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/coredns/coredns/plugin/test"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/index"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/index/indextest"
	"github.com/stretchr/testify/require"

	"github.com/miekg/dns"
)

// The fuzz targets run their seeds with every `go test`; test/tools/fuzz.sh
// runs each with -fuzz for $FUZZTIME. A crasher found goes into
// testdata/fuzz/<target>/ with the fix, so that it stays a test.

// FuzzServe sends whole packets, as a client could, over UDP and TCP to a
// CoreDNS server with mcmirror in its chain, and checks that every packet
// the server must answer is answered with a well-formed reply that fits,
// the same over both transports, that nothing panics or hangs, and that a
// good query is still answered right afterwards.
func FuzzServe(f *testing.F) {
	for _, pkt := range seedPackets() {
		f.Add(pkt)
	}
	_, s := newWireFixture(f)
	f.Fuzz(func(t *testing.T, pkt []byte) {
		if len(pkt) > 4096 {
			return // the server reads at most 64 KiB; size is not the point
		}
		want := answered(pkt)
		udp, err := s.exchangeUDP(pkt, want)
		require.NoError(t, err)
		tcp, err := s.exchangeTCP(pkt, want)
		require.NoError(t, err)
		if want {
			checkReplies(t, pkt, udp, tcp)
		}
		s.healthy(t)
	})
}

// checkReplies checks the UDP and TCP replies to pkt.
func checkReplies(t *testing.T, pkt, udp, tcp []byte) {
	t.Helper()
	var ru, rt dns.Msg
	require.NoError(t, ru.Unpack(udp), "UDP reply does not parse")
	require.NoError(t, rt.Unpack(tcp), "TCP reply does not parse")
	id := binary.BigEndian.Uint16(pkt)
	for _, r := range []*dns.Msg{&ru, &rt} {
		require.False(t, r.Id != id || !r.Response, "reply is not a response to query %d: %v", id, r)
	}
	require.Equal(t, dns.RcodeToString[ru.Rcode], dns.RcodeToString[rt.Rcode], "the rcodes of UDP and TCP")
	var q dns.Msg
	if q.Unpack(pkt) != nil {
		return // answered FORMERR from the header alone
	}
	// miekg/dns echoes the header of a query it rejects, TC included.
	require.False(t, rt.Truncated && !q.Truncated, "TCP reply truncated: %v", &rt)
	size := dns.MinMsgSize // what a client without EDNS0 takes
	if o := q.IsEdns0(); o != nil && int(o.UDPSize()) > size {
		size = int(o.UDPSize())
	}
	require.False(t, len(udp) > size, "UDP reply of %d octets for a client buffer of %d", len(udp), size)
	require.False(t, !ru.Truncated && len(ru.Answer) != len(rt.Answer), "UDP gives %d answers untruncated, TCP %d", len(ru.Answer), len(rt.Answer))
}

// seedPackets are real queries of every name kind and the odd and broken
// packets a server meets.
func seedPackets() [][]byte {
	var out [][]byte
	add := func(m *dns.Msg) {
		if b, err := m.Pack(); err == nil {
			out = append(out, b)
		}
	}
	q := func(name string, qtype uint16) *dns.Msg { return new(dns.Msg).SetQuestion(name, qtype) }
	for _, tc := range []struct {
		name  string
		qtype uint16
	}{
		{probeName, dns.TypeA},
		{"nginx-svc-west" + z, dns.TypeA},
		{"nginx-svc-west" + z, dns.TypeSRV},
		{"_http._tcp.nginx-svc-west" + z, dns.TypeSRV},
		{"_tcp.nginx-svc-west" + z, dns.TypeSRV},
		{"nginx-svc-global" + z, dns.TypeA},
		{"_http._tcp.nginx-svc-global" + z, dns.TypeSRV},
		{"web-west" + z, dns.TypeAAAA},
		{"10.0.96.10.in-addr.arpa.", dns.TypePTR},
		{"0.2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.", dns.TypePTR},
		{"nginx-set-7.nginx-svc-west" + z, dns.TypeA},
		{"NGINX-SET-0.Nginx-Svc-West.Default.Svc.Cluster.Local.", dns.TypeA},
		{"foo-west" + z, dns.TypeA},
		{"x\\.nginx-svc-west" + z, dns.TypeA},
		{"flat-west" + z, dns.TypeA},
		{"db-0.pub-west" + z, dns.TypeA},
		{"cluster.local.", dns.TypeSOA},
		{"example.org.", dns.TypeA},
		{probeName, dns.TypeANY},
		{probeName, dns.TypeTXT},
		{probeName, dns.TypeAXFR},
		{"cluster.local.", dns.TypeAXFR},
		{probeName, dns.TypeIXFR},
		{probeName, 0},
		{probeName, 65280},
	} {
		add(q(tc.name, tc.qtype))
	}

	// The largest name the wire allows, below a claimed name.
	long := strings.Repeat("a.", (254-len(probeName))/2) + probeName
	add(q(long, dns.TypeA))
	// Big answers: EDNS0 buffers small and large, the DO bit.
	big := q("_http._tcp.nginx-svc-global"+z, dns.TypeSRV)
	big.SetEdns0(4096, true)
	add(big)
	small := q("_http._tcp.nginx-svc-global"+z, dns.TypeSRV)
	small.SetEdns0(100, false)
	add(small)
	// EDNS version 1: BADVERS.
	v1 := q(probeName, dns.TypeA)
	v1.SetEdns0(1232, false)
	v1.Extra[0].(*dns.OPT).SetVersion(1)
	add(v1)
	// Wrong classes: CHAOS, ANY, NONE.
	for _, class := range []uint16{dns.ClassCHAOS, dns.ClassANY, dns.ClassNONE} {
		m := q(probeName, dns.TypeA)
		m.Question[0].Qclass = class
		add(m)
	}
	// No question, two questions.
	add(&dns.Msg{MsgHdr: dns.MsgHdr{Id: 7, RecursionDesired: true}})
	two := q(probeName, dns.TypeA)
	two.Question = append(two.Question, dns.Question{Name: "nginx-svc-west" + z, Qtype: dns.TypeA, Qclass: dns.ClassINET})
	add(two)
	// NOTIFY, UPDATE, IQUERY, STATUS.
	notify := new(dns.Msg).SetNotify("cluster.local.")
	add(notify)
	notifyName := q(probeName, dns.TypeA)
	notifyName.Opcode = dns.OpcodeNotify
	add(notifyName)
	update := new(dns.Msg).SetUpdate("cluster.local.")
	if rr, err := dns.NewRR(probeName + " 5 IN A 192.0.2.1"); err == nil {
		update.Insert([]dns.RR{rr})
	}
	add(update)
	for _, op := range []int{dns.OpcodeIQuery, dns.OpcodeStatus} {
		m := q(probeName, dns.TypeA)
		m.Opcode = op
		add(m)
	}
	// A response sent as a query: dropped.
	resp := q(probeName, dns.TypeA)
	resp.Response = true
	add(resp)

	// Broken packets: a short header, a cut question, a compression
	// pointer loop, a label longer than 63, trailing junk.
	good, _ := q(probeName, dns.TypeA).Pack()
	out = append(out, good[:5], good[:12], good[:len(good)-3])
	out = append(out, append(slices.Clone(good[:12]), 0xc0, 12, 0, 1, 0, 1)) // the name points at itself
	out = append(out,
		slices.Concat(good[:12], []byte{64}, []byte(strings.Repeat("a", 64)), []byte{0, 0, 1, 0, 1}))
	out = append(out, append(slices.Clone(good), 0xde, 0xad, 0xbe, 0xef))
	return out
}

// FuzzName fuzzes the names the plugin sorts queries by, as they arrive
// from the wire: the zone match (MCMirror.zone), the index lookup and the
// walk up the labels that tells an unknown pod or port of a claimed name
// (index.claimed). Each is checked against a slower reference (CoreDNS's
// plugin.Zones.Matches, miekg/dns's label splitting), and the answer must
// not depend on the case of the query.
func FuzzName(f *testing.F) {
	src := indextest.Fixture()
	m := newTestPlugin(f, src, 5, fall.F{})
	m.Next = nextMarker
	for _, name := range indexNames(m, src) {
		for _, qtype := range []uint16{dns.TypeA, dns.TypeSRV, dns.TypePTR} {
			f.Add(name, qtype)
		}
		f.Add("x."+name, dns.TypeA)
		f.Add("x\\."+name, dns.TypeAAAA)
		f.Add(strings.ToUpper(name), dns.TypeANY)
	}
	for _, name := range []string{"cluster.local.", "svc.cluster.local.", "foo-west" + z, "example.org.", ".", "in-addr.arpa.", "xcluster.local.", "a\\.cluster.local."} {
		f.Add(name, dns.TypeA)
	}
	f.Add(probeName, dns.TypeAXFR)
	f.Add(probeName, dns.TypeIXFR)

	f.Fuzz(func(t *testing.T, name string, qtype uint16) {
		r := wireQuestion(name, qtype)
		if r == nil {
			return // not a name the wire can carry
		}
		qname := r.Question[0].Name
		lower := strings.ToLower(qname)

		zi := m.zone(lower)
		want := plugin.Zones(m.Zones).Matches(qname)
		require.False(t, (zi < 0) != (want == "") || (zi >= 0 && m.Zones[zi] != want),
			"zone(%q) = %d, plugin.Zones.Matches says %q", qname, zi, want)

		got := serveName(t, m, r)
		upper := r.Copy()
		upper.Question[0].Name = strings.ToUpper(qname)
		other := serveName(t, m, upper)
		require.Equal(t, got.String(), other.String(), "%s and %s answered differently", qname, upper.Question[0].Name)

		ours := zi >= 0 && (m.index.Lookup(lower) != nil || refClaimed(m.index, lower))
		if got.passed {
			require.False(t, ours, "%s %s: ours, but passed on", qname, dns.TypeToString[qtype])
			return
		}
		require.True(t, ours, "%s %s: not ours, but answered %s", qname, dns.TypeToString[qtype], got)
		if qtype == dns.TypeAXFR || qtype == dns.TypeIXFR {
			require.False(t, got.code != dns.RcodeRefused || got.msg != nil, "%s: transfer not refused: %s", qname, got)
			return
		}
		require.False(t, got.msg == nil || got.code != dns.RcodeSuccess || got.err != nil, "%s %s: no answer written: %s", qname, dns.TypeToString[qtype], got)
		for _, rr := range got.msg.Answer {
			require.Equal(t, lower, rr.Header().Name, "%s: answer for another name: %s", qname, rr)
		}
		require.False(t, len(got.msg.Answer) == 0 && (len(got.msg.Ns) != 1 || got.msg.Ns[0].Header().Name != m.Zones[zi]), "%s: negative answer without the zone's SOA: %s", qname, got.msg)
	})
}

// wireQuestion returns a query for name as it arrives from the wire, or nil
// when name cannot be packed.
func wireQuestion(name string, qtype uint16) *dns.Msg {
	b, err := new(dns.Msg).SetQuestion(dns.Fqdn(name), qtype).Pack()
	if err != nil {
		return nil
	}
	r := new(dns.Msg)
	if r.Unpack(b) != nil || len(r.Question) != 1 {
		return nil
	}
	return r
}

// indexNames returns the names the index of src answers in cluster.local
// and the reverse zones, sorted: each group's per-cluster and -global
// names, the SRV targets below them, and the reverse names of their
// addresses.
func indexNames(m *MCMirror, src *indextest.Source) []string {
	seen := map[string]bool{}
	add := func(name string) *index.Hit {
		h := m.index.Lookup(name)
		if h != nil {
			seen[name] = true
		}
		return h
	}
	reverse := func(ip net.IP) {
		if rev, err := dns.ReverseAddr(ip.String()); err == nil {
			add(rev)
		}
	}
	for _, k := range src.Keys() {
		for _, c := range append(src.Links(), labels.Global) {
			h := add(k.Svc + "-" + c + "." + k.NS + ".svc.cluster.local.")
			if h == nil {
				continue
			}
			h.EachTarget(func(t index.Target) bool {
				add(t.Name)
				for i := 0; i < len(t.V4); i += 4 {
					reverse(net.IP(t.V4[i : i+4]))
				}
				for i := 0; i < len(t.V6); i += 16 {
					reverse(net.IP(t.V6[i : i+16]))
				}
				return true
			})
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// refClaimed is index.Claimed the slow way: whether a proper suffix of
// name, split into labels by miekg/dns, is a name of the index.
func refClaimed(x *index.Index, name string) bool {
	labels := dns.SplitDomainName(name)
	for i := 1; i < len(labels); i++ {
		if x.Lookup(strings.Join(labels[i:], ".")+".") != nil {
			return true
		}
	}
	return false
}

// outcome is what ServeDNS did with one query.
type outcome struct {
	passed bool // handed to the next plugin
	code   int
	err    error
	msg    *dns.Msg // written, or nil
}

func (o outcome) String() string {
	s := "passed=" + map[bool]string{true: "yes", false: "no"}[o.passed] + " code=" + dns.RcodeToString[o.code]
	if o.err != nil {
		s += " err=" + o.err.Error()
	}
	if o.msg != nil {
		// The question keeps the query's case; compare the rest.
		m := o.msg.Copy()
		m.Question = nil
		s += "\n" + m.String()
	}
	return s
}

type passedKey struct{}

// nextMarker is the next plugin: it records that it was called.
var nextMarker = test.HandlerFunc(func(ctx context.Context, _ dns.ResponseWriter, _ *dns.Msg) (int, error) {
	*ctx.Value(passedKey{}).(*bool) = true
	return dns.RcodeSuccess, nil
})

func serveName(t *testing.T, m *MCMirror, r *dns.Msg) outcome {
	t.Helper()
	var o outcome
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	ctx := context.WithValue(context.Background(), passedKey{}, &o.passed)
	o.code, o.err = m.ServeDNS(ctx, rec, r)
	if !o.passed {
		o.msg = rec.Msg
	}
	return o
}

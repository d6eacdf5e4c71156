package mcmirror

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/coredns/coredns/plugin/cache"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcmirror/mcmirror/plugin/mcmirror/index"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/index/indextest"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The fixtures' endpoints and ports (indextest).
var (
	ep       = indextest.EP
	httpPort = indextest.HTTPPort
	dnsPort  = indextest.DNSPort
)

// newTestPlugin returns a plugin over src answering cluster.local and the
// reverse zones (newPlugin).
func newTestPlugin(t testing.TB, src *indextest.Source, ttl uint32, fl fall.F) *MCMirror {
	zones := []string{"cluster.local.", "in-addr.arpa.", "ip6.arpa."}
	return newPlugin(t, src, Options{Zones: zones, TTL: ttl, Fall: fl})
}

// newPlugin returns a plugin of cluster east over src with the settings o,
// every group built, and fromNext after it.
func newPlugin(t testing.TB, src *indextest.Source, o Options) *MCMirror {
	t.Helper()
	o.Cluster = "east"
	m, err := newWithSource(src, o)
	require.NoError(t, err)
	for _, k := range src.Keys() {
		m.syncNow(k)
	}
	m.Next = fromNext
	return m
}

const (
	z   = ".default.svc.cluster.local."
	soa = "cluster.local.	5	IN	SOA	ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 5"
)

// fromNext is what the next plugin answers, so that a test sees the query
// went on down the chain.
var fromNext = test.HandlerFunc(func(_ context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Answer = []dns.RR{test.A(r.Question[0].Name + " 1 IN A 192.0.2.53")}
	w.WriteMsg(m)
	return dns.RcodeSuccess, nil
})

func next(name string) test.Case {
	return test.Case{Qname: name, Qtype: dns.TypeA, Answer: []dns.RR{test.A(name + " 1 IN A 192.0.2.53")}}
}

func nxdomain(name string, qtype uint16) test.Case {
	return test.Case{Qname: name, Qtype: qtype, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(soa)}}
}

func nodata(name string, qtype uint16) test.Case {
	return test.Case{Qname: name, Qtype: qtype, Ns: []dns.RR{test.SOA(soa)}}
}

func a(name, ip string) dns.RR         { return test.A(fmt.Sprintf("%s 5 IN A %s", name, ip)) }
func aaaa(name, ip string) dns.RR      { return test.AAAA(fmt.Sprintf("%s 5 IN AAAA %s", name, ip)) }
func ptrRR(name, target string) dns.RR { return test.PTR(fmt.Sprintf("%s 5 IN PTR %s", name, target)) }
func srv(name string, weight, port int, target string) dns.RR {
	return test.SRV(fmt.Sprintf("%s 5 IN SRV 0 %d %d %s", name, weight, port, target))
}

// srvCase is the SRV query of name, answered each target at port with
// weight, and its A glue: targetAddrs holds each target, then its address.
func srvCase(name string, weight, port int, targetAddrs ...string) test.Case {
	tc := test.Case{Qname: name, Qtype: dns.TypeSRV}
	for i := 0; i < len(targetAddrs); i += 2 {
		tc.Answer = append(tc.Answer, srv(name, weight, port, targetAddrs[i]))
		tc.Extra = append(tc.Extra, a(targetAddrs[i], targetAddrs[i+1]))
	}
	return tc
}

var dnsTestCases = []test.Case{
	// Gateway mode, headless: per-pod mirror ClusterIPs of ready pods.
	{Qname: "nginx-svc-west" + z, Qtype: dns.TypeA, Answer: []dns.RR{
		a("nginx-svc-west"+z, "10.96.0.10"), a("nginx-svc-west"+z, "10.96.0.11")}},
	nodata("nginx-svc-west"+z, dns.TypeAAAA),
	srvCase("nginx-svc-west"+z, 50, 80,
		"nginx-set-0.nginx-svc-west"+z, "10.96.0.10",
		"nginx-set-1.nginx-svc-west"+z, "10.96.0.11"),
	srvCase("_http._tcp.nginx-svc-west"+z, 50, 80,
		"nginx-set-0.nginx-svc-west"+z, "10.96.0.10",
		"nginx-set-1.nginx-svc-west"+z, "10.96.0.11"),
	nodata("_http._tcp.nginx-svc-west"+z, dns.TypeA),
	nodata("_tcp.nginx-svc-west"+z, dns.TypeSRV), // empty non-terminal
	nxdomain("_http._udp.nginx-svc-west"+z, dns.TypeSRV),
	nxdomain("_https._tcp.nginx-svc-west"+z, dns.TypeSRV),

	// One pod.
	{Qname: "nginx-set-0.nginx-svc-west" + z, Qtype: dns.TypeA, Answer: []dns.RR{a("nginx-set-0.nginx-svc-west"+z, "10.96.0.10")}},
	nodata("nginx-set-0.nginx-svc-west"+z, dns.TypeAAAA),
	srvCase("nginx-set-0.nginx-svc-west"+z, 100, 80, "nginx-set-0.nginx-svc-west"+z, "10.96.0.10"),
	srvCase("_http._tcp.nginx-set-1.nginx-svc-west"+z, 100, 80,
		"nginx-set-1.nginx-svc-west"+z, "10.96.0.11"),
	nxdomain("nginx-set-2.nginx-svc-west"+z, dns.TypeA), // not ready
	nxdomain("nginx-set-9.nginx-svc-west"+z, dns.TypeA), // no such pod
	nxdomain("a.b.nginx-set-0.nginx-svc-west"+z, dns.TypeA),

	// Paris: a pod whose mirror does not exist yet is left out.
	{Qname: "nginx-svc-paris" + z, Qtype: dns.TypeA, Answer: []dns.RR{a("nginx-svc-paris"+z, "10.96.1.10")}},
	nxdomain("nginx-set-1.nginx-svc-paris"+z, dns.TypeA),

	// -global: every exporting cluster, the local one included.
	{Qname: "nginx-svc-global" + z, Qtype: dns.TypeA, Answer: []dns.RR{
		a("nginx-svc-global"+z, "10.0.0.10"),
		a("nginx-svc-global"+z, "10.96.0.10"),
		a("nginx-svc-global"+z, "10.96.0.11"),
		a("nginx-svc-global"+z, "10.96.1.10")}},
	srvCase("_http._tcp.nginx-svc-global"+z, 25, 80,
		"nginx-set-0.nginx-svc-paris"+z, "10.96.1.10",
		"nginx-set-0.nginx-svc-west"+z, "10.96.0.10",
		"nginx-set-0.nginx-svc"+z, "10.0.0.10", // the local pod
		"nginx-set-1.nginx-svc-west"+z, "10.96.0.11"),
	nodata("nginx-svc-global"+z, dns.TypeAAAA),
	nxdomain("nginx-set-0.nginx-svc-global"+z, dns.TypeA),

	// Gateway mode, ClusterIP, dual-stack mirror.
	{Qname: "web-west" + z, Qtype: dns.TypeA, Answer: []dns.RR{a("web-west"+z, "10.96.0.20")}},
	{Qname: "web-west" + z, Qtype: dns.TypeAAAA, Answer: []dns.RR{aaaa("web-west"+z, "fd00::20")}},
	{Qname: "web-west" + z, Qtype: dns.TypeSRV,
		Answer: []dns.RR{srv("web-west"+z, 50, 53, "web-west"+z), srv("web-west"+z, 50, 80, "web-west"+z)},
		Extra:  []dns.RR{a("web-west"+z, "10.96.0.20"), aaaa("web-west"+z, "fd00::20")}},
	{Qname: "_dns._udp.web-west" + z, Qtype: dns.TypeSRV,
		Answer: []dns.RR{srv("_dns._udp.web-west"+z, 100, 53, "web-west"+z)},
		Extra:  []dns.RR{a("web-west"+z, "10.96.0.20"), aaaa("web-west"+z, "fd00::20")}},
	nxdomain("pod.web-west"+z, dns.TypeA), // no per-pod names for ClusterIP exports
	nodata("web-west"+z, dns.TypeMX),
	nodata("web-west"+z, dns.TypePTR),
	nodata("web-west"+z, dns.TypeTXT),

	// Headless export without named endpoints: a ClusterIP mirror.
	{Qname: "anon-west" + z, Qtype: dns.TypeA, Answer: []dns.RR{a("anon-west"+z, "10.96.0.30")}},

	// Exported, but no mirror yet: claimed, nothing routable.
	nodata("nomirror-west"+z, dns.TypeA),
	nodata("nomirror-west"+z, dns.TypeSRV),

	// Flat mode: ready endpoint IPs and ports.
	{Qname: "flat-west" + z, Qtype: dns.TypeA, Answer: []dns.RR{a("flat-west"+z, "10.1.0.30")}},
	srvCase("_http._tcp.flat-west"+z, 100, 8080, "flat-west"+z, "10.1.0.30"),
	// Flat, headless, publishing not-ready addresses: every endpoint, by
	// hostname or dashed address.
	{Qname: "pub-west" + z, Qtype: dns.TypeA, Answer: []dns.RR{
		a("pub-west"+z, "10.1.0.40"), a("pub-west"+z, "10.1.0.41"), a("pub-west"+z, "10.1.0.42")}},
	{Qname: "db-1.pub-west" + z, Qtype: dns.TypeA, Answer: []dns.RR{a("db-1.pub-west"+z, "10.1.0.41")}},
	{Qname: "10-1-0-42.pub-west" + z, Qtype: dns.TypeA, Answer: []dns.RR{a("10-1-0-42.pub-west"+z, "10.1.0.42")}},

	// PTR for mirror ClusterIPs: the most specific name.
	{Qname: "10.0.96.10.in-addr.arpa.", Qtype: dns.TypePTR, Answer: []dns.RR{
		ptrRR("10.0.96.10.in-addr.arpa.", "nginx-set-0.nginx-svc-west"+z)}},
	{Qname: "20.0.96.10.in-addr.arpa.", Qtype: dns.TypePTR, Answer: []dns.RR{
		ptrRR("20.0.96.10.in-addr.arpa.", "web-west"+z)}},
	{Qname: "0.2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.", Qtype: dns.TypePTR, Answer: []dns.RR{
		ptrRR("0.2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.", "web-west"+z)}},
	{Qname: "10.1.96.10.in-addr.arpa.", Qtype: dns.TypePTR, Answer: []dns.RR{
		ptrRR("10.1.96.10.in-addr.arpa.", "nginx-set-0.nginx-svc-paris"+z)}},
	{Qname: "30.0.1.10.in-addr.arpa.", Qtype: dns.TypePTR, Answer: []dns.RR{ // the kubernetes plugin's
		test.A("30.0.1.10.in-addr.arpa. 1 IN A 192.0.2.53")}},
	{Qname: "12.0.96.10.in-addr.arpa.", Qtype: dns.TypePTR, Answer: []dns.RR{ // mirror of a not-ready pod
		test.A("12.0.96.10.in-addr.arpa. 1 IN A 192.0.2.53")}},

	// Not claimed: on down the chain.
	next("foo-west" + z),        // west does not export foo: a local Service's name
	next("nginx-svc-tokyo" + z), // no such link
	next("nginx-svc-east" + z),  // the local cluster is no link
	next("nginx-svc" + z),       // the kubernetes plugin's
	next("foo-global" + z),      // nobody exports foo
	next("x.foo-west" + z),      // below an unclaimed name
	next("default.svc.cluster.local."),
	next("cluster.local."),
	next("example.org."),
}

func TestServeDNS(t *testing.T) {
	m := newTestPlugin(t, indextest.Fixture(), 5, fall.Zero)
	runSubtests(t, m, dnsTestCases)
}

// runSubtests runs each of cases on m, a subtest named by its type and name.
func runSubtests(t *testing.T, m *MCMirror, cases []test.Case) {
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%s", dns.TypeToString[tc.Qtype], tc.Qname), func(t *testing.T) { runCase(t, m, tc, false) })
	}
}

func runCase(t *testing.T, m *MCMirror, tc test.Case, tcp bool) *dns.Msg {
	t.Helper()
	rec := dnstest.NewRecorder(&test.ResponseWriter{TCP: tcp})
	r := tc.Msg()
	// The server wraps every writer so that replies fit the client.
	_, err := m.ServeDNS(context.Background(), request.NewScrubWriter(r, rec), r)
	require.NoError(t, err, "ServeDNS")
	require.NotNil(t, rec.Msg, "no answer written")
	// What the server would send must pack.
	_, err = rec.Msg.Pack()
	require.NoError(t, err, "reply does not pack")
	// SortAndCheck sorts in place; answers share the index's slices.
	resp := rec.Msg.Copy()
	assert.NoError(t, test.SortAndCheck(resp, tc))
	return resp
}

func TestServeDNSCase(t *testing.T) {
	m := newTestPlugin(t, indextest.Fixture(), 5, fall.Zero)
	wantMixedCase(t, m, "NGINX-Set-0.Nginx-Svc-WEST.Default.svc.Cluster.Local.", "10.96.0.10")
}

// wantMixedCase fails t unless the A query of q is answered ip alone,
// authoritatively, with the question in the query's case.
func wantMixedCase(t *testing.T, m *MCMirror, q, ip string) {
	t.Helper()
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	_, err := m.ServeDNS(context.Background(), rec, test.Case{Qname: q, Qtype: dns.TypeA}.Msg())
	require.NoError(t, err)
	assert.Equal(t, q, rec.Msg.Question[0].Name, "the question, in the query's case")
	assert.False(t, len(rec.Msg.Answer) != 1 || rec.Msg.Answer[0].(*dns.A).A.String() != ip, "answer %v", rec.Msg.Answer)
	assert.True(t, rec.Msg.Authoritative, "answer not authoritative")
}

func TestServeDNSFallthrough(t *testing.T) {
	m := newTestPlugin(t, indextest.Fixture(), 5, fall.Root)
	for _, tc := range []test.Case{
		next("nginx-set-9.nginx-svc-west" + z), // NXDOMAIN falls through
		next("_https._tcp.nginx-svc-west" + z),
		{Qname: "nginx-set-0.nginx-svc-west" + z, Qtype: dns.TypeA, Answer: []dns.RR{a("nginx-set-0.nginx-svc-west"+z, "10.96.0.10")}},
		nodata("nginx-svc-west"+z, dns.TypeAAAA), // NODATA does not
	} {
		runCase(t, m, tc, false)
	}

	// Fallthrough for another zone only.
	m = newTestPlugin(t, indextest.Fixture(), 5, fall.F{Zones: []string{"example.org."}})
	runCase(t, m, nxdomain("nginx-set-9.nginx-svc-west"+z, dns.TypeA), false)
}

func TestServeDNSNotSynced(t *testing.T) {
	src := indextest.Fixture()
	m := newTestPlugin(t, src, 5, fall.Zero)
	src.Synced = false
	// What would be NXDOMAIN may just not be known yet.
	runCase(t, m, test.Case{Qname: "nginx-set-9.nginx-svc-west" + z, Qtype: dns.TypeA, Rcode: dns.RcodeServerFailure, Ns: []dns.RR{test.SOA(soa)}}, false)
	// What is known is answered.
	runCase(t, m, test.Case{Qname: "web-west" + z, Qtype: dns.TypeA, Answer: []dns.RR{a("web-west"+z, "10.96.0.20")}}, false)
}

func TestServeDNSTTL(t *testing.T) {
	m := newTestPlugin(t, indextest.Fixture(), 30, fall.Zero)
	runCase(t, m, test.Case{Qname: "web-west" + z, Qtype: dns.TypeA, Answer: []dns.RR{test.A("web-west" + z + " 30 IN A 10.96.0.20")}}, false)
	runCase(t, m, test.Case{Qname: "_dns._udp.web-west" + z, Qtype: dns.TypeSRV,
		Answer: []dns.RR{test.SRV("_dns._udp.web-west" + z + " 30 IN SRV 0 100 53 web-west" + z)},
		Extra:  []dns.RR{test.A("web-west" + z + " 30 IN A 10.96.0.20"), test.AAAA("web-west" + z + " 30 IN AAAA fd00::20")}}, false)
	runCase(t, m, test.Case{Qname: "10.0.96.10.in-addr.arpa.", Qtype: dns.TypePTR, Answer: []dns.RR{
		test.PTR("10.0.96.10.in-addr.arpa. 30 IN PTR nginx-set-0.nginx-svc-west" + z)}}, false)
	// The SOA's TTL and minimum follow too.
	runCase(t, m, test.Case{Qname: "web-west" + z, Qtype: dns.TypeTXT, Ns: []dns.RR{
		test.SOA("cluster.local. 30 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 30")}}, false)
}

// bigFixture exports a 300-pod headless Service from west and paris (150
// pods each), with every per-pod mirror.
func bigFixture() *indextest.Source { return indextest.Pods(150) }

func TestServeDNSTruncation(t *testing.T) {
	m := newTestPlugin(t, bigFixture(), 5, fall.Zero)
	name := "_http._tcp.big-global" + z

	for _, tc := range []struct {
		tcp  bool
		edns uint16
	}{{false, 0}, {false, 1232}, {true, 0}} {
		r := new(dns.Msg)
		r.SetQuestion(name, dns.TypeSRV)
		if tc.edns > 0 {
			r.SetEdns0(tc.edns, false)
		}
		rec := dnstest.NewRecorder(&test.ResponseWriter{TCP: tc.tcp})
		_, err := m.ServeDNS(context.Background(), request.NewScrubWriter(r, rec), r)
		require.NoError(t, err)
		got := rec.Msg
		if tc.tcp {
			assert.False(t, got.Truncated || len(got.Answer) != 300 || len(got.Extra) != 300, "TCP: TC=%t, %d answers, %d extra; want the whole set of 300 with glue", got.Truncated, len(got.Answer), len(got.Extra))
			buf, err := got.Pack()
			require.NoError(t, err, "TCP answer does not pack")
			assert.False(t, len(buf) > dns.MaxMsgSize, "TCP answer is %d bytes", len(buf))
			continue
		}
		assert.True(t, got.Truncated, "UDP (EDNS %d): TC not set with %d answers", tc.edns, len(got.Answer))
		assert.False(t, len(got.Answer) == 0 || len(got.Answer) >= 300, "UDP (EDNS %d): %d answers, want some but not all", tc.edns, len(got.Answer))
		limit := 512
		if tc.edns > 0 {
			limit = int(tc.edns)
		}
		buf, err := got.Pack()
		require.NoError(t, err)
		assert.False(t, len(buf) > limit, "UDP (EDNS %d): %d bytes, more than %d", tc.edns, len(buf), limit)
	}

	// The index is intact afterwards.
	runCase(t, m, test.Case{Qname: "big-7.big-west" + z, Qtype: dns.TypeA, Answer: []dns.RR{a("big-7.big-west"+z, "10.90.0.8")}}, false)
}

// A reply too big for a UDP client's buffer is handed to the writer whole,
// and the server's writer cuts it for the client: so the cache plugin in
// front keeps it and answers the next UDP client (cut again) and a TCP
// client (whole) without asking mcmirror. Cut by the plugin, it had TC set
// before the cache saw it, and every query went past the cache.
func TestCacheInFrontKeepsWholeReply(t *testing.T) {
	// 20 SRV records: fewer than maxRecords, more than 512 octets hold.
	m := newTestPlugin(t, indextest.Pods(10), 5, fall.Zero)
	c := cache.New()
	c.Next = m
	name := "_http._tcp.big-global" + z
	asked := func() float64 { return testutil.ToFloat64(answers.WithLabelValues(index.KindSRV.String(), "NOERROR")) }
	before := asked()

	ask := func(tcp bool) *dns.Msg {
		t.Helper()
		r := new(dns.Msg)
		r.SetQuestion(name, dns.TypeSRV)
		rec := dnstest.NewRecorder(&test.ResponseWriter{TCP: tcp})
		_, err := c.ServeDNS(context.Background(), request.NewScrubWriter(r, rec), r)
		require.NoError(t, err)
		require.NotNil(t, rec.Msg, "no reply")
		buf, err := rec.Msg.Pack()
		require.NoError(t, err)
		assert.False(t, !tcp && len(buf) > dns.MinMsgSize, "UDP reply of %d octets", len(buf))
		return rec.Msg
	}
	for i := range 2 {
		got := ask(false)
		require.False(t, !got.Truncated || len(got.Answer) == 0,
			"UDP query %d: TC=%t, %d answers; want some, with TC", i+1, got.Truncated, len(got.Answer))
	}
	whole := ask(true)
	assert.False(t, whole.Truncated || len(whole.Answer) != 20, "TCP: TC=%t, %d answers; want all 20 SRV records", whole.Truncated, len(whole.Answer))
	assert.EqualValues(t, 1, asked()-before, "queries of the 3 mcmirror answered; the rest are the cache's")
}

// A reply cut at maxRecords has TC set by the plugin, so that no cache
// keeps it as whole.
func TestCutReplyIsTruncated(t *testing.T) {
	m := newTestPlugin(t, bigFixture(), 5, fall.Zero)
	r := new(dns.Msg)
	r.SetQuestion("_http._tcp.big-global"+z, dns.TypeSRV)
	w := &kept{ResponseWriter: test.ResponseWriter{}}
	_, err := m.ServeDNS(context.Background(), w, r)
	require.NoError(t, err)
	require.False(t, w.msg == nil || !w.msg.Truncated || len(w.msg.Answer) != maxRecords(dns.MinMsgSize), "handed over %v; want %d answers with TC", w.msg, maxRecords(dns.MinMsgSize))
}

func TestServeDNSMetrics(t *testing.T) {
	m := newTestPlugin(t, indextest.Fixture(), 5, fall.Zero)
	wantCounted(t, m, []countedCase{
		{test.Case{Qname: "web-west" + z, Qtype: dns.TypeA, Answer: []dns.RR{a("web-west"+z, "10.96.0.20")}}, index.KindCluster, "NOERROR"},
		{nodata("nginx-svc-global"+z, dns.TypeAAAA), index.KindGlobal, "NOERROR"},
		{nxdomain("nope.nginx-svc-west"+z, dns.TypeA), index.KindPod, "NXDOMAIN"},
		{nxdomain("_x._tcp.nginx-svc-west"+z, dns.TypeSRV), index.KindSRV, "NXDOMAIN"},
		{test.Case{Qname: "20.0.96.10.in-addr.arpa.", Qtype: dns.TypePTR, Answer: []dns.RR{ptrRR("20.0.96.10.in-addr.arpa.", "web-west"+z)}}, index.KindPTR, "NOERROR"},
	})
}

// countedCase is a query, and the answers_total series it is counted in.
type countedCase struct {
	tc    test.Case
	kind  index.Kind
	rcode string
}

// wantCounted runs each case on m, failing t unless it grows its
// answers_total series by one.
func wantCounted(t *testing.T, m *MCMirror, cases []countedCase) {
	t.Helper()
	for _, tt := range cases {
		c := answers.WithLabelValues(tt.kind.String(), tt.rcode)
		before := testutil.ToFloat64(c)
		runCase(t, m, tt.tc, false)
		assert.EqualValues(t, 1, testutil.ToFloat64(c)-before, "%s: answers_total{kind=%s,rcode=%s}", tt.tc.Qname, tt.kind, tt.rcode)
	}
}

func testCase(name string, qtype uint16, answer ...dns.RR) test.Case {
	return test.Case{Qname: name, Qtype: qtype, Answer: answer}
}

// lower agrees with strings.ToLower for every octet at every position of
// a name, both in its eight-octet steps and in its tail, and does not
// copy a name that is already lower case.
func TestLower(t *testing.T) {
	base := []byte("abcdefgh.ijklmnop.q")
	for i := range base {
		for c := range 256 {
			b := slices.Clone(base)
			b[i] = byte(c)
			name := string(b)
			require.Equal(t, strings.ToLower(name), lower(name), "lower(%q)", name)
		}
	}
	name := "web-west.default.svc.cluster.local."
	assert.EqualValues(t, 0, testing.AllocsPerRun(10, func() { name = lower(name) }), "allocations of lower of a lower-case name")
}

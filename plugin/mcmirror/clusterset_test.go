package mcmirror

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/coredns/coredns/plugin/test"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/index"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/index/indextest"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The clusterset zone: the names of the Multi-Cluster Services DNS
// specification, answered from the derived Services and the index.

const (
	cs    = ".default.svc.clusterset.local."
	csSOA = "clusterset.local.	5	IN	SOA	ns.dns.clusterset.local. hostmaster.clusterset.local. 1 7200 1800 86400 5"
)

// csFixture is the fixture (see there) with the derived Services of east's
// controller:
//
//	web        ClusterSetIP 10.97.0.1, fd00:97::1 (west exports it)
//	nginx-svc  Headless (west, paris, east export it)
//	db         Headless: paris exports it in flat mode, a pod without hostname
//	idle       Headless: west exports it, no ready endpoint
//	orphan     ClusterSetIP 10.97.0.9, no cluster exports it (any more)
//	anon       Headless: west's export is mirrored as a ClusterIP
//
// flat (west) is exported and not imported: no derived Service.
func csFixture() *indextest.Source {
	f := indextest.Fixture()
	f.AddImport("default", "web", []string{"10.97.0.1", "fd00:97::1"}, httpPort, dnsPort)
	f.AddImport("default", "nginx-svc", nil, httpPort)

	f.AddFlat("paris", "default", "db", ep("", "10.2.0.5", true))
	f.AddImport("default", "db", nil, httpPort)

	f.AddFlat("west", "default", "idle", ep("idle-0", "10.1.0.60", false))
	f.AddImport("default", "idle", nil, httpPort)

	f.AddImport("default", "orphan", []string{"10.97.0.9"}, httpPort)
	f.AddImport("default", "anon", nil, httpPort)
	return f
}

// newCSPlugin returns a plugin over src answering cluster.local as ever
// and clusterset.local as the MCS specification has it.
func newCSPlugin(t testing.TB, src *indextest.Source, fl fall.F) *MCMirror {
	return newPlugin(t, src, Options{
		Zones:      []string{"cluster.local.", "clusterset.local.", "in-addr.arpa.", "ip6.arpa."},
		ClusterSet: []string{"clusterset.local."},
		TTL:        5,
		Fall:       fl,
	})
}

func csNXDOMAIN(name string, qtype uint16) test.Case {
	return test.Case{Qname: name, Qtype: qtype, Rcode: dns.RcodeNameError, Ns: []dns.RR{test.SOA(csSOA)}}
}

func csNODATA(name string, qtype uint16) test.Case {
	return test.Case{Qname: name, Qtype: qtype, Ns: []dns.RR{test.SOA(csSOA)}}
}

func txt(name, s string) dns.RR { return test.TXT(fmt.Sprintf("%s 5 IN TXT %q", name, s)) }

var csTestCases = []test.Case{
	// ClusterSetIP: the derived Service's ClusterIPs, dual-stack.
	testCase("web"+cs, dns.TypeA, a("web"+cs, "10.97.0.1")),
	testCase("web"+cs, dns.TypeAAAA, aaaa("web"+cs, "fd00:97::1")),
	// SRV: the name itself, per port; without a prefix, every port.
	{Qname: "web" + cs, Qtype: dns.TypeSRV,
		Answer: []dns.RR{srv("web"+cs, 50, 53, "web"+cs), srv("web"+cs, 50, 80, "web"+cs)},
		Extra:  []dns.RR{a("web"+cs, "10.97.0.1"), aaaa("web"+cs, "fd00:97::1")}},
	{Qname: "_http._tcp.web" + cs, Qtype: dns.TypeSRV,
		Answer: []dns.RR{srv("_http._tcp.web"+cs, 100, 80, "web"+cs)},
		Extra:  []dns.RR{a("web"+cs, "10.97.0.1"), aaaa("web"+cs, "fd00:97::1")}},
	{Qname: "_dns._udp.web" + cs, Qtype: dns.TypeSRV,
		Answer: []dns.RR{srv("_dns._udp.web"+cs, 100, 53, "web"+cs)},
		Extra:  []dns.RR{a("web"+cs, "10.97.0.1"), aaaa("web"+cs, "fd00:97::1")}},
	csNODATA("_tcp.web"+cs, dns.TypeSRV), // empty non-terminal
	csNODATA("_http._tcp.web"+cs, dns.TypeA),
	csNXDOMAIN("_http._udp.web"+cs, dns.TypeSRV),
	csNXDOMAIN("_https._tcp.web"+cs, dns.TypeSRV),
	csNODATA("web"+cs, dns.TypeTXT),
	csNODATA("web"+cs, dns.TypePTR),
	// No name for one cluster's backends of a ClusterSetIP import.
	csNXDOMAIN("west.web"+cs, dns.TypeA),
	csNXDOMAIN("x.west.web"+cs, dns.TypeA),
	// PTR of a ClusterSetIP: the clusterset name.
	testCase("1.0.97.10.in-addr.arpa.", dns.TypePTR, ptrRR("1.0.97.10.in-addr.arpa.", "web"+cs)),
	testCase("1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.7.9.0.0.0.0.d.f.ip6.arpa.", dns.TypePTR,
		ptrRR("1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.7.9.0.0.0.0.d.f.ip6.arpa.", "web"+cs)),
	// Imported, exported by nobody: the derived Service answers.
	testCase("orphan"+cs, dns.TypeA, a("orphan"+cs, "10.97.0.9")),

	// Headless: every ready address of every exporting cluster, the local
	// one first, as -global; per-pod mirrors in gateway mode.
	testCase("nginx-svc"+cs, dns.TypeA,
		a("nginx-svc"+cs, "10.0.0.10"), a("nginx-svc"+cs, "10.96.0.10"), a("nginx-svc"+cs, "10.96.0.11"), a("nginx-svc"+cs, "10.96.1.10")),
	csNODATA("nginx-svc"+cs, dns.TypeAAAA),
	srvCase("_http._tcp.nginx-svc"+cs, 25, 80,
		"nginx-set-0.east.nginx-svc"+cs, "10.0.0.10",
		"nginx-set-0.paris.nginx-svc"+cs, "10.96.1.10",
		"nginx-set-0.west.nginx-svc"+cs, "10.96.0.10",
		"nginx-set-1.west.nginx-svc"+cs, "10.96.0.11"),
	// <hostname>.<clusterid>: what <host>.<svc>-<cluster> answers; the
	// local pod's own address.
	testCase("nginx-set-0.west.nginx-svc"+cs, dns.TypeA, a("nginx-set-0.west.nginx-svc"+cs, "10.96.0.10")),
	testCase("nginx-set-1.west.nginx-svc"+cs, dns.TypeA, a("nginx-set-1.west.nginx-svc"+cs, "10.96.0.11")),
	testCase("nginx-set-0.paris.nginx-svc"+cs, dns.TypeA, a("nginx-set-0.paris.nginx-svc"+cs, "10.96.1.10")),
	testCase("nginx-set-0.east.nginx-svc"+cs, dns.TypeA, a("nginx-set-0.east.nginx-svc"+cs, "10.0.0.10")),
	srvCase("_http._tcp.nginx-set-0.west.nginx-svc"+cs, 100, 80,
		"nginx-set-0.west.nginx-svc"+cs, "10.96.0.10"),
	csNODATA("nginx-set-0.west.nginx-svc"+cs, dns.TypeAAAA),
	csNXDOMAIN("nginx-set-1.paris.nginx-svc"+cs, dns.TypeA), // its mirror does not exist yet
	csNXDOMAIN("nginx-set-2.west.nginx-svc"+cs, dns.TypeA),  // not ready
	csNXDOMAIN("nginx-set-9.west.nginx-svc"+cs, dns.TypeA),
	csNXDOMAIN("a.nginx-set-0.west.nginx-svc"+cs, dns.TypeA),
	// <clusterid>.<svc>: an empty non-terminal for a cluster with pods.
	csNODATA("west.nginx-svc"+cs, dns.TypeA),
	csNODATA("east.nginx-svc"+cs, dns.TypeSRV),
	csNXDOMAIN("_http._tcp.west.nginx-svc"+cs, dns.TypeSRV),
	csNXDOMAIN("tokyo.nginx-svc"+cs, dns.TypeA),
	// Flat mode, no hostname: the pod named by its address with dashes.
	testCase("db"+cs, dns.TypeA, a("db"+cs, "10.2.0.5")),
	testCase("10-2-0-5.paris.db"+cs, dns.TypeA, a("10-2-0-5.paris.db"+cs, "10.2.0.5")),
	srvCase("db"+cs, 100, 80, "10-2-0-5.paris.db"+cs, "10.2.0.5"),
	// PTR of a flat-mode pod of a Headless import: its clusterset name
	// (2.4.3); a local pod's is the kubernetes plugin's, a not ready
	// one has none.
	testCase("5.0.2.10.in-addr.arpa.", dns.TypePTR, ptrRR("5.0.2.10.in-addr.arpa.", "10-2-0-5.paris.db"+cs)),
	next("10.0.0.10.in-addr.arpa."),
	next("60.0.1.10.in-addr.arpa."),
	// Headless, no ready endpoint anywhere: NXDOMAIN, as the
	// specification says.
	csNXDOMAIN("idle"+cs, dns.TypeA),
	csNXDOMAIN("_http._tcp.idle"+cs, dns.TypeSRV),
	csNXDOMAIN("idle-0.west.idle"+cs, dns.TypeA),
	// Headless import, ClusterIP mirror (no hostnames): its address, no
	// per-pod name, no SRV target.
	testCase("anon"+cs, dns.TypeA, a("anon"+cs, "10.96.0.30")),
	csNODATA("anon"+cs, dns.TypeSRV),
	csNXDOMAIN("west.anon"+cs, dns.TypeA),

	// Exported but not imported, and mcmirror's own names: none here, and
	// nothing goes on down the chain.
	csNXDOMAIN("flat"+cs, dns.TypeA),
	csNXDOMAIN("web-west"+cs, dns.TypeA),
	csNXDOMAIN("nginx-svc-global"+cs, dns.TypeA),
	csNXDOMAIN("nginx-set-0.nginx-svc-west"+cs, dns.TypeA),
	csNXDOMAIN("nope.other.svc.clusterset.local.", dns.TypeA),
	csNXDOMAIN("foo.clusterset.local.", dns.TypeA),

	// The schema version, the apex, the empty non-terminals.
	testCase("dns-version.clusterset.local.", dns.TypeTXT, txt("dns-version.clusterset.local.", "1.0.0")),
	csNODATA("dns-version.clusterset.local.", dns.TypeA),
	testCase("clusterset.local.", dns.TypeSOA, test.SOA(csSOA)),
	csNODATA("clusterset.local.", dns.TypeA),
	csNODATA("clusterset.local.", dns.TypeNS),
	csNODATA("svc.clusterset.local.", dns.TypeA),
	csNODATA("default.svc.clusterset.local.", dns.TypeSRV),
	csNXDOMAIN("other.svc.clusterset.local.", dns.TypeA),
	csNXDOMAIN("a.default.svc.clusterset.local.", dns.TypeA),

	// cluster.local is unchanged.
	testCase("web-west"+z, dns.TypeA, a("web-west"+z, "10.96.0.20")),
	testCase("nginx-set-0.nginx-svc-west"+z, dns.TypeA, a("nginx-set-0.nginx-svc-west"+z, "10.96.0.10")),
	testCase("flat-west"+z, dns.TypeA, a("flat-west"+z, "10.1.0.30")),
	testCase("db-paris"+z, dns.TypeA, a("db-paris"+z, "10.2.0.5")),
	testCase("20.0.96.10.in-addr.arpa.", dns.TypePTR, ptrRR("20.0.96.10.in-addr.arpa.", "web-west"+z)),
	next("web" + z),         // the kubernetes plugin's
	next("orphan-west" + z), // nobody exports orphan
	next("orphan-global" + z),
	next("west.web" + z),
	next("8.0.97.10.in-addr.arpa."), // no ClusterSetIP: the kubernetes plugin's
	testCase("9.0.97.10.in-addr.arpa.", dns.TypePTR, ptrRR("9.0.97.10.in-addr.arpa.", "orphan"+cs)),
}

func TestClusterSetServeDNS(t *testing.T) {
	m := newCSPlugin(t, csFixture(), fall.Zero)
	runSubtests(t, m, csTestCases)
}

// Nothing goes on down the chain from a clusterset zone, fallthrough or
// not; before the first sync, what would be NXDOMAIN is SERVFAIL.
func TestClusterSetNegative(t *testing.T) {
	src := csFixture()
	m := newCSPlugin(t, src, fall.Root)
	runCase(t, m, csNXDOMAIN("nope"+cs, dns.TypeA), false)
	runCase(t, m, csNXDOMAIN("nginx-set-9.west.nginx-svc"+cs, dns.TypeA), false)
	runCase(t, m, next("nginx-set-9.nginx-svc-west"+z), false) // cluster.local falls through
	src.Synced = false
	runCase(t, m, test.Case{Qname: "nope" + cs, Qtype: dns.TypeA, Rcode: dns.RcodeServerFailure, Ns: []dns.RR{test.SOA(csSOA)}}, false)
	runCase(t, m, testCase("web"+cs, dns.TypeA, a("web"+cs, "10.97.0.1")), false)
}

// Another class, and a zone transfer, are refused for any name of a
// clusterset zone; names are matched whatever their case.
func TestClusterSetClassAndCase(t *testing.T) {
	m := newCSPlugin(t, csFixture(), fall.Zero)
	for _, tc := range []struct {
		name         string
		qtype, class uint16
	}{
		{"web" + cs, dns.TypeA, dns.ClassCHAOS},
		{"nope" + cs, dns.TypeA, dns.ClassANY},
		{"clusterset.local.", dns.TypeAXFR, dns.ClassINET},
	} {
		r := new(dns.Msg)
		r.SetQuestion(tc.name, tc.qtype)
		r.Question[0].Qclass = tc.class
		rec := dnstest.NewRecorder(&test.ResponseWriter{})
		rcode, err := m.ServeDNS(context.Background(), rec, r)
		assert.False(t, err != nil || rcode != dns.RcodeRefused || rec.Msg != nil, "%s %s class %d: rcode %d, err %v, written %v; want REFUSED left to the server", tc.name, dns.TypeToString[tc.qtype], tc.class, rcode, err, rec.Msg)
	}
	wantMixedCase(t, m, "NGINX-Set-0.West.Nginx-Svc.Default.svc.ClusterSet.Local.", "10.96.0.10")
}

// A derived Service appearing, changing type and going: the names follow
// at the group's next build, the namespace's empty non-terminal with them.
func TestClusterSetDerivedChanges(t *testing.T) {
	src := indextest.Fixture()
	m := newCSPlugin(t, src, fall.Zero)
	web := object.ServiceKey("default", "web")
	runCase(t, m, csNXDOMAIN("web"+cs, dns.TypeA), false)
	runCase(t, m, csNXDOMAIN("default.svc.clusterset.local.", dns.TypeA), false)
	runCase(t, m, csNXDOMAIN("svc.clusterset.local.", dns.TypeA), false)
	runCase(t, m, next("10.0.97.10.in-addr.arpa."), false)

	src.AddImport("default", "web", []string{"10.97.0.10"}, httpPort)
	m.syncNow(web)
	runCase(t, m, testCase("web"+cs, dns.TypeA, a("web"+cs, "10.97.0.10")), false)
	runCase(t, m, srvCase("web"+cs, 100, 80, "web"+cs, "10.97.0.10"), false)
	runCase(t, m, csNODATA("default.svc.clusterset.local.", dns.TypeA), false)
	runCase(t, m, csNODATA("svc.clusterset.local.", dns.TypeA), false)
	runCase(t, m, testCase("10.0.97.10.in-addr.arpa.", dns.TypePTR, ptrRR("10.0.97.10.in-addr.arpa.", "web"+cs)), false)
	runCase(t, m, testCase("web-west"+z, dns.TypeA, a("web-west"+z, "10.96.0.20")), false)

	// Its ClusterSetIP changes: the old PTR goes.
	src.AddImport("default", "web", []string{"10.97.0.11"}, httpPort)
	m.syncNow(web)
	runCase(t, m, testCase("web"+cs, dns.TypeA, a("web"+cs, "10.97.0.11")), false)
	runCase(t, m, next("10.0.97.10.in-addr.arpa."), false)
	runCase(t, m, testCase("11.0.97.10.in-addr.arpa.", dns.TypePTR, ptrRR("11.0.97.10.in-addr.arpa.", "web"+cs)), false)

	// The import becomes Headless (west's Service is ClusterIP): its
	// address is the mirror's, and no ClusterSetIP has a PTR any more.
	src.AddImport("default", "web", nil, httpPort)
	m.syncNow(web)
	runCase(t, m, testCase("web"+cs, dns.TypeA, a("web"+cs, "10.96.0.20")), false)
	runCase(t, m, testCase("web"+cs, dns.TypeAAAA, aaaa("web"+cs, "fd00::20")), false)
	runCase(t, m, next("11.0.97.10.in-addr.arpa."), false)

	// A pod appears in a Headless import's cluster: its names come.
	nginx := object.ServiceKey("default", "nginx-svc")
	src.AddImport("default", "nginx-svc", nil, httpPort)
	m.syncNow(nginx)
	runCase(t, m, testCase("nginx-set-0.west.nginx-svc"+cs, dns.TypeA, a("nginx-set-0.west.nginx-svc"+cs, "10.96.0.10")), false)
	runCase(t, m, csNXDOMAIN("nginx-set-1.paris.nginx-svc"+cs, dns.TypeA), false)
	src.AddMirror("default", "nginx-set-1-paris", "paris", "nginx-svc-paris", []string{"10.96.1.11"}, httpPort)
	m.syncNow(nginx)
	runCase(t, m, testCase("nginx-set-1.paris.nginx-svc"+cs, dns.TypeA, a("nginx-set-1.paris.nginx-svc"+cs, "10.96.1.11")), false)

	// The derived Services go: so do the names, and the namespace.
	delete(src.Imports, [2]string{"default", "web"})
	m.syncNow(web)
	runCase(t, m, csNXDOMAIN("web"+cs, dns.TypeA), false)
	runCase(t, m, csNODATA("default.svc.clusterset.local.", dns.TypeA), false) // nginx-svc is still imported
	delete(src.Imports, [2]string{"default", "nginx-svc"})
	m.syncNow(nginx)
	runCase(t, m, csNXDOMAIN("nginx-set-0.west.nginx-svc"+cs, dns.TypeA), false)
	runCase(t, m, csNXDOMAIN("west.nginx-svc"+cs, dns.TypeA), false)
	runCase(t, m, csNXDOMAIN("default.svc.clusterset.local.", dns.TypeA), false)
	runCase(t, m, csNXDOMAIN("svc.clusterset.local.", dns.TypeA), false)
	// The mcmirror names never moved.
	runCase(t, m, testCase("web-west"+z, dns.TypeA, a("web-west"+z, "10.96.0.20")), false)
	runCase(t, m, testCase("nginx-set-1.nginx-svc-paris"+z, dns.TypeA, a("nginx-set-1.nginx-svc-paris"+z, "10.96.1.11")), false)

	// A Service imported only (nobody exports it) then gone: no group left.
	src.AddImport("default", "solo", []string{"10.97.0.12"}, httpPort)
	solo := object.ServiceKey("default", "solo")
	m.syncNow(solo)
	runCase(t, m, testCase("solo"+cs, dns.TypeA, a("solo"+cs, "10.97.0.12")), false)
	delete(src.Imports, [2]string{"default", "solo"})
	m.syncNow(solo)
	runCase(t, m, csNXDOMAIN("solo"+cs, dns.TypeA), false)
}

// PTR for the pods of a Headless import's flat-mode exports follows them,
// both families; a linked cluster whose pod claims a ClusterSetIP, or
// another import's pod address, takes neither's PTR record: a
// ClusterSetIP's is its import's, a pod address's the first import's to
// name it, and the other's once that one lets go.
func TestClusterSetPodPTR(t *testing.T) {
	src := indextest.Fixture()
	src.AddImport("default", "web", []string{"10.97.0.1"}, httpPort)
	src.AddService("west", "default", "db", labels.Flat, nil, httpPort)
	src.AddSlice("west", "default", "db", []object.Port{httpPort},
		indextest.EP("db-0", "10.1.0.70", true), indextest.EP("db-1", "fd00:1::71", true), indextest.EP("db-2", "10.97.0.1", true))
	src.AddImport("default", "db", nil, httpPort)
	m := newCSPlugin(t, src, fall.Zero)
	db, web := object.ServiceKey("default", "db"), object.ServiceKey("default", "web")
	const rev71 = "1.7.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.1.0.0.0.0.0.d.f.ip6.arpa."
	runCase(t, m, testCase("70.0.1.10.in-addr.arpa.", dns.TypePTR, ptrRR("70.0.1.10.in-addr.arpa.", "db-0.west.db"+cs)), false)
	runCase(t, m, testCase(rev71, dns.TypePTR, ptrRR(rev71, "db-1.west.db"+cs)), false)
	runCase(t, m, testCase("1.0.97.10.in-addr.arpa.", dns.TypePTR, ptrRR("1.0.97.10.in-addr.arpa.", "web"+cs)), false)
	// The ClusterSetIP rebuilt after the pod: still its import's.
	m.syncNow(web)
	runCase(t, m, testCase("1.0.97.10.in-addr.arpa.", dns.TypePTR, ptrRR("1.0.97.10.in-addr.arpa.", "web"+cs)), false)

	// Another import whose pod has db-0's address: db keeps the PTR
	// record until it lets go of the address.
	src.AddFlat("paris", "default", "cache", indextest.EP("cache-0", "10.1.0.70", true))
	src.AddImport("default", "cache", nil, httpPort)
	cache := object.ServiceKey("default", "cache")
	m.syncNow(cache)
	runCase(t, m, testCase("70.0.1.10.in-addr.arpa.", dns.TypePTR, ptrRR("70.0.1.10.in-addr.arpa.", "db-0.west.db"+cs)), false)
	m.syncNow(cache)
	runCase(t, m, testCase("70.0.1.10.in-addr.arpa.", dns.TypePTR, ptrRR("70.0.1.10.in-addr.arpa.", "db-0.west.db"+cs)), false)
	src.EndpointSlices[[3]string{"west", "default", "db"}] = nil
	src.AddSlice("west", "default", "db", []object.Port{httpPort}, indextest.EP("db-1", "fd00:1::71", true))
	m.syncNow(db)
	runCase(t, m, testCase("70.0.1.10.in-addr.arpa.", dns.TypePTR, ptrRR("70.0.1.10.in-addr.arpa.", "cache-0.paris.cache"+cs)), false)

	// The pod goes, then the import: so do their PTR records.
	src.EndpointSlices[[3]string{"paris", "default", "cache"}] = nil
	m.syncNow(cache)
	runCase(t, m, next("70.0.1.10.in-addr.arpa."), false)
	delete(src.Imports, [2]string{"default", "db"})
	m.syncNow(db)
	runCase(t, m, next(rev71), false)
}

// A gateway whose health hides a cluster hides it from the Service name of
// a Headless import, as from -global; its pods keep their own names.
func TestClusterSetHidden(t *testing.T) {
	src := csFixture()
	m := newCSPlugin(t, src, fall.Zero)
	m.gatewaysChanged(map[string]bool{"west": true}, []string{"west"})
	m.syncNow(object.ServiceKey("default", "nginx-svc")) // the index keeps no gateway groups without gateway_health
	runCase(t, m, testCase("nginx-svc"+cs, dns.TypeA, a("nginx-svc"+cs, "10.0.0.10"), a("nginx-svc"+cs, "10.96.1.10")), false)
	runCase(t, m, srvCase("_http._tcp.nginx-svc"+cs, 50, 80,
		"nginx-set-0.east.nginx-svc"+cs, "10.0.0.10",
		"nginx-set-0.paris.nginx-svc"+cs, "10.96.1.10"), false)
	runCase(t, m, testCase("nginx-set-1.west.nginx-svc"+cs, dns.TypeA, a("nginx-set-1.west.nginx-svc"+cs, "10.96.0.11")), false)
}

// Without clusterset, a clusterset.local zone of the stanza is one of
// mcmirror's like any other, as before.
func TestClusterSetOff(t *testing.T) {
	src := csFixture()
	m := newPlugin(t, src, Options{Zones: []string{"cluster.local.", "clusterset.local."}, TTL: 5})
	const c = ".default.svc.clusterset.local."
	runCase(t, m, testCase("web-west"+c, dns.TypeA, a("web-west"+c, "10.96.0.20")), false)
	runCase(t, m, next("web"+c), false)
	runCase(t, m, next("dns-version.clusterset.local."), false)
}

// A server block of clusterset.local alone (CoreDNS forwarding it there):
// every name is the specification's, no name of mcmirror's exists.
func TestClusterSetOnly(t *testing.T) {
	src := csFixture()
	m := newPlugin(t, src, Options{Zones: []string{"clusterset.local.", "in-addr.arpa."},
		ClusterSet: []string{"clusterset.local."}, TTL: 5})
	runCase(t, m, testCase("web"+cs, dns.TypeA, a("web"+cs, "10.97.0.1")), false)
	runCase(t, m, testCase("nginx-set-0.east.nginx-svc"+cs, dns.TypeA, a("nginx-set-0.east.nginx-svc"+cs, "10.0.0.10")), false)
	runCase(t, m, testCase("1.0.97.10.in-addr.arpa.", dns.TypePTR, ptrRR("1.0.97.10.in-addr.arpa.", "web"+cs)), false)
	runCase(t, m, next("20.0.96.10.in-addr.arpa."), false) // a mirror's: no zone of mcmirror's to name it in
	runCase(t, m, next("web-west"+z), false)
	assert.EqualValues(t, 0, m.index.Len(), "names of mcmirror's zones without one")
}

func TestClusterSetOptions(t *testing.T) {
	for _, o := range []Options{
		{Zones: []string{"cluster.local."}, ClusterSet: []string{"clusterset.local."}},
		{Zones: []string{"cluster.local.", "in-addr.arpa."}, ClusterSet: []string{"in-addr.arpa."}},
	} {
		o.Cluster = "east"
		_, err := newWithSource(indextest.NewSource(), o)
		assert.Error(t, err, "%v", o.ClusterSet)
	}
}

func TestClusterSetMetrics(t *testing.T) {
	m := newCSPlugin(t, csFixture(), fall.Zero)
	wantCounted(t, m, []countedCase{
		{testCase("web"+cs, dns.TypeA, a("web"+cs, "10.97.0.1")), index.KindCS, "NOERROR"},
		{csNXDOMAIN("idle"+cs, dns.TypeA), index.KindCS, "NXDOMAIN"},
		{testCase("nginx-set-0.west.nginx-svc"+cs, dns.TypeA, a("nginx-set-0.west.nginx-svc"+cs, "10.96.0.10")), index.KindCSPod, "NOERROR"},
		{csNODATA("west.nginx-svc"+cs, dns.TypeA), index.KindCSPod, "NOERROR"},
		{csNXDOMAIN("nginx-set-9.west.nginx-svc"+cs, dns.TypeA), index.KindCSPod, "NXDOMAIN"},
		{csNXDOMAIN("_x._tcp.web"+cs, dns.TypeSRV), index.KindSRV, "NXDOMAIN"},
		{testCase("dns-version.clusterset.local.", dns.TypeTXT, txt("dns-version.clusterset.local.", "1.0.0")), index.KindCSZone, "NOERROR"},
		{csNXDOMAIN("nope.clusterset.local.", dns.TypeA), index.KindCSZone, "NXDOMAIN"},
		{testCase("1.0.97.10.in-addr.arpa.", dns.TypePTR, ptrRR("1.0.97.10.in-addr.arpa.", "web"+cs)), index.KindPTR, "NOERROR"},
	})
}

// FuzzClusterSetName: any name of a clusterset zone is answered by
// mcmirror, never handed on, whatever its case; the records are the name's,
// a negative answer carries the zone's SOA.
func FuzzClusterSetName(f *testing.F) {
	m := newCSPlugin(f, csFixture(), fall.Root)
	m.Next = nextMarker
	for _, tc := range csTestCases {
		f.Add(tc.Qname, tc.Qtype)
		f.Add("x."+tc.Qname, dns.TypeA)
		f.Add("x\\."+tc.Qname, dns.TypeSRV)
	}
	f.Add("a\\.default.svc.clusterset.local.", dns.TypeA)
	f.Add("_a._b._c.web"+cs, dns.TypeSRV)
	f.Add("clusterset.local.", dns.TypeAXFR)
	f.Fuzz(func(t *testing.T, name string, qtype uint16) {
		r := wireQuestion(name, qtype)
		if r == nil {
			return
		}
		qname := r.Question[0].Name
		lower := strings.ToLower(qname)
		zi := m.zone(lower)
		if zi < 0 || !m.clusterset[zi] {
			return
		}
		got := serveName(t, m, r)
		upper := r.Copy()
		upper.Question[0].Name = strings.ToUpper(qname)
		other := serveName(t, m, upper)
		require.Equal(t, got.String(), other.String(), "%s and %s answered differently", qname, upper.Question[0].Name)
		switch {
		case got.passed:
			t.Fatalf("%s %s: passed on from a clusterset zone", qname, dns.TypeToString[qtype])
		case qtype == dns.TypeAXFR || qtype == dns.TypeIXFR:
			require.False(t, got.code != dns.RcodeRefused || got.msg != nil, "%s: transfer not refused: %s", qname, got)
			return
		case got.msg == nil || got.code != dns.RcodeSuccess || got.err != nil:
			t.Fatalf("%s %s: no answer written: %s", qname, dns.TypeToString[qtype], got)
		}
		_, err := got.msg.Pack()
		require.NoError(t, err, "%s: reply does not pack", qname)
		for _, rr := range got.msg.Answer {
			require.Equal(t, lower, rr.Header().Name, "%s: answer for another name: %s", qname, rr)
		}
		require.False(t, len(got.msg.Answer) == 0 && (len(got.msg.Ns) != 1 || got.msg.Ns[0].Header().Name != m.Zones[zi]), "%s: negative answer without the zone's SOA: %s", qname, got.msg)
		require.False(t, got.msg.Rcode == dns.RcodeNameError && len(got.msg.Answer) > 0, "%s: NXDOMAIN with records", qname)
	})
}

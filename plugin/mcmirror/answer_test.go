package mcmirror

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// packer is a ResponseWriter that packs what it is given, as the server's
// does, and fails as the server's would when the reply does not pack.
type packer struct {
	test.ResponseWriter
	msg *dns.Msg
}

func (p *packer) WriteMsg(m *dns.Msg) error {
	if _, err := m.Pack(); err != nil {
		return err
	}
	p.msg = m.Copy()
	return nil
}

// ask sends one IN query through m and returns the reply that was sent,
// or nil.
func ask(t *testing.T, m *MCMirror, name string, qtype uint16) *dns.Msg {
	t.Helper()
	w := &packer{}
	r := new(dns.Msg)
	r.SetQuestion(name, qtype)
	if _, err := m.ServeDNS(context.Background(), w, r); err != nil {
		t.Logf("ServeDNS %s %s: %v", name, dns.TypeToString[qtype], err)
	}
	return w.msg
}

func targets(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		if s, ok := rr.(*dns.SRV); ok {
			out = append(out, s.Target)
		}
	}
	return out
}

// Two groups produce the same name (svc a-b of cluster c, svc a of cluster
// b-c): the one that keeps it keeps everything below it, its pods and SRV
// names; none of the other's answers under it.
func TestCollisionTakesTheSubtree(t *testing.T) {
	for _, order := range [][]string{{"a", "a-b"}, {"a-b", "a"}} {
		src := newFakeSource("c", "b-c")
		src.svc("c", "default", "a-b", labels.Flat, nil, httpPort)
		src.slice("c", "default", "a-b", []object.Port{httpPort}, ep("loser-0", "10.1.0.1", true))
		src.svc("b-c", "default", "a", labels.Flat, nil, httpPort)
		src.slice("b-c", "default", "a", []object.Port{httpPort}, ep("winner-0", "10.2.0.1", true))
		m, err := newWithSource(src, Options{Zones: []string{"cluster.local."}, Cluster: "east", TTL: 5})
		if err != nil {
			t.Fatal(err)
		}
		m.Next = fromNext
		for _, svc := range order {
			m.index.sync(object.ServiceKey("default", svc))
		}
		if got := ask(t, m, "winner-0.a-b-c"+z, dns.TypeA); got == nil || got.Rcode != dns.RcodeSuccess || len(got.Answer) != 1 {
			t.Errorf("order %v: the kept name's pod: %v", order, got)
		}
		if got := ask(t, m, "loser-0.a-b-c"+z, dns.TypeA); got == nil || got.Rcode != dns.RcodeNameError {
			t.Errorf("order %v: the other group's pod under the kept name answers: %v", order, got)
		}
		got := ask(t, m, "_http._tcp.a-b-c"+z, dns.TypeSRV)
		if got == nil || strings.Join(targets(got), ",") != "winner-0.a-b-c"+z {
			t.Errorf("order %v: SRV of the kept name: %v", order, got)
		}
	}
}

// A pod whose name cannot be a DNS name (a 64-octet host, or a name over
// 255 octets under a long zone) is left out of SRV answers, counted, and
// the rest of the answer is sent.
func TestInvalidTargetsLeftOut(t *testing.T) {
	long := strings.Repeat("z", 60) + "."
	zone := strings.Repeat(long, 3) + "example." // 191 octets
	src := newFakeSource("west")
	src.svc("west", "default", "web", labels.Flat, nil, httpPort)
	src.slice("west", "default", "web", []object.Port{httpPort},
		ep("ok-0", "10.1.0.1", true),
		ep(strings.Repeat("h", 64), "10.1.0.2", true), // a label over 63 octets
		ep(strings.Repeat("p", 63), "10.1.0.3", true)) // a name over 255 octets under zone
	m, err := newWithSource(src, Options{Zones: []string{"cluster.local.", zone}, Cluster: "east", TTL: 5})
	if err != nil {
		t.Fatal(err)
	}
	before := testutil.ToFloat64(invalidNames.WithLabelValues("west"))
	syncAll(m, src)
	if got := testutil.ToFloat64(invalidNames.WithLabelValues("west")); got != before+2 {
		t.Errorf("invalid_names_total{cluster=west} %v → %v, want 2 more", before, got)
	}
	for _, name := range []string{"_http._tcp.web-west" + z, "web-west" + z, "web-global" + z} {
		got := ask(t, m, name, dns.TypeSRV)
		if got == nil {
			t.Fatalf("%s: no reply sent", name)
		}
		want := strings.TrimSuffix(name, z)
		want = "ok-0." + strings.TrimPrefix(want, "_http._tcp.")
		if strings.HasPrefix(want, "ok-0.web-global") {
			want = "ok-0.web-west"
		}
		if ts := targets(got); len(ts) != 1 || ts[0] != want+z {
			t.Errorf("%s: targets %v, want %s", name, ts, want+z)
		}
	}
	// Under the long zone the pod with the 63-octet host has no name;
	// its address still answers the Service's name.
	wname := "web-west.default.svc." + zone
	if got := ask(t, m, wname, dns.TypeA); got == nil || len(got.Answer) != 3 {
		t.Errorf("%s: %v, want the 3 addresses", wname, got)
	}
	if got := ask(t, m, "_http._tcp."+wname, dns.TypeSRV); got == nil || len(targets(got)) != 1 {
		t.Errorf("SRV under the long zone: %v", got)
	}
}

// An endpoint without a hostname is named as the kubernetes plugin names
// it (fd00:1:2:3:4:: is fd00-1-2-3-4--0), so that a local -global SRV
// target resolves there; addresses are compared by value.
func TestDashedIPv6AndDedupe(t *testing.T) {
	src := newFakeSource("west")
	src.svc("east", "default", "db", labels.Flat, nil, httpPort)
	src.slice("east", "default", "db", []object.Port{httpPort}, ep("", "fd00:1:2:3:4::", true))
	src.svc("west", "default", "db", labels.Flat, nil, httpPort)
	src.slice("west", "default", "db", []object.Port{httpPort},
		object.Endpoint{Addresses: []string{"fd00::1", "fd00:0::1"}, Ready: true},
		ep("", "fd00:0:0::1", true))
	m := newTestPlugin(t, src, 5, fall.Zero)

	got := ask(t, m, "_http._tcp.db-global"+z, dns.TypeSRV)
	if got == nil {
		t.Fatal("no reply")
	}
	if ts := targets(got); len(ts) != 2 || ts[0] != "fd00-1-2-3-4--0.db"+z || ts[1] != "fd00--1.db-west"+z {
		t.Errorf("targets %v, want fd00-1-2-3-4--0.db (local, first) and fd00--1.db-west", ts)
	}
	if got := ask(t, m, "db-west"+z, dns.TypeAAAA); got == nil || len(got.Answer) != 1 {
		t.Errorf("db-west AAAA: %v, want one record for fd00::1 written three ways", got)
	}
}

// Names a remote cluster sends are checked as DNS labels: a namespace or
// a hostname with a dot would add a label and could shadow another name.
func TestRemoteNamesAreLabels(t *testing.T) {
	src := newFakeSource("west")
	src.svc("west", "b.c", "a", labels.Flat, nil, httpPort)
	src.slice("west", "b.c", "a", []object.Port{httpPort}, ep("x", "10.1.0.1", true))
	src.svc("west", "default", "web", labels.Flat, nil, httpPort)
	src.slice("west", "default", "web", []object.Port{httpPort}, ep("y.a-west", "10.1.0.2", true), ep("ok", "10.1.0.3", true))
	m := newTestPlugin(t, src, 5, fall.Zero)
	m.Next = fromNext
	for name := range m.index.names {
		if strings.Contains(name, "b.c.svc") || strings.HasPrefix(name, "y.") {
			t.Errorf("name %q from a name that is not a label", name)
		}
	}
	if got := ask(t, m, "a-west.b.c.svc.cluster.local.", dns.TypeA); got == nil || len(got.Answer) != 1 || got.Answer[0].(*dns.A).A.String() != "192.0.2.53" {
		t.Errorf("a-west.b.c: %v, want it left to the next plugin", got)
	}
	// The endpoint's address still answers the Service's name.
	if got := ask(t, m, "web-west"+z, dns.TypeA); got == nil || len(got.Answer) != 2 {
		t.Errorf("web-west: %v", got)
	}
}

// ExternalName exports have no addresses: a remote one is counted and left
// out; a local one does not claim <svc>-global.
func TestExternalNameExports(t *testing.T) {
	src := newFakeSource("west")
	src.svc("east", "default", "ext", labels.Flat, nil, httpPort).ExternalName = true
	src.svc("west", "default", "rext", labels.Gateway, nil, httpPort).ExternalName = true
	before := testutil.ToFloat64(externalNames.WithLabelValues("west"))
	m := newTestPlugin(t, src, 5, fall.Zero)
	m.Next = fromNext
	if got := testutil.ToFloat64(externalNames.WithLabelValues("west")); got != before+1 {
		t.Errorf("externalname_exports_total{cluster=west} %v → %v, want one more", before, got)
	}
	for _, name := range []string{"ext-global" + z, "rext-west" + z, "rext-global" + z} {
		got := ask(t, m, name, dns.TypeA)
		if got == nil || len(got.Answer) != 1 || got.Answer[0].(*dns.A).A.String() != "192.0.2.53" {
			t.Errorf("%s: %v, want it left to the next plugin", name, got)
		}
	}
}

// Only class IN is answered: a CHAOS or ANY query for a claimed name is
// refused (the server writes REFUSED), one for a name not claimed is
// another plugin's.
func TestQueryClass(t *testing.T) {
	m := newTestPlugin(t, fixture(), 5, fall.Zero)
	m.Next = fromNext
	for _, class := range []uint16{dns.ClassCHAOS, dns.ClassANY} {
		for qname, want := range map[string]int{
			"nginx-svc-west" + z:             dns.RcodeRefused,
			"nginx-set-9.nginx-svc-west" + z: dns.RcodeRefused,
			"nginx-svc-tokyo" + z:            dns.RcodeSuccess, // the next plugin's
		} {
			r := new(dns.Msg)
			r.SetQuestion(qname, dns.TypeA)
			r.Question[0].Qclass = class
			rec := dnstest.NewRecorder(&test.ResponseWriter{})
			rcode, err := m.ServeDNS(context.Background(), rec, r)
			if err != nil {
				t.Fatal(err)
			}
			if rcode != want {
				t.Errorf("%s %s: rcode %s, want %s", dns.ClassToString[class], qname, dns.RcodeToString[rcode], dns.RcodeToString[want])
			}
			if want == dns.RcodeRefused && rec.Msg != nil {
				t.Errorf("%s %s: wrote %v, want nothing (the server writes REFUSED)", dns.ClassToString[class], qname, rec.Msg)
			}
			if want == dns.RcodeSuccess && (rec.Msg == nil || len(rec.Msg.Answer) != 1 || rec.Msg.Answer[0].(*dns.A).A.String() != "192.0.2.53") {
				t.Errorf("%s %s: %v, want it left to the next plugin", dns.ClassToString[class], qname, rec.Msg)
			}
		}
	}
}

// -global answers list the local cluster's members first, in both A and
// SRV answers.
func TestGlobalLocalFirst(t *testing.T) {
	src := newFakeSource("a-first", "west")
	for _, c := range []string{"a-first", "west", "east"} {
		src.svc(c, "default", "db", labels.Flat, nil, httpPort)
	}
	src.slice("a-first", "default", "db", []object.Port{httpPort}, ep("db-0", "10.1.0.1", true))
	src.slice("west", "default", "db", []object.Port{httpPort}, ep("db-0", "10.2.0.1", true))
	src.slice("east", "default", "db", []object.Port{httpPort}, ep("db-0", "10.0.0.1", true))
	m := newTestPlugin(t, src, 5, fall.Zero)
	got := ask(t, m, "db-global"+z, dns.TypeA)
	if got == nil || len(got.Answer) != 3 || got.Answer[0].(*dns.A).A.String() != "10.0.0.1" {
		t.Errorf("A: %v, want the local 10.0.0.1 first", got)
	}
	got = ask(t, m, "_http._tcp.db-global"+z, dns.TypeSRV)
	if ts := targets(got); len(ts) != 3 || ts[0] != "db-0.db"+z {
		t.Errorf("SRV targets %v, want the local db-0.db first", ts)
	}
}

// Replies of one, a few and many addresses, and of one SRV target with
// glue of both families, are built in different ways: each holds every
// record, and room for the OPT record the server's writer adds.
func TestReplyOfEverySize(t *testing.T) {
	for n := 1; n <= fewAddresses+2; n++ {
		src := newFakeSource("west")
		src.svc("west", "default", "s", labels.Flat, nil, httpPort)
		var eps []object.Endpoint
		var want4, want6 []string
		for i := 1; i <= n; i++ {
			v4, v6 := fmt.Sprintf("10.1.0.%d", i), fmt.Sprintf("fd00::%d", i)
			eps = append(eps, object.Endpoint{Addresses: []string{v4, v6}, Ready: true})
			want4, want6 = append(want4, v4), append(want6, v6)
		}
		src.slice("west", "default", "s", []object.Port{httpPort}, eps...)
		m := newTestPlugin(t, src, 5, fall.Zero)
		for _, edns := range []bool{false, true} {
			for qtype, want := range map[uint16][]string{dns.TypeA: want4, dns.TypeAAAA: want6} {
				got := askScrubbed(t, m, "s-west"+z, qtype, edns)
				var addrs []string
				for _, rr := range got.Answer {
					switch rr := rr.(type) {
					case *dns.A:
						addrs = append(addrs, rr.A.String())
					case *dns.AAAA:
						addrs = append(addrs, rr.AAAA.String())
					}
				}
				slices.Sort(addrs)
				if !slices.Equal(addrs, want) {
					t.Errorf("%d endpoints, %s, EDNS %v: answer %v, want %v", n, dns.TypeToString[qtype], edns, addrs, want)
				}
				if (got.IsEdns0() != nil) != edns || len(got.Extra) != b2i(edns) {
					t.Errorf("%d endpoints, %s, EDNS %v: additional %v", n, dns.TypeToString[qtype], edns, got.Extra)
				}
			}
		}
	}

	m := newTestPlugin(t, fixture(), 5, fall.Zero)
	for _, edns := range []bool{false, true} {
		got := askScrubbed(t, m, "_dns._udp.web-west"+z, dns.TypeSRV, edns)
		want := []string{
			srv("_dns._udp.web-west"+z, 100, 53, "web-west"+z).String(),
			a("web-west"+z, "10.96.0.20").String(),
			aaaa("web-west"+z, "fd00::20").String(),
		}
		var recs []string
		for _, rr := range append(got.Answer, got.Extra...) {
			if rr.Header().Rrtype != dns.TypeOPT {
				recs = append(recs, rr.String())
			}
		}
		if !slices.Equal(recs, want) || (got.IsEdns0() != nil) != edns {
			t.Errorf("EDNS %v: %v, want %v and the OPT record only with EDNS", edns, got, want)
		}
	}
}

// askScrubbed sends one IN query, with EDNS or not, through m behind the
// server's writer and returns the reply that was sent.
func askScrubbed(t *testing.T, m *MCMirror, name string, qtype uint16, edns bool) *dns.Msg {
	t.Helper()
	w := &packer{}
	r := new(dns.Msg)
	r.SetQuestion(name, qtype)
	if edns {
		r.SetEdns0(1232, false)
	}
	if _, err := m.ServeDNS(context.Background(), request.NewScrubWriter(r, w), r); err != nil || w.msg == nil {
		t.Fatalf("%s %s: no reply (%v)", name, dns.TypeToString[qtype], err)
	}
	return w.msg
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

package mcmirror

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/index/indextest"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"

	"github.com/miekg/dns"
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

// Only class IN is answered: a CHAOS or ANY query for a claimed name is
// refused (the server writes REFUSED), one for a name not claimed is
// another plugin's.
func TestQueryClass(t *testing.T) {
	m := newTestPlugin(t, indextest.Fixture(), 5, fall.Zero)
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
			require.NoError(t, err)
			assert.Equal(t, dns.RcodeToString[want], dns.RcodeToString[rcode], "%s %s: rcode", dns.ClassToString[class], qname)
			assert.False(t, want == dns.RcodeRefused && rec.Msg != nil, "%s %s: wrote %v, want nothing (the server writes REFUSED)", dns.ClassToString[class], qname, rec.Msg)
			assert.False(t, want == dns.RcodeSuccess && (rec.Msg == nil || len(rec.Msg.Answer) != 1 || rec.Msg.Answer[0].(*dns.A).A.String() != "192.0.2.53"), "%s %s: %v, want it left to the next plugin", dns.ClassToString[class], qname, rec.Msg)
		}
	}
}

// Replies of one, a few and many addresses, and of one SRV target with
// glue of both families, are built in different ways: each holds every
// record, and room for the OPT record the server's writer adds.
func TestReplyOfEverySize(t *testing.T) {
	for n := 1; n <= fewAddresses+2; n++ {
		src := indextest.NewSource("west")
		src.AddService("west", "default", "s", labels.Flat, nil, httpPort)
		var eps []object.Endpoint
		var want4, want6 []string
		for i := 1; i <= n; i++ {
			v4, v6 := fmt.Sprintf("10.1.0.%d", i), fmt.Sprintf("fd00::%d", i)
			eps = append(eps, object.Endpoint{Addresses: []string{v4, v6}, Ready: true})
			want4, want6 = append(want4, v4), append(want6, v6)
		}
		src.AddSlice("west", "default", "s", []object.Port{httpPort}, eps...)
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
				assert.True(t, slices.Equal(addrs, want), "%d endpoints, %s, EDNS %v: answer %v, want %v", n, dns.TypeToString[qtype], edns, addrs, want)
				assert.False(t, (got.IsEdns0() != nil) != edns || len(got.Extra) != b2i(edns), "%d endpoints, %s, EDNS %v: additional %v", n, dns.TypeToString[qtype], edns, got.Extra)
			}
		}
	}

	m := newTestPlugin(t, indextest.Fixture(), 5, fall.Zero)
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
		assert.False(t, !slices.Equal(recs, want) || (got.IsEdns0() != nil) != edns, "EDNS %v: %v, want %v and the OPT record only with EDNS", edns, got, want)
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

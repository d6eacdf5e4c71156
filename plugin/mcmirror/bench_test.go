package mcmirror

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/coredns/coredns/plugin/test"

	"github.com/miekg/dns"
)

// discard is a ResponseWriter that packs the answer, as the server's does,
// into a buffer it reuses (the server's own buffer is miekg/dns's cost, not
// the plugin's), and drops it. Like the server's, it hands out addresses it
// already has: the benchmark measures the plugin, not
// test.ResponseWriter's address parsing.
type discard struct {
	test.ResponseWriter
	buf []byte
}

var (
	remote = &net.UDPAddr{IP: net.IPv4(10, 240, 0, 1), Port: 40212}
	local  = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}
)

func (*discard) RemoteAddr() net.Addr    { return remote }
func (*discard) LocalAddr() net.Addr     { return local }
func (d *discard) WriteMsg(m *dns.Msg) error {
	if d.buf == nil {
		d.buf = make([]byte, dns.MaxMsgSize)
	}
	_, err := m.PackBuffer(d.buf)
	return err
}

// BenchmarkServeDNS measures the hot path for each name form: lookup and
// reply, over UDP.
func BenchmarkServeDNS(b *testing.B) {
	m := newTestPlugin(b, fixture(), 5, fall.Zero)
	m.Next = fromNext
	w := &discard{}
	for _, bc := range []struct {
		name  string
		qname string
		qtype uint16
	}{
		{"cluster/A", "web-west" + z, dns.TypeA},
		{"cluster/AAAA-nodata", "nginx-svc-west" + z, dns.TypeAAAA},
		{"pod/A", "nginx-set-0.nginx-svc-west" + z, dns.TypeA},
		{"global/A", "nginx-svc-global" + z, dns.TypeA},
		{"srv/cluster", "_http._tcp.nginx-svc-west" + z, dns.TypeSRV},
		{"srv/global", "_http._tcp.nginx-svc-global" + z, dns.TypeSRV},      // > 512 octets: truncated
		{"srv/global-edns", "_http._tcp.nginx-svc-global" + z, dns.TypeSRV}, // EDNS 1232: whole
		{"ptr", "10.0.96.10.in-addr.arpa.", dns.TypePTR},
		{"nxdomain", "nginx-set-9.nginx-svc-west" + z, dns.TypeA},
		{"uppercase/A", "WEB-WEST.default.svc.cluster.local.", dns.TypeA},
	} {
		r := new(dns.Msg)
		r.SetQuestion(bc.qname, bc.qtype)
		if strings.HasSuffix(bc.name, "-edns") {
			r.SetEdns0(1232, false)
		}
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				m.ServeDNS(ctx, w, r)
			}
		})
	}
}

// BenchmarkLookup measures the index lookup alone.
func BenchmarkLookup(b *testing.B) {
	m := newTestPlugin(b, fixture(), 5, fall.Zero)
	b.ReportAllocs()
	for b.Loop() {
		if m.index.lookup("nginx-set-0.nginx-svc-west"+z) == nil {
			b.Fatal("not found")
		}
	}
}

// BenchmarkSync measures rebuilding the 300-pod group.
func BenchmarkSync(b *testing.B) {
	src := bigFixture()
	m := newTestPlugin(b, src, 5, fall.Zero)
	b.ReportAllocs()
	for b.Loop() {
		m.index.sync(groupKey{"default", "big"})
	}
}

package mcmirror

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"

	"github.com/mcmirror/mcmirror/plugin/mcmirror/index/indextest"

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
	remoteAddr = &net.UDPAddr{IP: net.IPv4(10, 240, 0, 1), Port: 40212}
	localAddr  = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}
)

func (*discard) RemoteAddr() net.Addr { return remoteAddr }
func (*discard) LocalAddr() net.Addr  { return localAddr }
func (d *discard) WriteMsg(m *dns.Msg) error {
	if d.buf == nil {
		d.buf = make([]byte, dns.MaxMsgSize)
	}
	_, err := m.PackBuffer(d.buf)
	return err
}

// serveForms are the name forms and query types the per-query benchmarks
// ask for.
var serveForms = []struct {
	name  string
	qname string
	qtype uint16
}{
	{"cluster/A", "web-west" + z, dns.TypeA},
	{"cluster/AAAA", "web-west" + z, dns.TypeAAAA},
	{"cluster/AAAA-nodata", "nginx-svc-west" + z, dns.TypeAAAA},
	{"cluster/SRV", "web-west" + z, dns.TypeSRV},
	{"cluster/SRV-port", "_dns._udp.web-west" + z, dns.TypeSRV},
	{"cluster/SRV-headless", "_http._tcp.nginx-svc-west" + z, dns.TypeSRV},
	{"pod/A", "nginx-set-0.nginx-svc-west" + z, dns.TypeA},
	{"pod/SRV", "nginx-set-0.nginx-svc-west" + z, dns.TypeSRV},
	{"pod/SRV-port", "_http._tcp.nginx-set-0.nginx-svc-west" + z, dns.TypeSRV},
	{"global/A", "nginx-svc-global" + z, dns.TypeA},
	{"global/AAAA", "web-global" + z, dns.TypeAAAA},
	// Without EDNS, the -global SRV replies are over 512 octets until the
	// server's writer compresses them (miekg/dns's Truncate): then they fit.
	{"global/SRV", "nginx-svc-global" + z, dns.TypeSRV},
	{"global/SRV-port", "_http._tcp.nginx-svc-global" + z, dns.TypeSRV},
	{"global/SRV-port-edns", "_http._tcp.nginx-svc-global" + z, dns.TypeSRV}, // EDNS 1232: fits uncompressed
	{"global/SRV-port-web", "_http._tcp.web-global" + z, dns.TypeSRV},        // ClusterIP members
	{"ptr/PTR", "10.0.96.10.in-addr.arpa.", dns.TypePTR},
	{"nxdomain/A", "nginx-set-9.nginx-svc-west" + z, dns.TypeA},
	{"uppercase/A", "WEB-WEST.default.svc.cluster.local.", dns.TypeA},
}

// formQuery returns the query of a serveForms entry.
func formQuery(name, qname string, qtype uint16) *dns.Msg {
	r := new(dns.Msg)
	r.SetQuestion(qname, qtype)
	if strings.HasSuffix(name, "-edns") {
		r.SetEdns0(1232, false)
	}
	return r
}

// BenchmarkServeDNS measures the hot path for each name form and query
// type: lookup, answer made from the index, reply fitted to the client's
// buffer by the server's writer (request.ScrubWriter) and packed, over UDP.
func BenchmarkServeDNS(b *testing.B) {
	m := newTestPlugin(b, indextest.Fixture(), 5, fall.Zero)
	d := &discard{}
	for _, bc := range serveForms {
		r := formQuery(bc.name, bc.qname, bc.qtype)
		w := request.NewScrubWriter(r, d)
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				m.ServeDNS(ctx, w, r)
			}
		})
	}
}

// kept is a ResponseWriter that keeps the message it is given.
type kept struct {
	test.ResponseWriter
	msg *dns.Msg
}

func (k *kept) WriteMsg(m *dns.Msg) error { k.msg = m; return nil }

// BenchmarkPackReply packs, with miekg/dns alone, the very reply
// BenchmarkServeDNS's writer packs for each form (as the server's writer
// leaves it: sized, truncated, compressed or not). It is the part of each
// ServeDNS figure that is not the plugin's: the difference is the lookup,
// the answer made from the index and the server's writer fitting it.
func BenchmarkPackReply(b *testing.B) {
	m := newTestPlugin(b, indextest.Fixture(), 5, fall.Zero)
	buf := make([]byte, dns.MaxMsgSize)
	for _, bc := range serveForms {
		w := &kept{}
		r := formQuery(bc.name, bc.qname, bc.qtype)
		m.ServeDNS(context.Background(), request.NewScrubWriter(r, w), r)
		if w.msg == nil {
			b.Fatalf("%s: no reply", bc.name)
		}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := w.msg.PackBuffer(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkWriteReply measures the server's part of each ServeDNS figure
// alone: its writer (request.ScrubWriter) fitting the reply the plugin
// hands over to the client's buffer, then packing it, as
// BenchmarkServeDNS's writer does. No plugin answering that reply can cost
// less than this; the difference to BenchmarkServeDNS is the plugin's own
// share: the lookup and the answer made from the index.
func BenchmarkWriteReply(b *testing.B) {
	m := newTestPlugin(b, indextest.Fixture(), 5, fall.Zero)
	for _, bc := range serveForms {
		k := &kept{}
		r := formQuery(bc.name, bc.qname, bc.qtype)
		m.ServeDNS(context.Background(), k, r)
		if k.msg == nil {
			b.Fatalf("%s: no reply", bc.name)
		}
		msg := k.msg
		answer, ns, extra, tc := msg.Answer, msg.Ns, msg.Extra, msg.Truncated
		w := request.NewScrubWriter(r, &discard{})
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				// The writer cuts and flags the message: give it back as
				// the plugin handed it over.
				msg.Answer, msg.Ns, msg.Extra, msg.Truncated, msg.Compress = answer, ns, extra, tc, false
				if err := w.WriteMsg(msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

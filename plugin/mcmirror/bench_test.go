package mcmirror

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"

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
	m := newTestPlugin(b, fixture(), 5, fall.Zero)
	m.Next = fromNext
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
	m := newTestPlugin(b, fixture(), 5, fall.Zero)
	m.Next = fromNext
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
	m := newTestPlugin(b, fixture(), 5, fall.Zero)
	m.Next = fromNext
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

// BenchmarkLookup measures the index lookup alone.
func BenchmarkLookup(b *testing.B) {
	m := newTestPlugin(b, fixture(), 5, fall.Zero)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := m.index.find("nginx-set-0.nginx-svc-west" + z); !ok {
			b.Fatal("not found")
		}
	}
}

// BenchmarkLookupCold measures the index lookup over every name of
// mcbench's mem set (10 links, Services of 100 pods; 10k and 100k
// endpoints), in random order: as in a server answering many names, each
// name's data is mostly not in the CPU's caches, which BenchmarkLookup's
// one name always is.
func BenchmarkLookupCold(b *testing.B) {
	for _, set := range []struct {
		name           string
		services, pods int
	}{
		{"endpoints=10000", 10, 100},
		{"endpoints=100000", 100, 100},
		// mcbench's ten set: every Service in each of the 10 clusters with
		// one pod there, so ten times the members of one pod each.
		{"endpoints=10000,one-pod-members", 1000, 1},
	} {
		m := newTestPlugin(b, memSource(set.services, set.pods), 5, fall.Zero)
		var names []string
		for c := range 10 {
			for s := range set.services {
				names = append(names, fmt.Sprintf("m%d-c%d.mem.svc.cluster.local.", s, c))
				for e := range set.pods {
					names = append(names, fmt.Sprintf("h%d.m%d-c%d.mem.svc.cluster.local.", e, s, c))
				}
			}
		}
		rand.New(rand.NewPCG(1, 2)).Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		b.Run(set.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, ok := m.index.find(names[i]); !ok {
					b.Fatal(names[i])
				}
				if i++; i == len(names) {
					i = 0
				}
			}
		})
	}
}

// BenchmarkSync measures rebuilding the 300-pod group.
func BenchmarkSync(b *testing.B) {
	src := bigFixture()
	m := newTestPlugin(b, src, 5, fall.Zero)
	b.ReportAllocs()
	for b.Loop() {
		m.index.sync(object.ServiceKey("default", "big"))
	}
}

// memSource is mcbench's mem set in a fake source: services Services in
// each of 10 linked clusters c0..c9, each headless, flat mode, one slice of
// pods named ready endpoints (100 in mcbench), every object with a
// resourceVersion.
func memSource(services, pods int) *fakeSource {
	links := make([]string, 10)
	for c := range links {
		links[c] = fmt.Sprintf("c%d", c)
	}
	f := newFakeSource(links...)
	for c, cl := range links {
		for s := range services {
			name := fmt.Sprintf("m%d", s)
			f.svc(cl, "mem", name, labels.Flat, nil, httpPort).Version = "1"
			eps := make([]object.Endpoint, pods)
			for e := range eps {
				n := (c*services+s)*pods + e
				eps[e] = ep(fmt.Sprintf("h%d", e), fmt.Sprintf("10.%d.%d.%d", 200+n>>16, n>>8&255, n&255), true)
			}
			f.slice(cl, "mem", name, []object.Port{httpPort}, eps...)
			f.slices[[3]string{cl, "mem", name}][0].Version = "1"
		}
	}
	return f
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkIndexMemory measures the heap per mirrored endpoint at 10k and
// 100k endpoints across 10 links: the index alone (index-B/endpoint), and
// with the trimmed objects it is built from (total-B/endpoint), which the
// informers hold in the process.
func BenchmarkIndexMemory(b *testing.B) {
	for _, services := range []int{10, 100} {
		endpoints := services * 100 * 10
		b.Run(fmt.Sprintf("endpoints=%d", endpoints), func(b *testing.B) {
			var src, idx float64
			for b.Loop() {
				before := heapInUse()
				f := memSource(services, 100)
				objs := heapInUse()
				m := newTestPlugin(b, f, 5, fall.Zero)
				after := heapInUse()
				if m.index.lookup("h7.m3-c4.mem.svc.cluster.local.") == nil {
					b.Fatal("not built")
				}
				runtime.KeepAlive(f)
				runtime.KeepAlive(m)
				src, idx = float64(objs-before), float64(after-objs)
			}
			b.ReportMetric(idx/float64(endpoints), "index-B/endpoint")
			b.ReportMetric((src+idx)/float64(endpoints), "total-B/endpoint")
		})
	}
}

// BenchmarkSyncOneEndpoint measures the rebuild after one endpoint of a
// 10-cluster × 1,000-pod group changed address, as the informer hands it
// over: a new Slice object with a new resourceVersion.
func BenchmarkSyncOneEndpoint(b *testing.B) {
	links := make([]string, 10)
	for c := range links {
		links[c] = fmt.Sprintf("c%d", c)
	}
	f := newFakeSource(links...)
	for c, cl := range links {
		f.svc(cl, "default", "big", labels.Flat, nil, httpPort).Version = "1"
		eps := make([]object.Endpoint, 1000)
		for e := range eps {
			eps[e] = ep(fmt.Sprintf("big-%d", e), fmt.Sprintf("10.%d.%d.%d", c, e>>8, e&255), true)
		}
		f.slice(cl, "default", "big", []object.Port{httpPort}, eps...)
		f.slices[[3]string{cl, "default", "big"}][0].Version = "1"
	}
	m := newTestPlugin(b, f, 5, fall.Zero)
	k := object.ServiceKey("default", "big")
	key := [3]string{"c3", "default", "big"}
	v := 1
	b.ReportAllocs()
	for b.Loop() {
		old := f.slices[key][0]
		sl := *old
		sl.Endpoints = slices.Clone(old.Endpoints)
		v++
		sl.Version = strconv.Itoa(v)
		sl.Endpoints[7].Addresses = []string{fmt.Sprintf("10.3.99.%d", v%250)}
		f.slices[key] = []*object.Slice{&sl}
		m.index.sync(k)
	}
	if got := records(m.index, "big-7.big-c3"+z, dns.TypeA); len(got) != 1 || got[0].(*dns.A).A.String() != fmt.Sprintf("10.3.99.%d", v%250) {
		b.Fatalf("big-7.big-c3: %v", got)
	}
}

// coldSource has services exported ClusterIP Services (flat mode, one
// ready endpoint) in each of 10 linked clusters.
func coldSource(services int) *fakeSource {
	links := make([]string, 10)
	for c := range links {
		links[c] = fmt.Sprintf("c%d", c)
	}
	f := newFakeSource(links...)
	for c, cl := range links {
		for s := range services {
			name := fmt.Sprintf("s%d", s)
			n := c*services + s
			f.svc(cl, "cold", name, labels.Flat, []string{"10.100.0.1"}, httpPort).Version = "1"
			f.slice(cl, "cold", name, []object.Port{httpPort}, ep("", fmt.Sprintf("10.%d.%d.%d", 200+n>>16, n>>8&255, n&255), true))
			f.slices[[3]string{cl, "cold", name}][0].Version = "1"
		}
	}
	return f
}

// BenchmarkColdStart measures building the index of 10 links × 10,000
// exported Services from lists already received, as at start-up; and
// the live heap half-way through a relist of every link (every object
// replaced by a new version, every group rebuilt) against the steady
// state (relist-heap-ratio).
func BenchmarkColdStart(b *testing.B) {
	const services = 10000
	var ratio float64
	for b.Loop() {
		b.StopTimer()
		f := coldSource(services)
		keys := f.keys()
		m, err := newWithSource(f, Options{Zones: []string{"cluster.local.", "in-addr.arpa.", "ip6.arpa."}, Cluster: "east", TTL: 5})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for _, k := range keys {
			m.index.sync(k)
		}
		b.StopTimer()
		if m.index.lookup("s9999-c9.cold.svc.cluster.local.") == nil {
			b.Fatal("not built")
		}
		steady := heapInUse()
		for key, sls := range f.slices {
			sl := *sls[0]
			sl.Version = "2"
			f.slices[key] = []*object.Slice{&sl}
		}
		for key, s := range f.services {
			c := *s
			c.Version = "2"
			f.services[key] = &c
		}
		var mid uint64
		for i, k := range keys {
			m.index.sync(k)
			if i == len(keys)/2 {
				mid = heapInUse()
			}
		}
		ratio = float64(mid) / float64(steady)
		runtime.KeepAlive(m)
		b.StartTimer()
	}
	b.ReportMetric(ratio, "relist-heap-ratio")
}

package mcmirror

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/coredns/coredns/plugin/pkg/fall"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// addrs returns the A and AAAA addresses of name in the index, sorted, and
// whether the name is there at all.
func addrs(x *index, name string) ([]string, bool) {
	e := x.lookup(name)
	if e == nil {
		return nil, false
	}
	var out []string
	for _, rr := range append(records(x, name, dns.TypeA), records(x, name, dns.TypeAAAA)...) {
		switch r := rr.(type) {
		case *dns.A:
			out = append(out, r.A.String())
		case *dns.AAAA:
			out = append(out, r.AAAA.String())
		}
	}
	slices.Sort(out)
	return out, true
}

// records returns the answer records of name and qtype, as ServeDNS makes
// them; nil when name is not in the index.
func records(x *index, name string, qtype uint16) []dns.RR {
	h := x.lookup(name)
	if h == nil {
		return nil
	}
	r := new(dns.Msg)
	r.SetQuestion(name, qtype)
	msg := h.answer(r, name, x.ttl, 1<<16, 0)
	if msg == nil {
		return nil
	}
	return msg.Answer
}

// owner returns the group that answers name, or "".
func owner(x *index, name string) string {
	if h := x.lookup(name); h != nil {
		return h.r.s.key.Svc
	}
	return ""
}

func wantAddrs(t *testing.T, x *index, name string, want ...string) {
	t.Helper()
	got, ok := addrs(x, name)
	if !ok {
		t.Errorf("%s: not in the index, want %v", name, want)
		return
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: %v, want %v", name, got, want)
	}
}

func wantAbsent(t *testing.T, x *index, name string) {
	t.Helper()
	if e := x.lookup(name); e != nil {
		t.Errorf("%s: in the index (%v), want it gone", name, records(x, name, dns.TypeA))
	}
}

func TestIndexUpdates(t *testing.T) {
	src := fixture()
	m := newTestPlugin(t, src, 5, fall.Zero)
	x := m.index
	nginx := object.ServiceKey("default", "nginx-svc")

	wantAddrs(t, x, "nginx-svc-west"+z, "10.96.0.10", "10.96.0.11")

	// A per-pod mirror goes: its pod is left out.
	delete(src.mirrors, [2]string{"default", "nginx-set-1-west"})
	x.sync(nginx)
	wantAddrs(t, x, "nginx-svc-west"+z, "10.96.0.10")
	wantAbsent(t, x, "nginx-set-1.nginx-svc-west"+z)
	wantAbsent(t, x, "11.0.96.10.in-addr.arpa.")

	// ... and comes back with another ClusterIP.
	src.mirror("default", "nginx-set-1-west", "west", "nginx-svc-west", []string{"10.96.0.99"}, httpPort)
	x.sync(nginx)
	wantAddrs(t, x, "nginx-set-1.nginx-svc-west"+z, "10.96.0.99")
	if rrs := records(x, "99.0.96.10.in-addr.arpa.", dns.TypePTR); len(rrs) != 1 || rrs[0].(*dns.PTR).Ptr != "nginx-set-1.nginx-svc-west"+z {
		t.Errorf("PTR of the new mirror ClusterIP: %v", rrs)
	}

	// A pod turns not ready.
	src.slices[[3]string{"west", "default", "nginx-svc"}][0].Endpoints[0].Ready = false
	x.sync(nginx)
	wantAbsent(t, x, "nginx-set-0.nginx-svc-west"+z)
	wantAddrs(t, x, "nginx-svc-west"+z, "10.96.0.99")
	wantAddrs(t, x, "nginx-svc-global"+z, "10.0.0.10", "10.96.0.99", "10.96.1.10")

	// The slices go: still exported, so NODATA rather than someone else's.
	delete(src.slices, [3]string{"west", "default", "nginx-svc"})
	x.sync(nginx)
	wantAddrs(t, x, "nginx-svc-west"+z)

	// West unexports: every west name of the group goes, -global shrinks.
	delete(src.services, [3]string{"west", "default", "nginx-svc"})
	x.sync(nginx)
	wantAbsent(t, x, "nginx-svc-west"+z)
	wantAbsent(t, x, "_http._tcp.nginx-svc-west"+z)
	wantAbsent(t, x, "_tcp.nginx-svc-west"+z)
	wantAddrs(t, x, "nginx-svc-global"+z, "10.0.0.10", "10.96.1.10")
	wantAddrs(t, x, "nginx-svc-paris"+z, "10.96.1.10")

	// Paris unexports: -global is the local cluster alone.
	delete(src.services, [3]string{"paris", "default", "nginx-svc"})
	x.sync(nginx)
	wantAbsent(t, x, "nginx-svc-paris"+z)
	wantAbsent(t, x, "10.1.96.10.in-addr.arpa.")
	wantAddrs(t, x, "nginx-svc-global"+z, "10.0.0.10")

	// The local cluster unexports: nothing is left of the group.
	delete(src.services, [3]string{"east", "default", "nginx-svc"})
	x.sync(nginx)
	wantAbsent(t, x, "nginx-svc-global"+z)
	wantAbsent(t, x, "_http._tcp.nginx-svc-global"+z)

	// Other groups were not touched.
	wantAddrs(t, x, "web-west"+z, "10.96.0.20", "fd00::20")

	// Exported again, by west alone.
	src.svc("west", "default", "nginx-svc", labels.Gateway, nil, httpPort)
	src.slice("west", "default", "nginx-svc", []object.Port{httpPort}, ep("nginx-set-1", "10.1.0.11", true))
	x.sync(nginx)
	wantAddrs(t, x, "nginx-svc-west"+z, "10.96.0.99")
	wantAddrs(t, x, "nginx-svc-global"+z, "10.96.0.99")
}

func TestIndexServiceChanges(t *testing.T) {
	src := fixture()
	m := newTestPlugin(t, src, 5, fall.Zero)
	x := m.index
	web := object.ServiceKey("default", "web")

	// Gateway to flat: remote endpoint addresses replace the mirror's.
	s := src.services[[3]string{"west", "default", "web"}]
	s.Mode = labels.Flat
	src.slice("west", "default", "web", []object.Port{{Name: "http", Protocol: "tcp", Port: 8080}}, ep("", "10.1.0.60", true))
	x.sync(web)
	wantAddrs(t, x, "web-west"+z, "10.1.0.60")
	wantAbsent(t, x, "20.0.96.10.in-addr.arpa.") // flat mode has no mirror to name

	// The mirror's ClusterIP changes in gateway mode.
	s.Mode = labels.Gateway
	src.mirror("default", "web-west", "west", "", []string{"10.96.0.21"}, httpPort)
	x.sync(web)
	wantAddrs(t, x, "web-west"+z, "10.96.0.21")
	wantAbsent(t, x, "_dns._udp.web-west"+z) // the new mirror has no dns port

	// A mirror of another cluster's Service of that name is not used.
	src.mirror("default", "web-west", "paris", "", []string{"10.96.0.22"}, httpPort)
	x.sync(web)
	wantAddrs(t, x, "web-west"+z)
}

func TestIndexLinkRemoved(t *testing.T) {
	src := fixture()
	m := newTestPlugin(t, src, 5, fall.Zero)
	x := m.index

	src.links = []string{"paris"}
	for _, k := range src.keys() {
		x.sync(k)
	}
	for _, name := range []string{"nginx-svc-west" + z, "nginx-set-0.nginx-svc-west" + z, "web-west" + z, "flat-west" + z, "10.0.96.10.in-addr.arpa."} {
		wantAbsent(t, x, name)
	}
	wantAddrs(t, x, "nginx-svc-global"+z, "10.0.0.10", "10.96.1.10")
}

func TestIndexLocalOnly(t *testing.T) {
	src := newFakeSource("west")
	src.svc("east", "default", "api", labels.Gateway, []string{"10.100.0.7"}, httpPort)
	m := newTestPlugin(t, src, 5, fall.Zero)
	wantAddrs(t, m.index, "api-global"+z, "10.100.0.7")
	wantAbsent(t, m.index, "api-east"+z) // the local cluster's own names are the kubernetes plugin's
	srv := records(m.index, "_http._tcp.api-global"+z, dns.TypeSRV)
	if len(srv) != 1 || srv[0].(*dns.SRV).Target != "api"+z {
		t.Errorf("SRV of a local ClusterIP Service: %v", srv)
	}
}

func TestIndexNameCollision(t *testing.T) {
	// Service foo-us of west and Service foo of us-west are both
	// foo-us-west.
	src := newFakeSource("us-west", "west")
	src.svc("west", "default", "foo-us", labels.Gateway, []string{"10.100.0.1"}, httpPort)
	src.mirror("default", "foo-us-west", "west", "", []string{"10.96.0.1"}, httpPort)
	src.svc("us-west", "default", "foo", labels.Gateway, []string{"10.100.0.2"}, httpPort)
	m := newTestPlugin(t, src, 5, fall.Zero)
	x := m.index

	// The mirror carries cluster-name=west, so only foo-us of west can use
	// it; foo of us-west has no mirror of its own but still claims the
	// name. The group that sorts first (foo) keeps it, whatever the order
	// of the builds.
	for _, order := range [][]string{{"foo", "foo-us"}, {"foo-us", "foo"}} {
		x2 := newIndex(src, "east", []string{"cluster.local."}, 5, false)
		for _, svc := range order {
			x2.sync(object.ServiceKey("default", svc))
		}
		if o := owner(x2, "foo-us-west"+z); o != "foo" {
			t.Errorf("order %v: owner %q, want foo", order, o)
		}
	}
	if o := owner(x, "foo-us-west"+z); o != "foo" {
		t.Fatalf("owner %q, want foo", o)
	}

	// us-west unexports foo: the name goes to foo-us of west, rebuilt
	// because it lost the name before.
	delete(src.services, [3]string{"us-west", "default", "foo"})
	again := x.sync(object.ServiceKey("default", "foo"))
	if !slices.Equal(again, []object.GroupKey{object.ServiceKey("default", "foo-us")}) {
		t.Fatalf("sync asked to rebuild %v, want foo-us", again)
	}
	for _, k := range again {
		x.sync(k)
	}
	wantAddrs(t, x, "foo-us-west"+z, "10.96.0.1")
}

func TestIndexInvalidNames(t *testing.T) {
	src := newFakeSource("west")
	long := strings.Repeat("a", 60) // a-...-west is 65 characters: no mirror name
	src.svc("west", "default", long, labels.Flat, []string{"10.100.0.1"}, httpPort)
	src.slice("west", "default", long, []object.Port{httpPort}, ep("", "10.1.0.1", true))
	src.svc("west", "default", "ok", labels.Flat, nil, httpPort)
	src.slice("west", "default", "ok", []object.Port{httpPort}, ep(strings.Repeat("h", 64), "10.1.0.2", true), ep("", "not-an-ip", true))
	m := newTestPlugin(t, src, 5, fall.Zero)
	if n := m.index.len(); n == 0 {
		t.Fatal("empty index")
	}
	for name := range m.index.names {
		if _, ok := dns.IsDomainName(name); !ok {
			t.Errorf("invalid name %q in the index", name)
		}
		if strings.Contains(name, long) && !strings.Contains(name, "-global") {
			t.Errorf("name %q of an unmirrorable Service", name)
		}
		if strings.Contains(name, "hhhh") {
			t.Errorf("name %q of an overlong hostname", name)
		}
	}
	// The pod's name cannot be; its address still answers the Service's.
	wantAddrs(t, m.index, "ok-west"+z, "10.1.0.2")
}

func TestIndexZones(t *testing.T) {
	src := fixture()
	m, err := newWithSource(src, Options{Zones: []string{"cluster.local.", "example.org."}, Cluster: "east", TTL: 5})
	if err != nil {
		t.Fatal(err)
	}
	syncAll(m, src)
	wantAddrs(t, m.index, "web-west.default.svc.cluster.local.", "10.96.0.20", "fd00::20")
	wantAddrs(t, m.index, "web-west.default.svc.example.org.", "10.96.0.20", "fd00::20")
	// No reverse zone, no PTR names.
	wantAbsent(t, m.index, "20.0.96.10.in-addr.arpa.")

	if _, err := newWithSource(src, Options{Zones: []string{"in-addr.arpa."}, Cluster: "east"}); err == nil {
		t.Error("no error with reverse zones only")
	}
}

func TestIndexMetrics(t *testing.T) {
	src := newFakeSource("west")
	src.svc("west", "default", "web", labels.Gateway, []string{"10.100.0.1"}, httpPort)
	src.mirror("default", "web-west", "west", "", []string{"10.96.0.20", "fd00::20"}, httpPort)
	m := newTestPlugin(t, src, 5, fall.Zero)
	// web-west, web-global and two PTRs (the SRV names below them are
	// made at query time); the records are what the names are made of:
	// web-west's two addresses, one SRV target, two PTR names.
	if got := testutil.ToFloat64(indexNames); got != 4 {
		t.Errorf("index_names = %v, want 4", got)
	}
	for typ, want := range map[string]float64{"A": 1, "AAAA": 1, "SRV": 1, "PTR": 2} {
		if got := testutil.ToFloat64(indexRecords.WithLabelValues(typ)); got != want {
			t.Errorf("index_records{type=%s} = %v, want %v", typ, got, want)
		}
	}
	delete(src.services, [3]string{"west", "default", "web"})
	m.index.sync(object.ServiceKey("default", "web"))
	if got := testutil.ToFloat64(indexNames); got != 0 {
		t.Errorf("index_names = %v after unexport, want 0", got)
	}
	if got := testutil.ToFloat64(indexRecords.WithLabelValues("SRV")); got != 0 {
		t.Errorf("index_records{type=SRV} = %v after unexport, want 0", got)
	}
}

// A per-pod mirror belongs to one headless mirror (its
// headless-mirror-svc-name label): another exported headless Service whose
// endpoint has the same hostname must not answer with it, nor may a mirror
// of another cluster. Linkerd #15200 mixed such mirrors up.
func TestIndexPodMirrorOfAnotherService(t *testing.T) {
	src := fixture()
	// Service "other" of west has an endpoint named like nginx-svc's pod
	// whose mirror nginx-set-0-west belongs to nginx-svc-west.
	src.svc("west", "default", "other", labels.Gateway, nil, httpPort)
	src.slice("west", "default", "other", []object.Port{httpPort}, ep("nginx-set-0", "10.1.0.60", true))
	src.mirror("default", "other-west", "west", "", nil, httpPort)
	m := newTestPlugin(t, src, 5, fall.Zero)
	x := m.index

	wantAddrs(t, x, "nginx-set-0.nginx-svc-west"+z, "10.96.0.10")
	wantAbsent(t, x, "nginx-set-0.other-west"+z)
	wantAddrs(t, x, "other-west"+z) // exported, nothing routable: NODATA

	// Its own per-pod mirror makes it answer, with its own ClusterIP.
	src.mirror("default", "nginx-set-0-west", "west", "other-west", []string{"10.96.0.61"}, httpPort)
	x.sync(object.ServiceKey("default", "other"))
	x.sync(object.ServiceKey("default", "nginx-svc"))
	wantAddrs(t, x, "nginx-set-0.other-west"+z, "10.96.0.61")
	wantAbsent(t, x, "nginx-set-0.nginx-svc-west"+z)

	// A mirror labelled for another cluster is never taken.
	src.mirror("default", "nginx-set-0-west", "paris", "other-west", []string{"10.96.0.62"}, httpPort)
	x.sync(object.ServiceKey("default", "other"))
	wantAbsent(t, x, "nginx-set-0.other-west"+z)
}

// A change in one cluster rebuilds that cluster's part of the group only:
// the others, built from the same objects (same resourceVersions), are
// reused as they are, and the new address answers at once.
func TestSyncReusesUnchangedMembers(t *testing.T) {
	src := newFakeSource("c0", "c1", "c2")
	for i, c := range []string{"c0", "c1", "c2"} {
		src.svc(c, "default", "db", labels.Flat, nil, httpPort).Version = "1"
		src.slice(c, "default", "db", []object.Port{httpPort}, ep("db-0", fmt.Sprintf("10.%d.0.1", i), true), ep("db-1", fmt.Sprintf("10.%d.0.2", i), true))
		src.slices[[3]string{c, "default", "db"}][0].Version = "1"
	}
	m := newTestPlugin(t, src, 5, fall.Zero)
	k := object.ServiceKey("default", "db")
	before := m.index.slots[k].g

	key := [3]string{"c1", "default", "db"}
	sl := *src.slices[key][0]
	sl.Version = "2"
	sl.Endpoints = slices.Clone(sl.Endpoints)
	sl.Endpoints[1] = ep("db-1", "10.1.0.99", true)
	src.slices[key] = []*object.Slice{&sl}
	m.index.sync(k)

	after := m.index.slots[k].g
	for _, c := range []string{"c0", "c1", "c2"} {
		same := before.member(c) == after.member(c)
		if same != (c != "c1") {
			t.Errorf("member %s reused: %v, want %v", c, same, c != "c1")
		}
	}
	wantAddrs(t, m.index, "db-1.db-c1"+z, "10.1.0.99")
	wantAddrs(t, m.index, "db-global"+z, "10.0.0.1", "10.0.0.2", "10.1.0.1", "10.1.0.99", "10.2.0.1", "10.2.0.2")
	// The pod names of the rebuilt part are the old strings.
	if a, b := before.member("c1").podNames[0], after.member("c1").podNames[0]; unsafe.StringData(a) != unsafe.StringData(b) {
		t.Errorf("pod name %q copied, want the old string reused", b)
	}
}

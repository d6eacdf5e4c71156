package index

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/index/indextest"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const z = ".default.svc.cluster.local."

// The fixtures' endpoints and ports (indextest).
var (
	ep       = indextest.EP
	httpPort = indextest.HTTPPort
	dnsPort  = indextest.DNSPort
)

// testIndex returns the index of src for cluster east in cluster.local,
// with PTR names, every group built.
func testIndex(src *indextest.Source) *Index {
	return built(src, Options{Cluster: "east", Zones: []string{"cluster.local."}, PTR: true})
}

// built returns the index of src with options o, every group built.
func built(src *indextest.Source, o Options) *Index {
	x := New(src, o)
	syncAll(x, src)
	return x
}

// syncAll builds every group of src, and the groups those builds ask for.
func syncAll(x *Index, src *indextest.Source) { syncKeys(x, src.Keys()...) }

// syncKeys builds groups keys, and the groups those builds ask for, as the
// watches' queue does.
func syncKeys(x *Index, keys ...object.GroupKey) {
	for queue := keys; len(queue) > 0; {
		k := queue[0]
		queue = append(queue[1:], x.Sync(k)...)
	}
}

// targets returns the SRV targets of name, in order; nil when name is not
// in the index or has no SRV records.
func targets(x *Index, name string) []string {
	h := x.Lookup(name)
	if h == nil || !h.SRV() {
		return nil
	}
	var out []string
	h.EachTarget(func(t Target) bool { out = append(out, t.Name); return true })
	return out
}

// ptr returns what the reverse name name points at, or "".
func ptr(x *Index, name string) string {
	if h := x.Lookup(name); h != nil {
		target, _ := h.PTR()
		return target
	}
	return ""
}

// owner returns the group that answers name, or "".
func owner(x *Index, name string) string {
	if h := x.Lookup(name); h != nil {
		return h.r.s.key.Svc
	}
	return ""
}

func wantAddrs(t *testing.T, x *Index, name string, want ...string) {
	t.Helper()
	if got, ok := indextest.Addrs(x.Lookup(name)); assert.True(t, ok, "%s: not in the index, want %v", name, want) {
		assert.True(t, slices.Equal(got, want), "%s: %v, want %v", name, got, want)
	}
}

func wantAbsent(t *testing.T, x *Index, names ...string) {
	t.Helper()
	for _, name := range names {
		got, ok := indextest.Addrs(x.Lookup(name))
		assert.False(t, ok, "%s: in the index (%v), want it gone", name, got)
	}
}

func TestIndexUpdates(t *testing.T) {
	src := indextest.Fixture()
	x := testIndex(src)
	nginx := object.ServiceKey("default", "nginx-svc")

	wantAddrs(t, x, "nginx-svc-west"+z, "10.96.0.10", "10.96.0.11")

	// A per-pod mirror goes: its pod is left out.
	delete(src.Mirrors, [2]string{"default", "nginx-set-1-west"})
	x.Sync(nginx)
	wantAddrs(t, x, "nginx-svc-west"+z, "10.96.0.10")
	wantAbsent(t, x, "nginx-set-1.nginx-svc-west"+z, "11.0.96.10.in-addr.arpa.")

	// ... and comes back with another ClusterIP.
	src.AddMirror("default", "nginx-set-1-west", "west", "nginx-svc-west", []string{"10.96.0.99"}, httpPort)
	x.Sync(nginx)
	wantAddrs(t, x, "nginx-set-1.nginx-svc-west"+z, "10.96.0.99")
	assert.Equal(t, "nginx-set-1.nginx-svc-west"+z, ptr(x, "99.0.96.10.in-addr.arpa."), "PTR of the new mirror ClusterIP")

	// A pod turns not ready.
	src.EndpointSlices[[3]string{"west", "default", "nginx-svc"}][0].Endpoints[0].Ready = false
	x.Sync(nginx)
	wantAbsent(t, x, "nginx-set-0.nginx-svc-west"+z)
	wantAddrs(t, x, "nginx-svc-west"+z, "10.96.0.99")
	wantAddrs(t, x, "nginx-svc-global"+z, "10.0.0.10", "10.96.0.99", "10.96.1.10")

	// The slices go: still exported, so NODATA rather than someone else's.
	delete(src.EndpointSlices, [3]string{"west", "default", "nginx-svc"})
	x.Sync(nginx)
	wantAddrs(t, x, "nginx-svc-west"+z)

	// West unexports: every west name of the group goes, -global shrinks.
	delete(src.Services, [3]string{"west", "default", "nginx-svc"})
	x.Sync(nginx)
	wantAbsent(t, x, "nginx-svc-west"+z, "_http._tcp.nginx-svc-west"+z, "_tcp.nginx-svc-west"+z)
	wantAddrs(t, x, "nginx-svc-global"+z, "10.0.0.10", "10.96.1.10")
	wantAddrs(t, x, "nginx-svc-paris"+z, "10.96.1.10")

	// Paris unexports: -global is the local cluster alone.
	delete(src.Services, [3]string{"paris", "default", "nginx-svc"})
	x.Sync(nginx)
	wantAbsent(t, x, "nginx-svc-paris"+z, "10.1.96.10.in-addr.arpa.")
	wantAddrs(t, x, "nginx-svc-global"+z, "10.0.0.10")

	// The local cluster unexports: nothing is left of the group.
	delete(src.Services, [3]string{"east", "default", "nginx-svc"})
	x.Sync(nginx)
	wantAbsent(t, x, "nginx-svc-global"+z, "_http._tcp.nginx-svc-global"+z)

	// Other groups were not touched.
	wantAddrs(t, x, "web-west"+z, "10.96.0.20", "fd00::20")

	// Exported again, by west alone.
	src.AddService("west", "default", "nginx-svc", labels.Gateway, nil, httpPort)
	src.AddSlice("west", "default", "nginx-svc", []object.Port{httpPort}, ep("nginx-set-1", "10.1.0.11", true))
	x.Sync(nginx)
	wantAddrs(t, x, "nginx-svc-west"+z, "10.96.0.99")
	wantAddrs(t, x, "nginx-svc-global"+z, "10.96.0.99")
}

func TestIndexServiceChanges(t *testing.T) {
	src := indextest.Fixture()
	x := testIndex(src)
	web := object.ServiceKey("default", "web")

	// Gateway to flat: remote endpoint addresses replace the mirror's.
	s := src.Services[[3]string{"west", "default", "web"}]
	s.Mode = labels.Flat
	src.AddSlice("west", "default", "web", []object.Port{{Name: "http", Protocol: "tcp", Port: 8080}}, ep("", "10.1.0.60", true))
	x.Sync(web)
	wantAddrs(t, x, "web-west"+z, "10.1.0.60")
	wantAbsent(t, x, "20.0.96.10.in-addr.arpa.") // flat mode has no mirror to name

	// The mirror's ClusterIP changes in gateway mode.
	s.Mode = labels.Gateway
	src.AddMirror("default", "web-west", "west", "", []string{"10.96.0.21"}, httpPort)
	x.Sync(web)
	wantAddrs(t, x, "web-west"+z, "10.96.0.21")
	wantAbsent(t, x, "_dns._udp.web-west"+z) // the new mirror has no dns port

	// A mirror of another cluster's Service of that name is not used.
	src.AddMirror("default", "web-west", "paris", "", []string{"10.96.0.22"}, httpPort)
	x.Sync(web)
	wantAddrs(t, x, "web-west"+z)
}

func TestIndexLinkRemoved(t *testing.T) {
	src := indextest.Fixture()
	x := testIndex(src)

	src.Linked = []string{"paris"}
	syncAll(x, src)
	wantAbsent(t, x, "nginx-svc-west"+z, "nginx-set-0.nginx-svc-west"+z, "web-west"+z, "flat-west"+z, "10.0.96.10.in-addr.arpa.")
	wantAddrs(t, x, "nginx-svc-global"+z, "10.0.0.10", "10.96.1.10")
}

func TestIndexLocalOnly(t *testing.T) {
	src := indextest.NewSource("west")
	src.AddService("east", "default", "api", labels.Gateway, []string{"10.100.0.7"}, httpPort)
	x := testIndex(src)
	wantAddrs(t, x, "api-global"+z, "10.100.0.7")
	wantAbsent(t, x, "api-east"+z) // the local cluster's own names are the kubernetes plugin's
	assert.Equal(t, []string{"api" + z}, targets(x, "_http._tcp.api-global"+z), "SRV of a local ClusterIP Service")
}

func TestIndexNameCollision(t *testing.T) {
	// Service foo-us of west and Service foo of us-west are both
	// foo-us-west.
	src := indextest.NewSource("us-west", "west")
	src.AddService("west", "default", "foo-us", labels.Gateway, []string{"10.100.0.1"}, httpPort)
	src.AddMirror("default", "foo-us-west", "west", "", []string{"10.96.0.1"}, httpPort)
	src.AddService("us-west", "default", "foo", labels.Gateway, []string{"10.100.0.2"}, httpPort)
	x := testIndex(src)

	// The mirror carries cluster-name=west, so only foo-us of west can use
	// it; foo of us-west has no mirror of its own but still claims the
	// name. The group that sorts first (foo) keeps it, whatever the order
	// of the builds.
	for _, order := range [][]string{{"foo", "foo-us"}, {"foo-us", "foo"}} {
		x2 := New(src, Options{Cluster: "east", Zones: []string{"cluster.local."}})
		for _, svc := range order {
			x2.Sync(object.ServiceKey("default", svc))
		}
		assert.Equal(t, "foo", owner(x2, "foo-us-west"+z), "order %v: owner", order)
	}
	require.Equal(t, "foo", owner(x, "foo-us-west"+z), "owner")

	// us-west unexports foo: the name goes to foo-us of west, rebuilt
	// because it lost the name before.
	delete(src.Services, [3]string{"us-west", "default", "foo"})
	again := x.Sync(object.ServiceKey("default", "foo"))
	require.Equal(t, []object.GroupKey{object.ServiceKey("default", "foo-us")}, again, "the groups the sync asked to rebuild")
	syncKeys(x, again...)
	wantAddrs(t, x, "foo-us-west"+z, "10.96.0.1")
}

func TestIndexInvalidNames(t *testing.T) {
	src := indextest.NewSource("west")
	long := strings.Repeat("a", 60) // a-...-west is 65 characters: no mirror name
	src.AddService("west", "default", long, labels.Flat, []string{"10.100.0.1"}, httpPort)
	src.AddSlice("west", "default", long, []object.Port{httpPort}, ep("", "10.1.0.1", true))
	src.AddFlat("west", "default", "ok", ep(strings.Repeat("h", 64), "10.1.0.2", true), ep("", "not-an-ip", true))
	x := testIndex(src)
	require.NotZero(t, x.Len(), "empty index")
	for name := range x.names {
		_, ok := dns.IsDomainName(name)
		assert.True(t, ok, "invalid name %q in the index", name)
		assert.False(t, strings.Contains(name, long) && !strings.Contains(name, "-global"), "name %q of an unmirrorable Service", name)
		assert.False(t, strings.Contains(name, "hhhh"), "name %q of an overlong hostname", name)
	}
	// The pod's name cannot be; its address still answers the Service's.
	wantAddrs(t, x, "ok-west"+z, "10.1.0.2")
}

func TestIndexZones(t *testing.T) {
	src := indextest.Fixture()
	x := built(src, Options{Cluster: "east", Zones: []string{"cluster.local.", "example.org."}})
	wantAddrs(t, x, "web-west.default.svc.cluster.local.", "10.96.0.20", "fd00::20")
	wantAddrs(t, x, "web-west.default.svc.example.org.", "10.96.0.20", "fd00::20")
	// No reverse zone, no PTR names.
	wantAbsent(t, x, "20.0.96.10.in-addr.arpa.")
}

func TestIndexMetrics(t *testing.T) {
	src := indextest.NewSource("west")
	src.AddService("west", "default", "web", labels.Gateway, []string{"10.100.0.1"}, httpPort)
	src.AddMirror("default", "web-west", "west", "", []string{"10.96.0.20", "fd00::20"}, httpPort)
	x := testIndex(src)
	// web-west, web-global and two PTRs (the SRV names below them are
	// made at query time); the records are what the names are made of:
	// web-west's two addresses, one SRV target, two PTR names.
	assert.EqualValues(t, 4, testutil.ToFloat64(indexNames), "index_names")
	for typ, want := range map[string]float64{"A": 1, "AAAA": 1, "SRV": 1, "PTR": 2} {
		assert.Equal(t, want, testutil.ToFloat64(indexRecords.WithLabelValues(typ)), "index_records{type=%s}", typ)
	}
	delete(src.Services, [3]string{"west", "default", "web"})
	x.Sync(object.ServiceKey("default", "web"))
	assert.EqualValues(t, 0, testutil.ToFloat64(indexNames), "index_names after unexport")
	assert.EqualValues(t, 0, testutil.ToFloat64(indexRecords.WithLabelValues("SRV")), "index_records{type=SRV} after unexport")
}

// A per-pod mirror belongs to one headless mirror (its
// headless-mirror-svc-name label): another exported headless Service whose
// endpoint has the same hostname must not answer with it, nor may a mirror
// of another cluster. Linkerd #15200 mixed such mirrors up.
func TestIndexPodMirrorOfAnotherService(t *testing.T) {
	src := indextest.Fixture()
	// Service "other" of west has an endpoint named like nginx-svc's pod
	// whose mirror nginx-set-0-west belongs to nginx-svc-west.
	src.AddService("west", "default", "other", labels.Gateway, nil, httpPort)
	src.AddSlice("west", "default", "other", []object.Port{httpPort}, ep("nginx-set-0", "10.1.0.60", true))
	src.AddMirror("default", "other-west", "west", "", nil, httpPort)
	x := testIndex(src)

	wantAddrs(t, x, "nginx-set-0.nginx-svc-west"+z, "10.96.0.10")
	wantAbsent(t, x, "nginx-set-0.other-west"+z)
	wantAddrs(t, x, "other-west"+z) // exported, nothing routable: NODATA

	// Its own per-pod mirror makes it answer, with its own ClusterIP.
	src.AddMirror("default", "nginx-set-0-west", "west", "other-west", []string{"10.96.0.61"}, httpPort)
	x.Sync(object.ServiceKey("default", "other"))
	x.Sync(object.ServiceKey("default", "nginx-svc"))
	wantAddrs(t, x, "nginx-set-0.other-west"+z, "10.96.0.61")
	wantAbsent(t, x, "nginx-set-0.nginx-svc-west"+z)

	// A mirror labelled for another cluster is never taken.
	src.AddMirror("default", "nginx-set-0-west", "paris", "other-west", []string{"10.96.0.62"}, httpPort)
	x.Sync(object.ServiceKey("default", "other"))
	wantAbsent(t, x, "nginx-set-0.other-west"+z)
}

// A change in one cluster rebuilds that cluster's part of the group only:
// the others, built from the same objects (same resourceVersions), are
// reused as they are, and the new address answers at once.
func TestSyncReusesUnchangedMembers(t *testing.T) {
	src := indextest.NewSource("c0", "c1", "c2")
	for i, c := range []string{"c0", "c1", "c2"} {
		src.AddService(c, "default", "db", labels.Flat, nil, httpPort).Version = "1"
		src.AddSlice(c, "default", "db", []object.Port{httpPort}, ep("db-0", fmt.Sprintf("10.%d.0.1", i), true), ep("db-1", fmt.Sprintf("10.%d.0.2", i), true))
		src.EndpointSlices[[3]string{c, "default", "db"}][0].Version = "1"
	}
	x := testIndex(src)
	k := object.ServiceKey("default", "db")
	before := x.slots[k].g

	key := [3]string{"c1", "default", "db"}
	sl := *src.EndpointSlices[key][0]
	sl.Version = "2"
	sl.Endpoints = slices.Clone(sl.Endpoints)
	sl.Endpoints[1] = ep("db-1", "10.1.0.99", true)
	src.EndpointSlices[key] = []*object.Slice{&sl}
	x.Sync(k)

	after := x.slots[k].g
	for _, c := range []string{"c0", "c1", "c2"} {
		same := before.member(c) == after.member(c)
		assert.Equal(t, c != "c1", same, "member %s reused", c)
	}
	wantAddrs(t, x, "db-1.db-c1"+z, "10.1.0.99")
	wantAddrs(t, x, "db-global"+z, "10.0.0.1", "10.0.0.2", "10.1.0.1", "10.1.0.99", "10.2.0.1", "10.2.0.2")
	// The pod names of the rebuilt part are the old strings.
	a, b := before.member("c1").podNames[0], after.member("c1").podNames[0]
	assert.Same(t, unsafe.StringData(a), unsafe.StringData(b), "pod name %q copied, want the old string reused", b)
}

package index

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"testing"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/index/indextest"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"
)

// BenchmarkLookup measures the index lookup alone.
func BenchmarkLookup(b *testing.B) {
	x := testIndex(indextest.Fixture())
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := x.Find("nginx-set-0.nginx-svc-west" + z); !ok {
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
		x := testIndex(memSource(set.services, set.pods))
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
				if _, ok := x.Find(names[i]); !ok {
					b.Fatal(names[i])
				}
				if i++; i == len(names) {
					i = 0
				}
			}
		})
	}
}

// BenchmarkSync measures rebuilding the 300-pod group (indextest.Pods(150)).
func BenchmarkSync(b *testing.B) {
	src := indextest.Pods(150)
	x := testIndex(src)
	b.ReportAllocs()
	for b.Loop() {
		x.Sync(object.ServiceKey("default", "big"))
	}
}

// tenLinks returns an empty source of the 10 linked clusters c0..c9, and
// their names.
func tenLinks() (*indextest.Source, []string) {
	links := make([]string, 10)
	for c := range links {
		links[c] = fmt.Sprintf("c%d", c)
	}
	return indextest.NewSource(links...), links
}

// memSource is mcbench's mem set in a fake source: services Services in
// each of 10 linked clusters c0..c9, each headless, flat mode, one slice of
// pods named ready endpoints (100 in mcbench), every object with a
// resourceVersion.
func memSource(services, pods int) *indextest.Source {
	f, links := tenLinks()
	for c, cl := range links {
		for s := range services {
			name := fmt.Sprintf("m%d", s)
			f.AddService(cl, "mem", name, labels.Flat, nil, httpPort).Version = "1"
			eps := make([]object.Endpoint, pods)
			for e := range eps {
				n := (c*services+s)*pods + e
				eps[e] = ep(fmt.Sprintf("h%d", e), fmt.Sprintf("10.%d.%d.%d", 200+n>>16, n>>8&255, n&255), true)
			}
			f.AddSlice(cl, "mem", name, []object.Port{httpPort}, eps...)
			f.EndpointSlices[[3]string{cl, "mem", name}][0].Version = "1"
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
				x := testIndex(f)
				after := heapInUse()
				if x.Lookup("h7.m3-c4.mem.svc.cluster.local.") == nil {
					b.Fatal("not built")
				}
				runtime.KeepAlive(f)
				runtime.KeepAlive(x)
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
	f, links := tenLinks()
	for c, cl := range links {
		f.AddService(cl, "default", "big", labels.Flat, nil, httpPort).Version = "1"
		eps := make([]object.Endpoint, 1000)
		for e := range eps {
			eps[e] = ep(fmt.Sprintf("big-%d", e), fmt.Sprintf("10.%d.%d.%d", c, e>>8, e&255), true)
		}
		f.AddSlice(cl, "default", "big", []object.Port{httpPort}, eps...)
		f.EndpointSlices[[3]string{cl, "default", "big"}][0].Version = "1"
	}
	x := testIndex(f)
	k := object.ServiceKey("default", "big")
	key := [3]string{"c3", "default", "big"}
	v := 1
	b.ReportAllocs()
	for b.Loop() {
		old := f.EndpointSlices[key][0]
		sl := *old
		sl.Endpoints = slices.Clone(old.Endpoints)
		v++
		sl.Version = strconv.Itoa(v)
		sl.Endpoints[7].Addresses = []string{fmt.Sprintf("10.3.99.%d", v%250)}
		f.EndpointSlices[key] = []*object.Slice{&sl}
		x.Sync(k)
	}
	if got, _ := indextest.Addrs(x.Lookup("big-7.big-c3" + z)); len(got) != 1 || got[0] != fmt.Sprintf("10.3.99.%d", v%250) {
		b.Fatalf("big-7.big-c3: %v", got)
	}
}

// coldSource has services exported ClusterIP Services (flat mode, one
// ready endpoint) in each of 10 linked clusters.
func coldSource(services int) *indextest.Source {
	f, links := tenLinks()
	for c, cl := range links {
		for s := range services {
			name := fmt.Sprintf("s%d", s)
			n := c*services + s
			f.AddService(cl, "cold", name, labels.Flat, []string{"10.100.0.1"}, httpPort).Version = "1"
			f.AddSlice(cl, "cold", name, []object.Port{httpPort}, ep("", fmt.Sprintf("10.%d.%d.%d", 200+n>>16, n>>8&255, n&255), true))
			f.EndpointSlices[[3]string{cl, "cold", name}][0].Version = "1"
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
		keys := f.Keys()
		x := New(f, Options{Cluster: "east", Zones: []string{"cluster.local."}, PTR: true})
		b.StartTimer()
		for _, k := range keys {
			x.Sync(k)
		}
		b.StopTimer()
		if x.Lookup("s9999-c9.cold.svc.cluster.local.") == nil {
			b.Fatal("not built")
		}
		steady := heapInUse()
		for key, sls := range f.EndpointSlices {
			sl := *sls[0]
			sl.Version = "2"
			f.EndpointSlices[key] = []*object.Slice{&sl}
		}
		for key, s := range f.Services {
			c := *s
			c.Version = "2"
			f.Services[key] = &c
		}
		var mid uint64
		for i, k := range keys {
			x.Sync(k)
			if i == len(keys)/2 {
				mid = heapInUse()
			}
		}
		ratio = float64(mid) / float64(steady)
		runtime.KeepAlive(x)
		b.StartTimer()
	}
	b.ReportMetric(ratio, "relist-heap-ratio")
}

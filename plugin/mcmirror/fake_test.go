package mcmirror

import (
	"slices"
	"testing"

	"github.com/coredns/coredns/plugin/pkg/fall"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"
)

// fakeSource is a source held in maps, for the index and handler tests.
type fakeSource struct {
	links    []string
	services map[[3]string]*object.Service // cluster, ns, name
	slices   map[[3]string][]*object.Slice // cluster, ns, service
	mirrors  map[[2]string]*object.Mirror  // ns, name
	derived  map[[2]string]*object.Derived // ns, import
	members  map[[3]string]*object.Service // federated members: cluster, ns, name
	synced   bool
}

func newFakeSource(links ...string) *fakeSource {
	return &fakeSource{
		links:    links,
		services: map[[3]string]*object.Service{},
		slices:   map[[3]string][]*object.Slice{},
		mirrors:  map[[2]string]*object.Mirror{},
		derived:  map[[2]string]*object.Derived{},
		members:  map[[3]string]*object.Service{},
		synced:   true,
	}
}

func (f *fakeSource) Links() []string { return f.links }
func (f *fakeSource) Service(c, ns, name string) *object.Service {
	return f.services[[3]string{c, ns, name}]
}
func (f *fakeSource) Slices(c, ns, name string) []*object.Slice {
	return f.slices[[3]string{c, ns, name}]
}
func (f *fakeSource) Mirror(ns, name string) *object.Mirror { return f.mirrors[[2]string{ns, name}] }
func (f *fakeSource) HasSynced() bool                       { return f.synced }
func (f *fakeSource) Derived(ns, name string) *object.Derived {
	return f.derived[[2]string{ns, name}]
}
func (f *fakeSource) Member(c, ns, name string) *object.Service {
	if s := f.members[[3]string{c, ns, name}]; s != nil {
		return s
	}
	return f.Service(c, ns, name)
}
func (f *fakeSource) Federations(ns, member string) []string {
	var out []string
	for _, m := range f.mirrors {
		if m.Fed != nil && m.Namespace == ns && slices.Contains(m.Fed.MemberNames(), member) {
			out = append(out, m.Name)
		}
	}
	slices.Sort(out)
	return out
}

// keys returns every group the source holds objects of.
func (f *fakeSource) keys() []object.GroupKey {
	var ks []object.GroupKey
	add := func(k object.GroupKey) {
		if !slices.Contains(ks, k) {
			ks = append(ks, k)
		}
	}
	for k := range f.services {
		add(object.ServiceKey(k[1], k[2]))
	}
	for k := range f.members {
		add(object.ServiceKey(k[1], k[2]))
	}
	for k := range f.slices {
		add(object.ServiceKey(k[1], k[2]))
	}
	for _, m := range f.mirrors {
		if k, ok := object.MirrorGroup(m); ok {
			add(k)
		}
		if k, ok := object.FederatedGroup(m); ok {
			add(k)
		}
	}
	for k := range f.derived {
		add(object.ServiceKey(k[0], k[1]))
	}
	return ks
}

// svc adds an exported Service. ips empty means headless.
func (f *fakeSource) svc(cluster, ns, name string, mode labels.Mode, ips []string, ports ...object.Port) *object.Service {
	s := &object.Service{
		Meta:       object.Meta{Name: name, Namespace: ns},
		Mode:       mode,
		Headless:   len(ips) == 0,
		ClusterIPs: ips,
		Ports:      ports,
	}
	f.services[[3]string{cluster, ns, name}] = s
	return s
}

// slice adds an EndpointSlice of Service ns/svc.
func (f *fakeSource) slice(cluster, ns, svc string, ports []object.Port, eps ...object.Endpoint) {
	k := [3]string{cluster, ns, svc}
	f.slices[k] = append(f.slices[k], &object.Slice{
		Meta:      object.Meta{Name: svc + "-abcde", Namespace: ns},
		Service:   svc,
		Ports:     ports,
		Endpoints: eps,
	})
}

// mirror adds a local mirror Service; ips empty means headless.
func (f *fakeSource) mirror(ns, name, cluster, headlessOf string, ips []string, ports ...object.Port) {
	f.mirrors[[2]string{ns, name}] = &object.Mirror{
		Meta:       object.Meta{Name: name, Namespace: ns},
		Cluster:    cluster,
		HeadlessOf: headlessOf,
		Headless:   len(ips) == 0,
		ClusterIPs: ips,
		Ports:      ports,
	}
}

// imports adds the derived Service of import ns/name: ClusterSetIP with
// ips, Headless without.
func (f *fakeSource) imports(ns, name string, ips []string, ports ...object.Port) *object.Derived {
	d := &object.Derived{
		Meta:       object.Meta{Name: "derived-" + name, Namespace: ns},
		Import:     name,
		Managed:    true,
		Headless:   len(ips) == 0,
		ClusterIPs: ips,
		Ports:      ports,
	}
	f.derived[[2]string{ns, name}] = d
	return d
}

func ep(host, ip string, ready bool) object.Endpoint {
	return object.Endpoint{Hostname: host, Addresses: []string{ip}, Ready: ready}
}

var (
	httpPort = object.Port{Name: "http", Protocol: "tcp", Port: 80}
	dnsPort  = object.Port{Name: "dns", Protocol: "udp", Port: 53}
)

// newTestPlugin returns a plugin over src with every group built.
func newTestPlugin(t testing.TB, src *fakeSource, ttl uint32, fl fall.F) *MCMirror {
	t.Helper()
	m, err := newWithSource(src, Options{
		Zones:   []string{"cluster.local.", "in-addr.arpa.", "ip6.arpa."},
		Cluster: "east",
		TTL:     ttl,
		Fall:    fl,
	})
	if err != nil {
		t.Fatal(err)
	}
	syncAll(m, src)
	return m
}

// syncAll builds every group of src, and the groups those builds ask for.
func syncAll(m *MCMirror, src *fakeSource) {
	queue := src.keys()
	for len(queue) > 0 {
		k := queue[0]
		queue = append(queue[1:], m.index.sync(k)...)
	}
}

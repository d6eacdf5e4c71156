// Package indextest has a Source held in maps, for the tests of the index
// and of the handler, and the fixtures they share.
package indextest

import (
	"slices"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/watch/watchtest"
)

// Source is an index.Source held in maps: a test writes them (or calls the
// Add methods) and has the groups it changed built again.
type Source struct {
	Linked         []string
	Services       map[[3]string]*object.Service // cluster, ns, name
	EndpointSlices map[[3]string][]*object.Slice // cluster, ns, service
	Mirrors        map[[2]string]*object.Mirror  // ns, name
	Imports        map[[2]string]*object.Derived // derived Services: ns, import
	Members        map[[3]string]*object.Service // federated members: cluster, ns, name
	Synced         bool
}

// NewSource returns an empty Source, synced, of the linked clusters links.
func NewSource(links ...string) *Source {
	return &Source{
		Linked:         links,
		Services:       map[[3]string]*object.Service{},
		EndpointSlices: map[[3]string][]*object.Slice{},
		Mirrors:        map[[2]string]*object.Mirror{},
		Imports:        map[[2]string]*object.Derived{},
		Members:        map[[3]string]*object.Service{},
		Synced:         true,
	}
}

// Links implements index.Source.
func (f *Source) Links() []string { return f.Linked }

// Service implements index.Source.
func (f *Source) Service(c, ns, name string) *object.Service {
	return f.Services[[3]string{c, ns, name}]
}

// Slices implements index.Source.
func (f *Source) Slices(c, ns, name string) []*object.Slice {
	return f.EndpointSlices[[3]string{c, ns, name}]
}

// Mirror implements index.Source.
func (f *Source) Mirror(ns, name string) *object.Mirror { return f.Mirrors[[2]string{ns, name}] }

// HasSynced implements index.Source.
func (f *Source) HasSynced() bool { return f.Synced }

// Derived implements index.Source.
func (f *Source) Derived(ns, name string) *object.Derived {
	return f.Imports[[2]string{ns, name}]
}

// Member implements index.Source.
func (f *Source) Member(c, ns, name string) *object.Service {
	if s := f.Members[[3]string{c, ns, name}]; s != nil {
		return s
	}
	return f.Service(c, ns, name)
}

// Federations implements index.Source.
func (f *Source) Federations(ns, member string) []string {
	var out []string
	for _, m := range f.Mirrors {
		if m.Fed != nil && m.Namespace == ns && slices.Contains(m.Fed.MemberNames(), member) {
			out = append(out, m.Name)
		}
	}
	slices.Sort(out)
	return out
}

// Keys returns every group the source holds objects of.
func (f *Source) Keys() []object.GroupKey {
	var ks []object.GroupKey
	add := func(k object.GroupKey) {
		if !slices.Contains(ks, k) {
			ks = append(ks, k)
		}
	}
	for k := range f.Services {
		add(object.ServiceKey(k[1], k[2]))
	}
	for k := range f.Members {
		add(object.ServiceKey(k[1], k[2]))
	}
	for k := range f.EndpointSlices {
		add(object.ServiceKey(k[1], k[2]))
	}
	for _, m := range f.Mirrors {
		if k, ok := object.MirrorGroup(m); ok {
			add(k)
		}
		if k, ok := object.FederatedGroup(m); ok {
			add(k)
		}
	}
	for k := range f.Imports {
		add(object.ServiceKey(k[0], k[1]))
	}
	return ks
}

// AddService adds an exported Service. ips empty means headless.
func (f *Source) AddService(cluster, ns, name string, mode labels.Mode, ips []string, ports ...object.Port) *object.Service {
	s := &object.Service{
		Meta:       object.Meta{Name: name, Namespace: ns},
		Mode:       mode,
		Headless:   len(ips) == 0,
		ClusterIPs: ips,
		Ports:      ports,
	}
	f.Services[[3]string{cluster, ns, name}] = s
	return s
}

// AddSlice adds an EndpointSlice of Service ns/svc.
func (f *Source) AddSlice(cluster, ns, svc string, ports []object.Port, eps ...object.Endpoint) {
	k := [3]string{cluster, ns, svc}
	f.EndpointSlices[k] = append(f.EndpointSlices[k], &object.Slice{
		Meta:      object.Meta{Name: svc + "-abcde", Namespace: ns},
		Service:   svc,
		Ports:     ports,
		Endpoints: eps,
	})
}

// AddFlat adds a headless flat-mode Service of port http/80, and its
// EndpointSlice of eps.
func (f *Source) AddFlat(cluster, ns, name string, eps ...object.Endpoint) {
	f.AddService(cluster, ns, name, labels.Flat, nil, HTTPPort)
	f.AddSlice(cluster, ns, name, []object.Port{HTTPPort}, eps...)
}

// AddMirror adds a local mirror Service; ips empty means headless.
func (f *Source) AddMirror(ns, name, cluster, headlessOf string, ips []string, ports ...object.Port) {
	f.Mirrors[[2]string{ns, name}] = &object.Mirror{
		Meta:       object.Meta{Name: name, Namespace: ns},
		Cluster:    cluster,
		HeadlessOf: headlessOf,
		Headless:   len(ips) == 0,
		ClusterIPs: ips,
		Ports:      ports,
	}
}

// AddImport adds the derived Service of import ns/name: ClusterSetIP with
// ips, Headless without.
func (f *Source) AddImport(ns, name string, ips []string, ports ...object.Port) *object.Derived {
	d := &object.Derived{
		Meta:       object.Meta{Name: "derived-" + name, Namespace: ns},
		Import:     name,
		Managed:    true,
		Headless:   len(ips) == 0,
		ClusterIPs: ips,
		Ports:      ports,
	}
	f.Imports[[2]string{ns, name}] = d
	return d
}

// AddMember adds a federated member; ips empty means headless.
func (f *Source) AddMember(cluster, ns, name string, mode labels.Mode, ips []string, ports ...object.Port) *object.Service {
	s := &object.Service{Meta: object.Meta{Name: name, Namespace: ns}, Exported: true, Mode: mode,
		Headless: len(ips) == 0, ClusterIPs: ips, Ports: ports}
	f.Members[[3]string{cluster, ns, name}] = s
	return s
}

// Federate adds the local federated Service default/name, as Linkerd's
// service mirror makes it, whose annotations list the members remote
// (<svc>@<cluster>,...) and local; an annotation is left out when its
// value is "-".
func (f *Source) Federate(name, remote, local string) {
	m, _ := object.ToMirror(watchtest.FedService(name, remote, local))
	f.Mirrors[[2]string{"default", name}] = m.(*object.Mirror)
}

// EP is a pod's endpoint: its hostname (none: ""), address and readiness.
func EP(host, ip string, ready bool) object.Endpoint {
	return object.Endpoint{Hostname: host, Addresses: []string{ip}, Ready: ready}
}

// Ports of the fixtures.
var (
	HTTPPort   = object.Port{Name: "http", Protocol: "tcp", Port: 80}
	DNSPort    = object.Port{Name: "dns", Protocol: "udp", Port: 53}
	TargetPort = object.Port{Name: "http", Protocol: "tcp", Port: 8080}
)

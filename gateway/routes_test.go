package gateway

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// t0 is when the mirrors of these tests were made; later objects are made
// after it.
var t0 = metav1.NewTime(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))

// made sets a Service's namespace, creation time (t0 plus after) and UID.
func made(svc *corev1.Service, ns string, after time.Duration) *corev1.Service {
	svc.Namespace = ns
	svc.CreationTimestamp = metav1.NewTime(t0.Add(after))
	svc.UID = types.UID("uid-" + ns + "-" + svc.Name + "-" + after.String())
	return svc
}

// controllerSlice is the EndpointSlice the controller writes for the egress
// mirror svc: named as it, owned by its UID, one port per egress port.
func controllerSlice(svc *corev1.Service) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: svc.Namespace, Labels: map[string]string{
			discoveryv1.LabelServiceName: svc.Name, discoveryv1.LabelManagedBy: labels.EndpointSliceManagedBy,
			labels.ManagedBy: labels.ManagedByValue, labels.MirroredService: labels.MirroredServiceValue,
		}, OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID}}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.10"}}},
	}
	for _, p := range labels.ParseEgressPorts(svc.Annotations[labels.EgressPorts]) {
		es.Ports = append(es.Ports, discoveryv1.EndpointPort{Port: new(p), Protocol: new(corev1.ProtocolTCP)})
	}
	return es
}

// deleting marks a Service as being deleted and held by a finalizer.
func deleting(svc *corev1.Service) *corev1.Service {
	now := metav1.NewTime(t0.Add(time.Hour))
	svc.DeletionTimestamp = &now
	svc.Finalizers = []string{"example.com/hold"}
	return svc
}

func TestRoutes(t *testing.T) {
	annotated := func(svc *corev1.Service, annotation string) *corev1.Service {
		svc.Annotations[labels.EgressPorts] = annotation
		return svc
	}
	notOwned := mirrorService("linkerd-west", "linkerd", "", map[int32]int32{80: 30009})
	notOwned.Labels[labels.ManagedBy] = "linkerd"
	noCluster := mirrorService("nocluster-west", "nocluster", "", map[int32]int32{80: 30010})
	delete(noCluster.Labels, labels.ClusterName)
	noRemote := mirrorService("noremote-west", "noremote", "", map[int32]int32{80: 30011})
	delete(noRemote.Labels, labels.RemoteService)
	paris := mirrorService("web-paris", "web", "", map[int32]int32{80: 30012})
	paris.Labels[labels.ClusterName] = "paris"

	for _, tc := range []struct {
		name      string
		mirrors   []*corev1.Service
		routes    map[int32]Route
		conflicts map[int32][]string
	}{
		{name: "none", routes: map[int32]Route{}, conflicts: map[int32][]string{}},
		{
			name:    "a Service and a pod, several ports, several clusters",
			mirrors: []*corev1.Service{mirrorService("web-west", "web", "", map[int32]int32{80: 30001, 443: 30002}), mirrorService("web-0-west", "web", "web-0", map[int32]int32{80: 30003}), paris},
			routes: map[int32]Route{
				30001: {Cluster: "west", Dest: Destination{Namespace: "default", Service: "web", Port: 80}, Mirror: "default/web-west"},
				30002: {Cluster: "west", Dest: Destination{Namespace: "default", Service: "web", Port: 443}, Mirror: "default/web-west"},
				30003: {Cluster: "west", Dest: Destination{Namespace: "default", Service: "web", Host: "web-0", Port: 80}, Mirror: "default/web-0-west"},
				30012: {Cluster: "paris", Dest: Destination{Namespace: "default", Service: "web", Port: 80}, Mirror: "default/web-paris"},
			},
			conflicts: map[int32][]string{},
		},
		{
			name:      "UDP and malformed entries skipped",
			mirrors:   []*corev1.Service{annotated(mirrorService("dns-west", "dns", "", nil), "53/UDP=30004,53/TCP=30005,80/SCTP=30006,x/TCP=30007,81/TCP=0,82/TCP=99999,garbage")},
			routes:    map[int32]Route{30005: {Cluster: "west", Dest: Destination{Namespace: "default", Service: "dns", Port: 53}, Mirror: "default/dns-west"}},
			conflicts: map[int32][]string{},
		},
		{
			name:      "not the controller's, or incomplete: skipped",
			mirrors:   []*corev1.Service{notOwned, noCluster, noRemote},
			routes:    map[int32]Route{},
			conflicts: map[int32][]string{},
		},
		{
			name: "one port, two mirrors of one age: the first by name is served",
			mirrors: []*corev1.Service{
				mirrorService("web-west", "web", "", map[int32]int32{80: 30001, 443: 30002}),
				mirrorService("api-west", "api", "", map[int32]int32{8080: 30001}),
			},
			routes: map[int32]Route{
				30001: {Cluster: "west", Dest: Destination{Namespace: "default", Service: "api", Port: 8080}, Mirror: "default/api-west"},
				30002: {Cluster: "west", Dest: Destination{Namespace: "default", Service: "web", Port: 443}, Mirror: "default/web-west"},
			},
			conflicts: map[int32][]string{30001: {"default/api-west", "default/web-west"}},
		},
		{
			name: "one port, three mirrors: the oldest is served",
			mirrors: []*corev1.Service{
				made(mirrorService("c-west", "c", "", map[int32]int32{80: 30001}), "default", time.Minute),
				made(mirrorService("a-west", "a", "", map[int32]int32{80: 30001}), "default", 2*time.Minute),
				made(mirrorService("b-west", "b", "", map[int32]int32{80: 30001}), "default", 0),
			},
			routes:    map[int32]Route{30001: {Cluster: "west", Dest: Destination{Namespace: "default", Service: "b", Port: 80}, Mirror: "default/b-west"}},
			conflicts: map[int32][]string{30001: {"default/b-west", "default/c-west", "default/a-west"}},
		},
		{
			name: "a UDP port does not conflict with a TCP one",
			mirrors: []*corev1.Service{
				mirrorService("web-west", "web", "", map[int32]int32{80: 30001}),
				annotated(mirrorService("dns-west", "dns", "", nil), "53/UDP=30001"),
			},
			routes:    map[int32]Route{30001: {Cluster: "west", Dest: Destination{Namespace: "default", Service: "web", Port: 80}, Mirror: "default/web-west"}},
			conflicts: map[int32][]string{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := computeRoutes(tc.mirrors, nil, labels.PortRange{})
			assert.Equal(t, tc.routes, tab.routes)
			assert.Equal(t, tc.conflicts, tab.conflicts)
		})
	}
}

// Objects that anyone who may write Services can make, and objects kept
// by a finalizer while being deleted, never take a real mirror's port, and
// never take it offline.
func TestRoutesForgedClaims(t *testing.T) {
	// web-west in shop: the real mirror, made by the controller at t0,
	// with its EndpointSlice.
	real := func() *corev1.Service {
		return made(mirrorService("web-west", "web", "", map[int32]int32{80: 30001}), "shop", 0)
	}
	realRoute := Route{Cluster: "west", Dest: Destination{Namespace: "shop", Service: "web", Port: 80}, Mirror: "shop/web-west"}
	// A Service in the tenant namespace, labelled as a mirror, claiming
	// port 30001, made after (or before) the real one.
	forged := func(after time.Duration) *corev1.Service {
		return made(mirrorService("evil-west", "evil", "", map[int32]int32{80: 30001}), "tenant", after)
	}
	ports := labels.PortRange{First: 30000, Last: 30999}

	for _, tc := range []struct {
		name      string
		mirrors   func() []*corev1.Service
		slices    bool // the controller's EndpointSlice of the real mirror exists
		routes    map[int32]Route
		conflicts map[int32][]string
		ignored   []ignoredClaim
	}{
		{
			name:      "a forged Service made later: the real mirror is served",
			mirrors:   func() []*corev1.Service { return []*corev1.Service{forged(time.Minute), real()} },
			routes:    map[int32]Route{30001: realRoute},
			conflicts: map[int32][]string{30001: {"shop/web-west", "tenant/evil-west"}},
		},
		{
			name:      "an older Service labelled as a mirror later: the mirror with the controller's EndpointSlice is served",
			mirrors:   func() []*corev1.Service { return []*corev1.Service{forged(-time.Hour), real()} },
			slices:    true,
			routes:    map[int32]Route{30001: realRoute},
			conflicts: map[int32][]string{30001: {"shop/web-west", "tenant/evil-west"}},
		},
		{
			name: "a forged Service named as the mirror it claims to be, and a copy of the controller's EndpointSlice owned by another UID",
			mirrors: func() []*corev1.Service {
				f := forged(-time.Hour)
				f.Name, f.Labels[labels.RemoteService] = "web-west", "web"
				return []*corev1.Service{f, real()}
			},
			slices:    true,
			routes:    map[int32]Route{30001: realRoute},
			conflicts: map[int32][]string{30001: {"shop/web-west", "tenant/web-west"}},
		},
		{
			name: "a Service being deleted claims the port: ignored",
			mirrors: func() []*corev1.Service {
				return []*corev1.Service{deleting(made(mirrorService("old-west", "old", "", map[int32]int32{80: 30001, 81: 30002}), "shop", -time.Hour)), real()}
			},
			routes:    map[int32]Route{30001: realRoute},
			conflicts: map[int32][]string{},
			ignored:   []ignoredClaim{{mirror: "shop/old-west", reason: ignoredDeleting, ports: 2}},
		},
		{
			name: "a name that is not the controller's: ignored",
			mirrors: func() []*corev1.Service {
				f := forged(-time.Hour)
				f.Name = "innocent"
				return []*corev1.Service{f, real()}
			},
			routes:    map[int32]Route{30001: realRoute},
			conflicts: map[int32][]string{},
			ignored:   []ignoredClaim{{mirror: "tenant/innocent", reason: ignoredName, ports: 1}},
		},
		{
			name: "a flat-mode mirror with egress ports: ignored",
			mirrors: func() []*corev1.Service {
				f := forged(-time.Hour)
				f.Labels[labels.ModeLabel] = labels.ModeFlat
				return []*corev1.Service{f, real()}
			},
			routes:    map[int32]Route{30001: realRoute},
			conflicts: map[int32][]string{},
			ignored:   []ignoredClaim{{mirror: "tenant/evil-west", reason: ignoredFlat, ports: 1}},
		},
		{
			name: "ports outside the controller's range: ignored, the others served",
			mirrors: func() []*corev1.Service {
				return []*corev1.Service{real(), made(mirrorService("api-west", "api", "", map[int32]int32{80: 30002, 81: 22, 82: 31000}), "shop", 0)}
			},
			routes: map[int32]Route{30001: realRoute,
				30002: {Cluster: "west", Dest: Destination{Namespace: "shop", Service: "api", Port: 80}, Mirror: "shop/api-west"}},
			conflicts: map[int32][]string{},
			ignored:   []ignoredClaim{{mirror: "shop/api-west", reason: ignoredRange, ports: 2}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mirrors := tc.mirrors()
			var eps []*discoveryv1.EndpointSlice
			if tc.slices {
				for _, m := range mirrors {
					if m.Namespace == "shop" {
						eps = append(eps, controllerSlice(m))
					} else {
						// A copy of the real slice, pointed at the
						// forged Service: the wrong UID and place.
						es := controllerSlice(m)
						es.Namespace = "shop"
						es.OwnerReferences[0].UID = "someone-else"
						eps = append(eps, es)
					}
				}
			}
			tab := computeRoutes(mirrors, eps, ports)
			assert.Equal(t, tc.routes, tab.routes)
			assert.Equal(t, tc.conflicts, tab.conflicts)
			assert.Equal(t, tc.ignored, tab.ignored)
		})
	}
}

// One Service whose annotation claims every egress port takes none of the
// 2,768 routes, kept by a finalizer while being deleted or alive (newer
// than every mirror it collides with), in whatever order the informer
// lists them.
func TestRoutesOneServiceClaimsEveryPort(t *testing.T) {
	const n = 2768
	var mirrors []*corev1.Service
	every := map[int32]int32{}
	for i := range n {
		svc := "svc" + strconv.Itoa(i)
		mirrors = append(mirrors, made(mirrorService(svc+"-west", svc, "", map[int32]int32{80: int32(30000 + i)}), "apps", time.Duration(i)*time.Second))
		every[int32(1000+i)] = int32(30000 + i)
	}
	hog := func() *corev1.Service {
		return made(mirrorService("hog-west", "hog", "", every), "tenant", 24*time.Hour)
	}
	for _, tc := range []struct {
		name string
		hog  *corev1.Service
	}{
		{"being deleted", deleting(hog())},
		{"alive, newer than every mirror", hog()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			all := append([]*corev1.Service{tc.hog}, mirrors...)
			rand.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
			tab := computeRoutes(all, nil, labels.PortRange{First: 30000, Last: 32767})
			require.Len(t, tab.routes, n, "every mirror keeps its route")
			for i := range n {
				r := tab.routes[int32(30000+i)]
				require.Equal(t, fmt.Sprintf("apps/svc%d-west", i), r.Mirror)
			}
		})
	}
}

// The table is a function of the objects, not of the order the informer
// lists them in: every gateway replica serves the same mirror on a port.
func TestRoutesDeterministic(t *testing.T) {
	var mirrors []*corev1.Service
	for i := range 20 {
		svc := "s" + strconv.Itoa(i)
		mirrors = append(mirrors, made(mirrorService(svc+"-west", svc, "", map[int32]int32{80: int32(30000 + i%4), 81: int32(30010 + i%3)}), "ns"+strconv.Itoa(i%2), time.Duration(i%5)*time.Minute))
	}
	eps := []*discoveryv1.EndpointSlice{controllerSlice(mirrors[7])}
	want := computeRoutes(mirrors, eps, labels.PortRange{})
	for range 50 {
		rand.Shuffle(len(mirrors), func(i, j int) { mirrors[i], mirrors[j] = mirrors[j], mirrors[i] })
		got := computeRoutes(mirrors, eps, labels.PortRange{})
		require.Equal(t, want.routes, got.routes)
		require.Equal(t, want.conflicts, got.conflicts)
	}
	assert.Equal(t, "ns1/s7-west", want.routes[30003].Mirror, "the corroborated claim wins")
}

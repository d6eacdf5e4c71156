package controller

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

// A ClusterIP export: a ClusterIP mirror with the remote ports, an
// EndpointSlice to the egress at allocated ports, Linkerd's labels; the
// second sync writes nothing.
func TestSyncClusterIP(t *testing.T) {
	f := newFixture(t, fixtureOptions{}, west(
		exported("default", "web", "true", false, tcp("http", 80), corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}),
	))
	writes := f.sync("west/default/web")
	assert.Equal(t, []string{"create services web-west", "create endpointslices web-west"}, writes)

	svc := f.service("default", "web-west")
	require.NotNil(t, svc)
	assert.Equal(t, map[string]string{
		labels.MirroredService: "true", labels.ClusterName: "west", labels.ManagedBy: labels.ManagedByValue, labels.RemoteService: "web", labels.ModeLabel: labels.ModeGateway,
	}, svc.Labels)
	assert.Equal(t, "7", svc.Annotations[labels.RemoteResourceVersion])
	assert.Equal(t, "53/UDP=30001,80/TCP=30000", svc.Annotations[labels.EgressPorts])
	assert.Empty(t, svc.Spec.Selector)
	assert.NotEqual(t, corev1.ClusterIPNone, svc.Spec.ClusterIP)
	require.Len(t, svc.Spec.Ports, 2)

	es := f.slice("default", "web-west")
	require.NotNil(t, es)
	assert.Equal(t, "web-west", es.Labels[discoveryv1.LabelServiceName])
	assert.Equal(t, labels.EndpointSliceManagedBy, es.Labels[discoveryv1.LabelManagedBy])
	require.Len(t, es.Endpoints, 1)
	assert.Equal(t, []string{egressIP.String()}, es.Endpoints[0].Addresses)
	require.Len(t, es.Ports, 2)
	assert.Equal(t, "http", *es.Ports[0].Name)
	assert.Equal(t, int32(30000), *es.Ports[0].Port)
	assert.Equal(t, int32(30001), *es.Ports[1].Port)
	assert.Equal(t, corev1.ProtocolUDP, *es.Ports[1].Protocol)

	assert.Empty(t, f.sync("west/default/web"), "second sync of unchanged state")

	// A port change: the mirror follows, the old egress port is released
	// and the kept one is unchanged.
	f.remote("west", exported("default", "web", "true", false, tcp("http", 8080), corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}))
	assert.Equal(t, []string{"update services web-west", "update endpointslices web-west"}, f.sync("west/default/web"))
	assert.Equal(t, "53/UDP=30001,8080/TCP=30002", f.service("default", "web-west").Annotations[labels.EgressPorts])
	assert.Equal(t, 2, f.c.ports.Len())
	assert.Empty(t, f.sync("west/default/web"))
}

// A headless export with named endpoints: a headless mirror whose
// endpoints are the per-pod mirrors' ClusterIPs under the remote hostnames;
// the per-pod mirrors follow the remote pods.
func TestSyncHeadless(t *testing.T) {
	f := newFixture(t, fixtureOptions{}, west(
		exported("default", "nginx-svc", "true", true, tcp("http", 80)),
		endpoints("default", "nginx-svc", "nginx-set-0", "nginx-set-1", "nginx-set-2!"),
	))
	writes := f.converge("west/default/nginx-svc")
	assert.ElementsMatch(t, []string{
		"create services nginx-svc-west",
		"create services nginx-set-0-west", "create services nginx-set-1-west", "create services nginx-set-2-west",
		"create endpointslices nginx-svc-west",
		"create endpointslices nginx-set-0-west", "create endpointslices nginx-set-1-west", "create endpointslices nginx-set-2-west",
	}, writes)
	assert.Empty(t, f.sync("west/default/nginx-svc"), "second sync of unchanged state")

	mirror := f.service("default", "nginx-svc-west")
	assert.Equal(t, corev1.ClusterIPNone, mirror.Spec.ClusterIP)
	assert.Empty(t, mirror.Annotations[labels.EgressPorts], "the headless mirror has no egress port")
	pod := f.service("default", "nginx-set-1-west")
	assert.Equal(t, "nginx-svc-west", pod.Labels[labels.HeadlessMirrorSvcName])
	assert.Equal(t, "west", pod.Labels[labels.ClusterName])
	assert.Equal(t, "true", pod.Labels[labels.MirroredService])
	assert.Equal(t, "nginx-set-1", pod.Labels[labels.RemoteHostname])
	assert.NotEmpty(t, pod.Annotations[labels.EgressPorts])

	hs := f.slice("default", "nginx-svc-west")
	require.Len(t, hs.Endpoints, 3)
	for i, ep := range hs.Endpoints {
		p := f.service("default", *ep.Hostname+"-west")
		require.NotNil(t, p)
		assert.Equal(t, []string{p.Spec.ClusterIP}, ep.Addresses)
		assert.Equal(t, i < 2, *ep.Conditions.Ready, *ep.Hostname)
	}
	assert.Equal(t, int32(80), *hs.Ports[0].Port)
	assert.Equal(t, 3, f.c.ports.Len())

	// Scale up to 5, then down to 2 (PodGrace is zero here).
	f.remote("west", endpoints("default", "nginx-svc", "nginx-set-0", "nginx-set-1", "nginx-set-2", "nginx-set-3", "nginx-set-4"))
	f.converge("west/default/nginx-svc")
	assert.Len(t, f.slice("default", "nginx-svc-west").Endpoints, 5)
	f.remote("west", endpoints("default", "nginx-svc", "nginx-set-0", "nginx-set-1"))
	f.converge("west/default/nginx-svc")
	assert.Equal(t, []string{"nginx-set-0-west", "nginx-set-1-west", "nginx-svc-west"}, f.serviceNames("default"))
	assert.Len(t, f.slice("default", "nginx-svc-west").Endpoints, 2)
	assert.Nil(t, f.slice("default", "nginx-set-4-west"))
	assert.Equal(t, 2, f.c.ports.Len(), "ports of removed pods are released")

	// Unexport (Linkerd #8475): every mirror goes, per-pod ones included.
	f.remote("west", unlabelled(exported("default", "nginx-svc", "true", true, tcp("http", 80))))
	f.converge("west/default/nginx-svc")
	assert.Empty(t, f.serviceNames("default"))
	assert.Equal(t, 0, f.c.ports.Len())
}

// Linkerd #12499: a pod briefly absent during a rolling update keeps its
// per-pod mirror (and so its ClusterIP) for PodGrace.
func TestSyncPodGrace(t *testing.T) {
	f := newFixture(t, fixtureOptions{podGrace: 30 * time.Second}, west(
		exported("default", "db", "true", true, tcp("http", 80)),
		endpoints("default", "db", "db-0", "db-1"),
	))
	f.converge("west/default/db")
	before := f.service("default", "db-1-west")
	require.NotNil(t, before)

	f.remote("west", endpoints("default", "db", "db-0"))
	f.converge("west/default/db")
	kept := f.service("default", "db-1-west")
	require.NotNil(t, kept, "kept during the grace period")
	assert.Equal(t, before.Spec.ClusterIP, kept.Spec.ClusterIP)
	ep := f.slice("default", "db-west").Endpoints
	require.Len(t, ep, 2)
	assert.False(t, *ep[1].Conditions.Ready, "the absent pod is not ready meanwhile")

	// It comes back within the grace period: same mirror, ready again.
	f.now = f.now.Add(10 * time.Second)
	f.remote("west", endpoints("default", "db", "db-0", "db-1"))
	f.converge("west/default/db")
	assert.Equal(t, before.UID, f.service("default", "db-1-west").UID)
	assert.True(t, *f.slice("default", "db-west").Endpoints[1].Conditions.Ready)

	// Gone for longer than the grace: deleted.
	f.remote("west", endpoints("default", "db", "db-0"))
	f.converge("west/default/db")
	f.now = f.now.Add(31 * time.Second)
	f.converge("west/default/db")
	assert.Nil(t, f.service("default", "db-1-west"))
}

// A headless Service without named endpoints is mirrored as ClusterIP; one
// without ports is not mirrored, and says why.
func TestSyncHeadlessRules(t *testing.T) {
	f := newFixture(t, fixtureOptions{}, west(
		exported("default", "anon", "true", true, tcp("http", 80)),
		endpoints("default", "anon", "", ""),
		exported("default", "portless", "true", true),
	))
	f.converge("west/default/anon")
	svc := f.service("default", "anon-west")
	require.NotNil(t, svc)
	assert.NotEqual(t, corev1.ClusterIPNone, svc.Spec.ClusterIP)
	assert.Equal(t, []string{"anon-west"}, f.serviceNames("default"))
	require.NotNil(t, f.slice("default", "anon-west"))

	assert.Empty(t, f.sync("west/default/portless"))
	assert.Nil(t, f.service("default", "portless-west"))
	ev := f.drainEvents()
	require.Len(t, ev, 1)
	assert.Contains(t, ev[0], ReasonHeadlessWithoutPorts)
}

// Flat mode: a headless mirror Service only, no EndpointSlice, no egress
// port, no per-pod Service.
func TestSyncFlat(t *testing.T) {
	f := newFixture(t, fixtureOptions{}, west(
		exported("default", "flat", "remote-discovery", true, tcp("http", 80)),
		endpoints("default", "flat", "flat-0", "flat-1"),
	))
	assert.Equal(t, []string{"create services flat-west"}, f.sync("west/default/flat"))
	svc := f.service("default", "flat-west")
	assert.Equal(t, corev1.ClusterIPNone, svc.Spec.ClusterIP)
	assert.Equal(t, labels.ModeFlat, svc.Labels[labels.ModeLabel])
	assert.Empty(t, svc.Annotations[labels.EgressPorts])
	assert.Nil(t, f.slice("default", "flat-west"))
	assert.Empty(t, f.sync("west/default/flat"))
	assert.Equal(t, 0, f.c.ports.Len())
}

// A name taken by an object the controller did not make is left alone,
// with an Event on it; when it goes, the mirror is made.
func TestSyncForeignObject(t *testing.T) {
	foreign := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-west", Labels: map[string]string{"app": "mine"}},
		Spec:       corev1.ServiceSpec{ClusterIP: "10.96.9.9", Selector: map[string]string{"app": "mine"}, Ports: []corev1.ServicePort{tcp("x", 1)}},
	}
	// A Linkerd mirror has Linkerd's labels but not ours: foreign too.
	linkerd := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "api-west", Labels: map[string]string{labels.MirroredService: "true", labels.ClusterName: "west"}},
		Spec:       corev1.ServiceSpec{ClusterIP: "10.96.9.8", Ports: []corev1.ServicePort{tcp("x", 1)}},
	}
	headless := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "db-west"},
		Spec:       corev1.ServiceSpec{ClusterIP: "10.96.9.7", Ports: []corev1.ServicePort{tcp("x", 1)}},
	}
	f := newFixture(t, fixtureOptions{local: []runtime.Object{foreign, linkerd, headless}}, west(
		exported("default", "web", "true", false, tcp("http", 80)), exported("default", "api", "true", false, tcp("http", 80)),
		exported("default", "db", "true", true, tcp("http", 80)), endpoints("default", "db", "db-0"),
	))
	assert.Empty(t, f.sync("west/default/web"))
	assert.Empty(t, f.sync("west/default/api"))
	assert.Empty(t, f.sync("west/default/db"), "no per-pod mirrors when the mirror's name is taken")
	ev := f.drainEvents()
	require.Len(t, ev, 3)
	for _, e := range ev {
		assert.Contains(t, e, ReasonNameTaken)
	}
	assert.Equal(t, foreign.Spec, f.service("default", "web-west").Spec)
	assert.Equal(t, foreign.Labels, f.service("default", "web-west").Labels)
	assert.Equal(t, linkerd.Labels, f.service("default", "api-west").Labels)
	assert.Equal(t, []string{"api-west", "db-west", "web-west"}, f.serviceNames("default"))
	assert.Equal(t, 0, f.c.ports.Len(), "no port for a mirror that cannot exist")
	_, wanted := f.c.wanted["default/web-west"]
	assert.True(t, wanted)

	require.NoError(t, f.local.CoreV1().Services("default").Delete(f.ctx, "web-west", metav1.DeleteOptions{}))
	f.waitCaches()
	f.converge("west/default/web")
	assert.Equal(t, labels.ManagedByValue, f.service("default", "web-west").Labels[labels.ManagedBy])
}

// Linkerd #15200: same-named headless Services in two namespaces keep
// their per-pod mirrors apart.
func TestSyncSameNameOtherNamespace(t *testing.T) {
	f := newFixture(t, fixtureOptions{local: []runtime.Object{namespace("a"), namespace("b")}}, west(
		exported("a", "db", "true", true, tcp("http", 80)), endpoints("a", "db", "db-0", "db-1"),
		exported("b", "db", "true", true, tcp("http", 80)), endpoints("b", "db", "db-0"),
	))
	f.convergeAll("west/a/db", "west/b/db")
	assert.Equal(t, []string{"db-0-west", "db-1-west", "db-west"}, f.serviceNames("a"))
	assert.Equal(t, []string{"db-0-west", "db-west"}, f.serviceNames("b"))
	assert.Empty(t, f.sync("west/a/db"))
	assert.Empty(t, f.sync("west/b/db"))

	f.remote("west", unlabelled(exported("b", "db", "true", true, tcp("http", 80))))
	f.convergeAll("west/b/db", "west/a/db")
	assert.Empty(t, f.serviceNames("b"))
	assert.Equal(t, []string{"db-0-west", "db-1-west", "db-west"}, f.serviceNames("a"), "the other namespace's mirrors stay")
}

// Names longer than a DNS label are refused with a reason, not truncated.
func TestSyncNameTooLong(t *testing.T) {
	long := strings.Repeat("a", 60)
	f := newFixture(t, fixtureOptions{}, west(
		exported("default", long, "true", false, tcp("http", 80)),
		exported("default", "db", "true", true, tcp("http", 80)),
		endpoints("default", "db", "db-0", strings.Repeat("p", 60)),
	))
	assert.Empty(t, f.sync("west/default/"+long))
	assert.Contains(t, f.drainEvents()[0], ReasonNameTooLong)
	f.converge("west/default/db")
	assert.Equal(t, []string{"db-0-west", "db-west"}, f.serviceNames("default"), "the pod with a long name is left out")
	assert.Contains(t, f.drainEvents()[0], ReasonNameTooLong)
}

// A missing namespace: an Event, unless namespaces may be created.
func TestSyncNamespace(t *testing.T) {
	objs := west(exported("shop", "web", "true", false, tcp("http", 80)))
	f := newFixture(t, fixtureOptions{}, objs)
	assert.Empty(t, f.sync("west/shop/web"))
	assert.Contains(t, f.drainEvents()[0], ReasonNamespaceMissing)

	f = newFixture(t, fixtureOptions{createNamespaces: true}, objs)
	writes := f.converge("west/shop/web")
	assert.Equal(t, "create namespaces shop", writes[0])
	ns, err := f.local.CoreV1().Namespaces().Get(f.ctx, "shop", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, labels.ManagedByValue, ns.Labels[labels.ManagedBy])
	assert.NotNil(t, f.service("shop", "web-west"))
}

// A full port range is an Event and a retry when a port is freed, not a
// crash.
func TestSyncPortsExhausted(t *testing.T) {
	f := newFixture(t, fixtureOptions{ports: PortRange{First: 40000, Last: 40000}}, west(
		exported("default", "one", "true", false, tcp("http", 80)), exported("default", "two", "true", false, tcp("http", 80)),
	))
	f.convergeAll("west/default/one", "west/default/two")
	assert.Contains(t, strings.Join(f.drainEvents(), "\n"), ReasonPortsExhausted)
	assert.NotNil(t, f.service("default", "two-west"), "the Service exists")
	assert.Nil(t, f.slice("default", "two-west"), "but has no egress until a port is free")
	assert.True(t, f.c.starved["west/default/two"])

	f.deleteRemoteService("west", "default", "one")
	f.convergeAll("west/default/one", "west/default/two")
	assert.Equal(t, "80/TCP=40000", f.service("default", "two-west").Annotations[labels.EgressPorts])
	assert.NotNil(t, f.slice("default", "two-west"))
}

// A restarted controller reads the ports back from the mirrors: same
// ports, no writes.
func TestRestartKeepsPorts(t *testing.T) {
	remote := egressRemote()
	f := newFixture(t, fixtureOptions{}, remote)
	// Allocate in one order...
	f.convergeAll("west/default/db", "west/default/web")
	before := map[string]string{}
	for _, name := range f.serviceNames("default") {
		before[name] = f.service("default", name).Annotations[labels.EgressPorts]
	}

	// ...and restart, syncing in the other order.
	g := newFixture(t, fixtureOptions{local: f.mirrorState()}, remote)
	assert.Empty(t, g.sync("west/default/web"))
	assert.Empty(t, g.sync("west/default/db"))
	for name, ports := range before {
		assert.Equal(t, ports, g.service("default", name).Annotations[labels.EgressPorts], name)
	}
	assert.Equal(t, slices.Sorted(maps.Keys(f.c.ports.byOwner)), slices.Sorted(maps.Keys(g.c.ports.byOwner)))
}

// Mirrors of a cluster that is no longer linked are swept, after the
// grace period; someone else's objects stay.
func TestSweepUnlinked(t *testing.T) {
	f := newFixture(t, fixtureOptions{}, west(exported("default", "web", "true", false, tcp("http", 80))))
	f.converge("west/default/web")
	require.NotNil(t, f.service("default", "web-west"))
	f.c.Remove("west")
	assert.Empty(t, f.sync("west/default/web"), "kept during the link removal grace")
	f.now = f.now.Add(2 * time.Minute)
	assert.Equal(t, []string{"delete endpointslices web-west", "delete services web-west"}, f.sync("west/default/web"))
	assert.Empty(t, f.serviceNames("default"))
	assert.Equal(t, 0, f.c.ports.Len())
}

// The sweep enqueues every key the controller owns objects for, and those
// of the linked clusters.
func TestSweepKeys(t *testing.T) {
	orphan := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "old-gone", Labels: mirrorLabels("gone", "old")}}
	f := newFixture(t, fixtureOptions{local: []runtime.Object{orphan}}, west(exported("default", "web", "true", false, tcp("http", 80))))
	assert.Equal(t, 2, f.c.sweep())
	assert.Equal(t, []string{"delete services old-gone"}, f.sync("gone/default/old"))
}

func TestNewValidates(t *testing.T) {
	for _, addr := range []string{"127.0.0.1", "::1", "0.0.0.0", "169.254.1.1"} {
		_, err := New(Options{Cluster: "east", Client: fake.NewClientset(), EgressAddress: netip.MustParseAddr(addr), EgressPorts: PortRange{First: 1, Last: 2}})
		assert.Error(t, err, addr)
	}
	_, err := New(Options{Cluster: "global", Client: fake.NewClientset(), EgressAddress: egressIP, EgressPorts: PortRange{First: 1, Last: 2}})
	assert.Error(t, err)
	for _, r := range []PortRange{{}, {First: 0, Last: 10}} {
		_, err := New(Options{Cluster: "east", Client: fake.NewClientset(), EgressAddress: egressIP, EgressPorts: r})
		assert.EqualError(t, err, "controller: no egress port range", "%#v: the zero range would contain every port", r)
	}
}

// A headless mirror stays headless when its pods are all gone for a while
// (a scale to zero); a mode switch follows the export label.
func TestSyncShapeStability(t *testing.T) {
	f := newFixture(t, fixtureOptions{headlessGrace: time.Hour}, west(
		exported("default", "db", "true", true, tcp("http", 80)), endpoints("default", "db", "db-0"),
	))
	f.converge("west/default/db")
	uid := f.service("default", "db-west").UID
	f.remote("west", endpoints("default", "db"))
	writes := f.converge("west/default/db")
	assert.NotContains(t, writes, "delete services db-west", "not recreated as a ClusterIP mirror")
	assert.Equal(t, corev1.ClusterIPNone, f.service("default", "db-west").Spec.ClusterIP)
	assert.Equal(t, uid, f.service("default", "db-west").UID)
	assert.Equal(t, []string{"db-west"}, f.serviceNames("default"))

	// To flat mode: the same headless Service, relabelled; its slice goes.
	f.remote("west", exported("default", "db", "remote-discovery", true, tcp("http", 80)))
	f.converge("west/default/db")
	assert.Equal(t, uid, f.service("default", "db-west").UID)
	assert.Equal(t, labels.ModeFlat, f.service("default", "db-west").Labels[labels.ModeLabel])
	assert.Nil(t, f.slice("default", "db-west"))

	// Back to gateway mode without named endpoints: a ClusterIP mirror.
	f.remote("west", exported("default", "db", "true", true, tcp("http", 80)))
	f.converge("west/default/db")
	svc := f.service("default", "db-west")
	assert.NotEqual(t, corev1.ClusterIPNone, svc.Spec.ClusterIP)
	assert.NotEmpty(t, svc.Annotations[labels.EgressPorts])
}

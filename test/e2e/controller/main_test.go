// Package controller_test runs `coredns-mc controller` against real API
// servers: east is the local cluster; west and paris run StatefulSets
// (kube-controller-manager and KWOK) and export them. East and west are
// dual-stack API servers (IPv4 primary), for dualstack_test.go: a Service
// that asks for nothing stays single-stack IPv4, so the other tests see
// what a single-stack cluster gives them.
package controller_test

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var env = harness.New(harness.Options{Clusters: []harness.ClusterOptions{
	{Name: "east", MCS: true, DualStack: true}, {Name: "west", Workloads: true, MCS: true, DualStack: true},
	{Name: "paris", Workloads: true, MCS: true},
}})

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// egress is the gateway egress address the mirrors point at: any address
// the API server accepts as an endpoint will do, nothing dials it here.
const egress = harness.EgressAddress

const (
	wait = 60 * time.Second
	tick = 100 * time.Millisecond
)

// eastController is east's `coredns-mc controller`, named name, linked to
// west and paris with their link credentials, with short graces (pods 2s,
// removed links 1s) and the flags extra.
func eastController(name string, extra ...string) harness.FleetOptions {
	return harness.FleetOptions{Local: "east", Remotes: []string{"west", "paris"}, Parts: harness.FleetController,
		Controller: harness.ControllerOptions{Name: name, Args: append([]string{"--pod-grace", "2s", "--link-removal-grace", "1s"}, extra...)}}
}

// startController starts eastController(name, extra...) for the test t.
func startController(t *testing.T, name string, extra ...string) *harness.Process {
	t.Helper()
	return env.StartFleet(t, eastController(name, extra...)).Controller.Process
}

// namespace creates ns in the given clusters; it is deleted again from the
// clusters that run kube-controller-manager.
func namespace(t *testing.T, ns string, clusters ...string) {
	t.Helper()
	var cs []*harness.Cluster
	for _, name := range clusters {
		cs = append(cs, env.Cluster(name))
	}
	env.TempNamespace(t, ns, cs...)
}

// setUp begins test t: the environment's logs printed if it fails, and
// namespace ns in clusters. It returns the test's context.
func setUp(t *testing.T, ns string, clusters ...string) context.Context {
	t.Helper()
	env.LogOnFailure(t)
	namespace(t, ns, clusters...)
	return context.Background()
}

// events lists the Events of ns in cluster.
func events(c require.TestingT, cluster, ns string) []corev1.Event {
	list, err := env.Cluster(cluster).Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(c, err)
	return list.Items
}

// hasEvent reports whether cluster has, in ns, an Event that match accepts.
func hasEvent(c require.TestingT, cluster, ns string, match func(corev1.Event) bool) bool {
	return slices.ContainsFunc(events(c, cluster, ns), match)
}

// statefulSet is a headless Service svc and a StatefulSet of replicas
// pods behind it; export is the mirror.linkerd.io/exported value ("" for
// none).
func statefulSet(ns, svc string, replicas int, export string) string {
	return harness.StatefulSet(ns, svc, svc+"-set", replicas, exported(export))
}

// clusterIPService is a ClusterIP Service (no pods needed), exported as
// statefulSet's.
func clusterIPService(ns, svc string, port int, export string) string {
	return harness.ClusterIPService(ns, svc, port, exported(export))
}

// exported is the export label of value export, none when empty.
func exported(export string) map[string]string {
	if export == "" {
		return nil
	}
	return map[string]string{labels.Exported: export}
}

func names[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// mirrors returns east's mirror Services of ns, by name.
func mirrors(t require.TestingT, ns string) map[string]corev1.Service {
	m, err := env.Cluster("east").Mirrors(context.Background(), ns)
	require.NoError(t, err)
	return m
}

// service reads Service ns/name of cluster.
func service(t require.TestingT, cluster *harness.Cluster, ns, name string) *corev1.Service {
	s, err := cluster.Client.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return s
}

// podMirrors lists the per-pod mirror names of headless mirror hm in ns.
func podMirrors(m map[string]corev1.Service, hm string) []string {
	var out []string
	for n, s := range m {
		if s.Labels[labels.HeadlessMirrorSvcName] == hm {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

func ordinals(prefix, cluster string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s-%d-%s", prefix, i, cluster))
	}
	slices.Sort(out)
	return out
}

// assertConsistent checks, for every mirror of ns, what the DNS plugin
// and the gateway rely on: a per-pod or ClusterIP mirror has a ClusterIP
// from east's range and an EndpointSlice to the egress at its recorded
// ports; a headless mirror's EndpointSlice lists its per-pod mirrors'
// ClusterIPs under their hostnames.
func assertConsistent(c *assert.CollectT, ctx context.Context, ns string, m map[string]corev1.Service) {
	east := env.Cluster("east")
	list, err := east.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelManagedBy + "=" + labels.EndpointSliceManagedBy})
	require.NoError(c, err)
	// A headless mirror of many pods has several slices; while a mirror
	// changes shape, its slice may still be of the old shape for a moment:
	// the check fails (and EventuallyWithT retries) rather than panics.
	byService := map[string][]discoveryv1.EndpointSlice{}
	for _, s := range list.Items {
		name := s.Labels[discoveryv1.LabelServiceName]
		byService[name] = append(byService[name], s)
	}
	for name, s := range m {
		all, ok := byService[name]
		if !assert.True(c, ok, "%s has an EndpointSlice", name) {
			continue
		}
		if s.Spec.ClusterIP != corev1.ClusterIPNone {
			ip, err := netip.ParseAddr(s.Spec.ClusterIP)
			require.NoError(c, err)
			assert.True(c, east.ServiceCIDR.Contains(ip), "%s: ClusterIP %s in %s", name, ip, east.ServiceCIDR)
			require.Len(c, all, 1, "%s: one slice", name)
			es := all[0]
			require.Len(c, es.Endpoints, 1)
			assert.Equal(c, []string{egress}, es.Endpoints[0].Addresses)
			assertSlicePorts(c, s, es)
			continue
		}
		var want, got []string
		for _, p := range m {
			if p.Labels[labels.HeadlessMirrorSvcName] == name {
				want = append(want, p.Labels[labels.RemoteHostname]+"="+p.Spec.ClusterIP)
			}
		}
		for _, es := range all {
			for _, ep := range es.Endpoints {
				if !assert.NotNil(c, ep.Hostname, "%s: a headless mirror's endpoints have hostnames", name) ||
					!assert.Len(c, ep.Addresses, 1, "%s: one address per endpoint", name) {
					continue
				}
				got = append(got, *ep.Hostname+"="+ep.Addresses[0])
			}
		}
		assert.ElementsMatch(c, want, got, "%s: endpoints are the per-pod mirrors", name)
	}
}

// waitMirrors waits until east's mirrors of ns are those named want, each
// as the DNS plugin and the gateway need it (assertConsistent), and
// returns them.
func waitMirrors(t *testing.T, ns string, want ...string) map[string]corev1.Service {
	t.Helper()
	var m map[string]corev1.Service
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m = mirrors(c, ns)
		assert.Equal(c, want, names(m))
		assertConsistent(c, context.Background(), ns, m)
	}, wait, tick)
	return m
}

// assertSlicePorts checks that the ports of es, the EndpointSlice of
// mirror s, are the egress ports recorded on s.
func assertSlicePorts(c *assert.CollectT, s corev1.Service, es discoveryv1.EndpointSlice) {
	var got, want []string
	for _, p := range es.Ports {
		got = append(got, fmt.Sprint(*p.Port))
	}
	for _, kv := range strings.Split(s.Annotations[labels.EgressPorts], ",") {
		_, p, _ := strings.Cut(kv, "=")
		want = append(want, p)
	}
	assert.ElementsMatch(c, want, got, "%s: slice ports are the recorded egress ports", s.Name)
}

// assertPortsUnique checks that no egress port is given twice in east.
func assertPortsUnique(c *assert.CollectT, ctx context.Context) {
	all, err := env.Cluster("east").EgressPorts(ctx, "")
	require.NoError(c, err)
	harness.AssertEgressPortsUnique(c, all)
}

// syncedRE matches the line that ends each sync (controller --v 4).
var syncedRE = regexp.MustCompile(`"Synced".* key="([^"]+)".* writes=(\d+)`)

// syncedAfter returns, by key, the write counts of the syncs the process
// logged after offset.
func syncedAfter(t require.TestingT, p *harness.Process, offset int) map[string][]int {
	b := p.Log(t)
	out := map[string][]int{}
	if offset > len(b) {
		return out
	}
	for _, m := range syncedRE.FindAllStringSubmatch(b[offset:], -1) {
		n, err := strconv.Atoi(m[2])
		require.NoError(t, err)
		out[m[1]] = append(out[m[1]], n)
	}
	return out
}

// waitSynced waits until the process has logged, after offset, a sync of
// every key that wrote nothing (positive evidence that the work was
// seen and had nothing to do), checks it is still running, and returns
// every sync logged after offset.
func waitSynced(t *testing.T, p *harness.Process, offset int, keys ...string) map[string][]int {
	t.Helper()
	var got map[string][]int
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got = syncedAfter(c, p, offset)
		for _, k := range keys {
			assert.Contains(c, got[k], 0, "a sync of %s that wrote nothing", k)
		}
	}, wait, tick)
	env.RequireAlive(t, p)
	return got
}

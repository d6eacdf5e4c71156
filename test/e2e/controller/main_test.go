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
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/controller"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// startController starts `coredns-mc controller` in east, linked to west
// and paris (with their admins' kubeconfigs) unless extra says
// "--no-static-links"; extra holds more flags.
func startController(t *testing.T, name string, extra ...string) *harness.Process {
	t.Helper()
	o := harness.ControllerOptions{Name: name, Args: append([]string{"--pod-grace", "2s", "--link-removal-grace", "1s"},
		slices.DeleteFunc(slices.Clone(extra), func(s string) bool { return s == "--no-static-links" })...)}
	if !slices.Contains(extra, "--no-static-links") {
		o.Links = []harness.Link{{Name: "west", Kubeconfig: env.Cluster("west").Kubeconfig},
			{Name: "paris", Kubeconfig: env.Cluster("paris").Kubeconfig}}
	}
	return env.StartController(t, env.Cluster("east"), o).Process
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

// statefulSet is a headless Service svc and a StatefulSet of replicas
// pods behind it; export is the mirror.linkerd.io/exported value ("" for
// none).
func statefulSet(ns, svc string, replicas int, export string) string {
	lbl := map[string]string{}
	if export != "" {
		lbl[labels.Exported] = export
	}
	return harness.StatefulSet(ns, svc, svc+"-set", replicas, lbl)
}

// clusterIPService is a ClusterIP Service (no pods needed).
func clusterIPService(ns, svc string, port int, export string) string {
	lbl := ""
	if export != "" {
		lbl = fmt.Sprintf("labels: {%s: %q}", labels.Exported, export)
	}
	return fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata: {name: %[2]s, namespace: %[1]s, %[4]s}
spec:
  selector: {app: %[2]s}
  ports: [{name: http, port: %[3]d}]
`, ns, svc, port, lbl)
}

func names[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
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
	list, err := east.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelManagedBy + "=" + controller.EndpointSliceManagedBy})
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
			var got []string
			for _, p := range es.Ports {
				got = append(got, fmt.Sprint(*p.Port))
			}
			var want []string
			for _, kv := range strings.Split(s.Annotations[controller.EgressPorts], ",") {
				_, p, _ := strings.Cut(kv, "=")
				want = append(want, p)
			}
			assert.ElementsMatch(c, want, got, "%s: slice ports are the recorded egress ports", name)
			continue
		}
		var want, got []string
		for _, p := range m {
			if p.Labels[labels.HeadlessMirrorSvcName] == name {
				want = append(want, p.Labels[controller.RemoteHostname]+"="+p.Spec.ClusterIP)
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

// assertPortsUnique checks that no egress port is given twice in east.
func assertPortsUnique(c *assert.CollectT, ctx context.Context) {
	all, err := env.Cluster("east").EgressPorts(ctx, "")
	require.NoError(c, err)
	harness.AssertEgressPortsUnique(c, all)
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

// logSize is where the process's log ends now: later lines are after it.
func logSize(t *testing.T, p *harness.Process) int {
	t.Helper()
	b, err := os.ReadFile(p.LogPath)
	require.NoError(t, err)
	return len(b)
}

// syncedRE matches the line that ends each sync (controller --v 4).
var syncedRE = regexp.MustCompile(`"Synced".* key="([^"]+)".* writes=(\d+)`)

// syncedAfter returns, by key, the write counts of the syncs the process
// logged after offset.
func syncedAfter(t require.TestingT, p *harness.Process, offset int) map[string][]int {
	b, err := os.ReadFile(p.LogPath)
	require.NoError(t, err)
	out := map[string][]int{}
	if offset > len(b) {
		return out
	}
	for _, m := range syncedRE.FindAllStringSubmatch(string(b[offset:]), -1) {
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

// linkSecret links east to remote through a link Secret in secretNS, with
// the kubeconfig of deploy/remote-link.yaml's ServiceAccount (what
// `coredns-mc link` sets up); the Secret is deleted when the test ends.
func linkSecret(t *testing.T, remote *harness.Cluster, secretNS string) *corev1.Secret {
	t.Helper()
	ctx := context.Background()
	kc, err := remote.LinkKubeconfig(ctx)
	require.NoError(t, err)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: labels.LinkSecretNamePrefix + remote.Name, Namespace: secretNS,
			Labels: map[string]string{labels.LinkClusterName: remote.Name}},
		Type: labels.LinkSecretType,
		Data: map[string][]byte{labels.LinkSecretKey: kc},
	}
	secrets := env.Cluster("east").Client.CoreV1().Secrets(secretNS)
	secret, err = secrets.Create(ctx, secret, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = secrets.Delete(context.Background(), secret.Name, metav1.DeleteOptions{}) })
	return secret
}

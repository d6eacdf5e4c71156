package walkthrough_test

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// TestWalkthrough follows the walkthrough in both modes, from east's client
// pod, with the real curl and a Go client, by name; with either source of
// east's DNS.
func TestWalkthrough(t *testing.T) {
	env.LogOnFailure(t)
	fleet := startFleet(t)
	for _, source := range []string{"direct", "import"} {
		t.Run(source, func(t *testing.T) {
			dns := startDNS(t, fleet, source)
			walkthrough(t, append(fleet.Processes(), dns.Process))
		})
	}
}

// walkthrough follows the walkthrough in both modes while procs, east's
// DNS among them, run.
func walkthrough(t *testing.T, procs []*harness.Process) {
	for _, m := range []mode{gatewayMode, flatMode} {
		t.Run(m.name, func(t *testing.T) {
			require.NoError(t, env.RoutePodsBetweenClusters(m.flat))
			waitPeers(t, m, map[string]int{"east": replicas, "west": replicas, "paris": replicas})

			t.Run("curl reaches one remote pod by name", func(t *testing.T) {
				for _, c := range remotes {
					for _, name := range []string{
						fmt.Sprintf("nginx-set-0.nginx-svc-%s.%s", c, m.ns),
						fmt.Sprintf("nginx-set-0.nginx-svc-%s.%s.svc.cluster.local", c, m.ns),
					} {
						out, err := curl(t.Context(), "http://"+name+"/")
						require.NoError(t, err)
						assert.Equal(t, harness.Identity(c, m.ns, "nginx-set-0"), out, name)
					}
				}
			})
			t.Run("a Go client reaches one remote pod by name", func(t *testing.T) {
				for _, c := range remotes {
					name := fmt.Sprintf("nginx-set-2.nginx-svc-%s.%s.svc.cluster.local", c, m.ns)
					out, err := env.Cluster("east").GoFetch(t.Context(), "default", "client", "http://"+name+"/")
					require.NoError(t, err)
					assert.Equal(t, harness.Identity(c, m.ns, "nginx-set-2"), out, name)
				}
			})
			t.Run("plain TCP works as HTTP does", func(t *testing.T) {
				for _, c := range remotes {
					name := fmt.Sprintf("nginx-set-1.nginx-svc-%s.%s:%d", c, m.ns, echoPort)
					out, err := env.Cluster("east").GoFetch(t.Context(), "default", "client", "tcp://"+name)
					require.NoError(t, err)
					assert.Equal(t, harness.Identity(c, m.ns, "nginx-set-1"), out, name)
				}
			})
			t.Run("the Service spreads over the remote pods", func(t *testing.T) {
				seen := map[string]int{}
				for range 30 {
					out, err := curl(t.Context(), fmt.Sprintf("http://nginx-svc-west.%s/", m.ns))
					require.NoError(t, err)
					seen[out]++
				}
				var want []string
				for i := range replicas {
					want = append(want, harness.Identity("west", m.ns, fmt.Sprintf("nginx-set-%d", i)))
				}
				assert.ElementsMatch(t, want, slices.Sorted(maps.Keys(seen)), "30 requests to nginx-svc-west reach every west pod, and only them: %v", seen)
			})
			t.Run("the ClusterSetIP reaches the pods of every cluster, the local one included", func(t *testing.T) {
				ip := clusterSetIP(t, m.ns, "web")
				seen := map[string]int{}
				for i := 0; i < 300 && len(seen) < 3; i++ {
					out, err := curl(t.Context(), "http://"+ip+"/")
					require.NoError(t, err)
					c, _, ok := strings.Cut(strings.TrimPrefix(out, "hello from "), "/")
					require.True(t, ok, "answer %q", out)
					seen[c]++
				}
				assert.ElementsMatch(t, []string{"east", "west", "paris"}, slices.Sorted(maps.Keys(seen)), "requests to the ClusterSetIP %s of web reach every cluster: %v", ip, seen)
			})
			t.Run("the peer finder connects to all nine peers", func(t *testing.T) {
				peers := findPeers(t, m)
				assert.Equal(t, map[string]int{"east": replicas, "west": replicas, "paris": replicas}, countByCluster(peers))
			})
			if !m.flat {
				t.Run("another cluster's pod IPs are not routed", func(t *testing.T) {
					ip := podIP(t, "west", m.ns, "nginx-set-0")
					_, err := curl(t.Context(), "http://"+ip+"/")
					require.Error(t, err, "in gateway mode only the gateways cross clusters")
					out, err := curl(t.Context(), fmt.Sprintf("http://nginx-set-0.nginx-svc-west.%s/", m.ns))
					require.NoError(t, err, "while the name, through the gateway, works")
					assert.Equal(t, harness.Identity("west", m.ns, "nginx-set-0"), out)
				})
			} else {
				t.Run("another cluster's pod IPs are routed", func(t *testing.T) {
					out, err := curl(t.Context(), "http://"+podIP(t, "west", m.ns, "nginx-set-0")+"/")
					require.NoError(t, err)
					assert.Equal(t, harness.Identity("west", m.ns, "nginx-set-0"), out)
				})
			}
			t.Run("scaled up, the new peers answer", func(t *testing.T) {
				west := env.Cluster("west")
				require.NoError(t, west.Scale(t.Context(), m.ns, "nginx-set", 5))
				t.Cleanup(func() {
					require.NoError(t, west.Scale(context.Background(), m.ns, "nginx-set", replicas))
					waitPeers(t, m, map[string]int{"east": replicas, "west": replicas, "paris": replicas})
				})
				waitPeers(t, m, map[string]int{"east": replicas, "west": 5, "paris": replicas})
				for _, pod := range []string{"nginx-set-3", "nginx-set-4"} {
					out, err := curl(t.Context(), fmt.Sprintf("http://%s.nginx-svc-west.%s/", pod, m.ns))
					require.NoError(t, err)
					assert.Equal(t, harness.Identity("west", m.ns, pod), out)
				}
			})
			t.Run("unexported, a cluster's peers stop resolving and stop being reachable", func(t *testing.T) {
				paris := env.Cluster("paris")
				name := fmt.Sprintf("http://nginx-set-0.nginx-svc-paris.%s/", m.ns)
				var mirrorIP string
				if !m.flat {
					mirrorIP = mirrorClusterIP(t, m.ns, "nginx-set-0-paris")
				}
				require.NoError(t, paris.LabelService(t.Context(), m.ns, "nginx-svc", labels.Exported, ""))
				t.Cleanup(func() {
					require.NoError(t, paris.LabelService(context.Background(), m.ns, "nginx-svc", labels.Exported, m.export))
					waitPeers(t, m, map[string]int{"east": replicas, "west": replicas, "paris": replicas})
				})
				waitPeers(t, m, map[string]int{"east": replicas, "west": replicas})
				require.EventuallyWithT(t, func(c *assert.CollectT) {
					out, err := curl(t.Context(), name)
					require.Error(c, err, "got %q", out)
					assert.Contains(c, err.Error(), "Could not resolve host")
				}, wait, tick, "%s stops resolving", name)
				// Not resolving must be the answer of a DNS server that is
				// there: the processes are alive and west still resolves
				// and answers through the same path.
				env.RequireAlive(t, procs...)
				out, err := curl(t.Context(), fmt.Sprintf("http://nginx-set-0.nginx-svc-west.%s/", m.ns))
				require.NoError(t, err)
				assert.Equal(t, harness.Identity("west", m.ns, "nginx-set-0"), out)
				if !m.flat {
					// The mirror goes, and with it kube-proxy's rules for
					// its ClusterIP: nothing answers there any more.
					require.EventuallyWithT(t, func(c *assert.CollectT) {
						_, err := env.Cluster("east").Client.CoreV1().Services(m.ns).Get(t.Context(), "nginx-set-0-paris", metav1.GetOptions{})
						assert.True(c, apierrors.IsNotFound(err), "the mirror is deleted: %v", err)
					}, wait, tick, "paris's mirror nginx-set-0-paris is deleted")
					require.EventuallyWithT(t, func(c *assert.CollectT) {
						_, err := curl(t.Context(), "http://"+mirrorIP+"/")
						assert.Error(c, err)
					}, wait, tick, "paris's old mirror ClusterIP %s stops answering", mirrorIP)
					env.RequireAlive(t, procs...)
				}
			})
		})
	}
}

// clusterSetIP waits for east's ServiceImport of ns/name and returns its
// ClusterSetIP.
func clusterSetIP(t *testing.T, ns, name string) string {
	t.Helper()
	client, err := mcsclient.NewForConfig(env.Cluster("east").Config)
	require.NoError(t, err)
	var ip string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		si, err := client.MulticlusterV1beta1().ServiceImports(ns).Get(t.Context(), name, metav1.GetOptions{})
		require.NoError(c, err)
		require.NotEmpty(c, si.Spec.IPs)
		assert.Len(c, si.Status.Clusters, 3, "every cluster exports %s", name)
		ip = si.Spec.IPs[0]
	}, wait, tick, "east's ServiceImport %s/%s", ns, name)
	return ip
}

// curl runs the real curl in east's client pod and returns what it printed,
// trimmed.
func curl(ctx context.Context, url string) (string, error) {
	out, err := env.Cluster("east").Exec(ctx, "default", "client", "curl", "-sS", "--max-time", "5", url)
	return strings.TrimSpace(out), err
}

// peerLine is one line of FindPeers: "TARGET:PORT hello from C/NS/POD".
var peerLine = regexp.MustCompile(`^(\S+?)\.nginx-svc(-[a-z]+)?\.([a-z]+)\.svc\.cluster\.local:80 hello from ([a-z]+)/([a-z]+)/(\S+)$`)

// findPeers runs the peer finder in east's client pod on mode m's
// _http._tcp.nginx-svc-global and checks that every peer answered as the
// pod its name names.
func findPeers(t require.TestingT, m mode) []string {
	lines, err := env.Cluster("east").FindPeers(context.Background(), "default", "client",
		fmt.Sprintf("_http._tcp.nginx-svc-global.%s.svc.cluster.local", m.ns))
	require.NoError(t, err)
	for _, l := range lines {
		g := peerLine.FindStringSubmatch(l)
		require.NotNil(t, g, "peer line %q", l)
		cluster := strings.TrimPrefix(g[2], "-")
		if cluster == "" {
			cluster = "east" // the local member's name has no suffix
		}
		require.Equal(t, []string{cluster, m.ns, g[1]}, []string{g[4], g[5], g[6]}, "peer %q answered as itself", l)
	}
	return lines
}

// waitPeers waits until the peer finder reaches exactly want peers per
// cluster.
func waitPeers(t *testing.T, m mode, want map[string]int) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, want, countByCluster(findPeers(c, m)))
	}, wait, tick, "%s mode: the peer finder reaches %v", m.name, want)
}

func countByCluster(lines []string) map[string]int {
	n := map[string]int{}
	for _, l := range lines {
		if g := peerLine.FindStringSubmatch(l); g != nil {
			n[g[4]]++
		}
	}
	return n
}

func podIP(t *testing.T, cluster, ns, name string) string {
	t.Helper()
	pod, err := env.Cluster(cluster).Client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, pod.Status.PodIP)
	return pod.Status.PodIP
}

func mirrorClusterIP(t *testing.T, ns, name string) string {
	t.Helper()
	svc, err := env.Cluster("east").Client.CoreV1().Services(ns).Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, svc.Spec.ClusterIP)
	return svc.Spec.ClusterIP
}

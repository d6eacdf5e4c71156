package harness_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mcmirror/mcmirror/test/harness"
)

var env = harness.New(harness.Options{Clusters: []harness.ClusterOptions{
	{Name: "east"},
	{Name: "west", Workloads: true},
	{Name: "paris", MCS: true},
}})

func TestMain(m *testing.M) {
	if n, _ := strconv.Atoi(os.Getenv(harness.PortsChildEnv)); n > 0 {
		// The other harness process of TestPortsClaimedAcrossProcesses:
		// it takes n ports, says which, and holds them until its stdin
		// ends.
		for range n {
			p, err := harness.FreeTCPPort()
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			fmt.Println(p)
		}
		_, _ = io.Copy(io.Discard, os.Stdin)
		return
	}
	os.Exit(env.Run(m))
}

// A Service gets its ClusterIP from its own cluster's range and exists in no
// other cluster, although all clusters share one etcd.
func TestClustersAreIsolated(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	for _, c := range env.Clusters() {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "iso-" + c.Name},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
		}
		got, err := c.Client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
		require.NoError(t, err, c.Name)
		t.Cleanup(func() { _ = c.Client.CoreV1().Services("default").Delete(ctx, svc.Name, metav1.DeleteOptions{}) })
		ip, err := netip.ParseAddr(got.Spec.ClusterIP)
		require.NoError(t, err)
		assert.True(t, c.ServiceCIDR.Contains(ip), "%s: ClusterIP %s outside %s", c.Name, ip, c.ServiceCIDR)
		for _, other := range env.Clusters() {
			if other != c {
				assert.False(t, other.ServiceCIDR.Overlaps(c.ServiceCIDR), "%s and %s share service addresses", c.Name, other.Name)
				assert.False(t, other.ServiceCIDR.Contains(ip), "%s: ClusterIP %s is in %s's range", c.Name, ip, other.Name)
			}
		}
	}
	for _, c := range env.Clusters() {
		for _, other := range env.Clusters() {
			_, err := c.Client.CoreV1().Services("default").Get(ctx, "iso-"+other.Name, metav1.GetOptions{})
			if other == c {
				assert.NoError(t, err, "%s sees its own service", c.Name)
			} else {
				assert.True(t, apierrors.IsNotFound(err), "%s must not see %s's service: %v", c.Name, other.Name, err)
			}
		}
	}
}

// RBAC is enforced with real ServiceAccount tokens: a list/watch-only Role
// lets its ServiceAccount list and watch Services and nothing more.
func TestServiceAccountRBAC(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	paris := env.Cluster("paris")
	require.NoError(t, paris.Apply(ctx, `
apiVersion: v1
kind: ServiceAccount
metadata: {name: reader}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: service-reader}
rules:
- apiGroups: [""]
  resources: [services]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: service-reader}
subjects:
- {kind: ServiceAccount, name: reader, namespace: default}
`))
	cfg, err := paris.ServiceAccountConfig(ctx, "default", "reader")
	require.NoError(t, err)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)

	_, err = cs.CoreV1().Services("default").List(ctx, metav1.ListOptions{})
	require.NoError(t, err, "list is granted")
	w, err := cs.CoreV1().Services("default").Watch(ctx, metav1.ListOptions{})
	require.NoError(t, err, "watch is granted")
	w.Stop()

	_, err = cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "not-allowed"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{})
	assert.True(t, apierrors.IsForbidden(err), "create must be forbidden, got %v", err)
	_, err = cs.CoreV1().Services("kube-system").List(ctx, metav1.ListOptions{})
	assert.True(t, apierrors.IsForbidden(err), "other namespaces are not granted, got %v", err)

	// The token is for paris only: the other clusters do not accept it.
	cfg.Host = env.Cluster("west").Server
	cs, err = kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	_, err = cs.CoreV1().Services("default").List(ctx, metav1.ListOptions{})
	assert.True(t, apierrors.IsUnauthorized(err), "west must reject paris's token, got %v", err)
}

var nginx = harness.StatefulSet("default", "nginx-svc", "nginx-set", 3, nil)

// A StatefulSet behind a headless Service yields the EndpointSlices a real
// cluster makes: one ready endpoint per pod, with its hostname, following the
// replica count.
func TestStatefulSetEndpointSlices(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	west := env.Cluster("west")
	require.NoError(t, west.Apply(ctx, nginx))
	t.Cleanup(func() { _ = west.Delete(ctx, nginx) })

	for _, replicas := range []int{3, 5, 2} {
		require.NoError(t, west.Scale(ctx, "default", "nginx-set", replicas))

		var want []string
		for i := range replicas {
			want = append(want, fmt.Sprintf("nginx-set-%d", i))
		}
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			got, err := readyHostnames(ctx, west.Client, "nginx-svc")
			require.NoError(c, err)
			assert.Equal(c, want, got)
		}, 60*time.Second, 100*time.Millisecond, "ready endpoints at %d replicas", replicas)
	}

	// Pod IPs come from west's pod range.
	slices, err := west.Client.DiscoveryV1().EndpointSlices("default").List(ctx,
		metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=nginx-svc"})
	require.NoError(t, err)
	for _, s := range slices.Items {
		for _, ep := range s.Endpoints {
			ip, err := netip.ParseAddr(ep.Addresses[0])
			require.NoError(t, err)
			assert.True(t, west.PodCIDR.Contains(ip), "pod IP %s outside %s", ip, west.PodCIDR)
		}
	}
}

// readyHostnames lists the hostnames of the ready endpoints of a Service,
// sorted.
func readyHostnames(ctx context.Context, cs kubernetes.Interface, svc string) ([]string, error) {
	list, err := cs.DiscoveryV1().EndpointSlices("default").List(ctx,
		metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range list.Items {
		for _, ep := range s.Endpoints {
			if ep.Hostname != nil && ep.Conditions.Ready != nil && *ep.Conditions.Ready {
				names = append(names, *ep.Hostname)
			}
		}
	}
	slices.Sort(names)
	return names, nil
}

// A pod started by the harness answers at its own address, which the API
// server accepts as an endpoint; its namespace and process go when the test
// ends.
func TestPodIsReachable(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	west := env.Cluster("west")

	var pod *harness.Pod
	t.Run("serve", func(t *testing.T) {
		pod = west.RunPod(t, "echo-0", harness.EchoServer(8080))
		addr := net.JoinHostPort(pod.IP.String(), "8080")
		var conn net.Conn
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			var err error
			conn, err = net.DialTimeout("tcp", addr, time.Second)
			require.NoError(c, err)
		}, 30*time.Second, 50*time.Millisecond)
		defer conn.Close()
		r := bufio.NewReader(conn)
		require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		assert.Equal(t, "hello from west/echo-0\n", line)
		_, err = conn.Write([]byte("ping\n"))
		require.NoError(t, err)
		line, err = r.ReadString('\n')
		require.NoError(t, err)
		assert.Equal(t, "ping\n", line)

		// Unlike a loopback address, the pod's address is a valid endpoint.
		_, err = west.Client.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "echo-manual", Labels: map[string]string{discoveryv1.LabelServiceName: "echo"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{pod.IP.String()}, Hostname: ptr("echo-0")}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() {
			_ = west.Client.DiscoveryV1().EndpointSlices("default").Delete(ctx, "echo-manual", metav1.DeleteOptions{})
		})
	})
	require.NotNil(t, pod)
	done, _ := pod.Process.Exited()
	assert.True(t, done, "the pod's process ends with its test")
	_, err := os.Stat("/run/netns/" + pod.Netns)
	assert.True(t, os.IsNotExist(err), "the pod's namespace is removed with its test: %v", err)
	_, err = net.InterfaceByName(pod.HostInterface)
	assert.Error(t, err, "the pod's link is gone with its namespace")
}

// The cluster components keep running through the tests: none exited.
func TestComponentsRunning(t *testing.T) {
	for _, c := range env.Clusters() {
		v, err := c.Client.Discovery().ServerVersion()
		require.NoError(t, err, c.Name)
		assert.Equal(t, "v1.32.3", v.GitVersion, c.Name)
	}
	left := env.Leftovers()
	// etcd, 3 API servers, and a controller-manager and KWOK in west.
	assert.Len(t, left, 6, "running: %s", strings.Join(left, ", "))
}

func ptr[T any](v T) *T { return &v }

// Every API server listens below the kernel's ephemeral ports: a server
// restarted on its port finds it free, however many client connections
// the fleet holds (one of them took a restarted server's port before).
func TestAPIServerPortsOutsideEphemeralRange(t *testing.T) {
	low, high := ephemeralPorts(t)
	for _, c := range env.Clusters() {
		u, err := url.Parse(c.Server)
		require.NoError(t, err)
		port, err := strconv.Atoi(u.Port())
		require.NoError(t, err)
		assert.Less(t, port, low, "%s's API server at %s: in the ephemeral range %d–%d", c.Name, c.Server, low, high)
	}
}

// ephemeralPorts is the kernel's range of ports for client connections.
func ephemeralPorts(t *testing.T) (low, high int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	require.NoError(t, err)
	_, err = fmt.Sscan(string(b), &low, &high)
	require.NoError(t, err)
	return low, high
}

// No two calls hand out the same port, though a port handed out stays
// free until its server binds it: processes launched at once each get
// their own. None is in the range the kernel gives client connections,
// one of which would take it before its server binds it (one took a DNS
// server's metrics port that way).
func TestFreePortsAreNeverHandedOutTwice(t *testing.T) {
	low, _ := ephemeralPorts(t)
	seen := map[int]int{}
	for i := range 3000 {
		var p int
		if i%2 == 0 {
			var err error
			p, err = harness.FreeTCPPort()
			require.NoError(t, err)
		} else {
			p = harness.FreePort(t) // free for UDP too
		}
		require.Less(t, p, low, "call %d: port %d is in the ephemeral range", i, p)
		if j, ok := seen[p]; ok {
			t.Fatalf("port %d handed out by call %d and again by call %d", p, j, i)
		}
		seen[p] = i
	}
}

package faults_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

const (
	killClusterIP = 70 // exported ClusterIP Services
	killHeadless  = 30 // exported headless Services, killPods endpoints each
	killPods      = 10
	killRounds    = 3
	// controllerAgent is in the user agent of every request the
	// controller makes (client-go's default names the binary).
	controllerAgent = "coredns-mc"
)

// The controller is killed (SIGKILL) at random points of a large
// reconcile and started again, several times; then it runs behind a proxy
// that answers some of its writes with 409, then 429. It converges with
// every mirror once, no orphan, and every egress port it had recorded
// kept.
func TestControllerKilledMidReconcile(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	east, west := env.Cluster("east"), env.Cluster("west")
	const ns = "kill"
	env.CreateNamespace(t, ns)
	var manifest strings.Builder
	var want []string
	for i := range killClusterIP {
		fmt.Fprintf(&manifest, "%s---\n", clusterIPExport(ns, fmt.Sprintf("c%02d", i), labels.ExportGateway))
		want = append(want, fmt.Sprintf("c%02d-west", i))
	}
	for i := range killHeadless {
		name := fmt.Sprintf("h%02d", i)
		fmt.Fprintf(&manifest, "%s\n---\n", headlessExport(ns, name, labels.ExportGateway, killPods, 64, byte(i)))
		want = append(want, name+"-west")
		for j := range killPods {
			want = append(want, fmt.Sprintf("%s-%d-west", name, j))
		}
	}
	require.NoError(t, west.Apply(ctx, manifest.String()))
	ls := []harness.Link{{Name: "west", Kubeconfig: west.LinkFile(t)}}
	// A slow client spreads the reconcile (some 800 writes) over about 20
	// s, so that each kill lands in the middle of it.
	args := []string{"--kube-api-qps", "40", "--kube-api-burst", "40"}

	recorded := map[string]string{} // mirror → egress ports, as first seen
	for round := range killRounds {
		ctl := startController(t, fmt.Sprintf("controller-%d", round), "", ls, args...)
		before := len(mirrorSet(t, ns))
		// A random point of the reconcile: after it has written something
		// more, before it is done.
		delay := time.Duration(1000+rand.IntN(3000)) * time.Millisecond
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Greater(c, len(mirrorSet(c, ns)), before)
		}, 60*time.Second, 50*time.Millisecond, "round %d: the controller writes", round)
		time.Sleep(delay)
		env.RequireAlive(t, ctl.Process)
		require.NoError(t, ctl.Signal(syscall.SIGKILL))
		<-ctl.Done()
		ports := egressPorts(t, ns)
		n := len(mirrorSet(t, ns))
		t.Logf("round %d: killed %v after its first write, with %d of %d mirrors, %d with egress ports", round, delay, n, len(want), len(ports))
		require.Less(t, n, len(want), "round %d: killed in the middle of the reconcile", round)
		for m, p := range ports {
			if old, ok := recorded[m]; ok {
				assert.Equal(t, old, p, "round %d: %s keeps its egress ports", round, m)
			} else {
				recorded[m] = p
			}
		}
		harness.AssertEgressPortsUnique(t, ports)
	}

	// Last run, behind the proxy: every 5th write refused with 409.
	proxy := east.FaultProxy(t)
	proxy.Inject(controllerAgent, http.StatusConflict, 5, 0)
	ctl := startController(t, "controller-proxied", proxy.Kubeconfig, ls, args...)
	start := time.Now()
	waitMirrors(t, ns, want, 3*time.Minute)
	injected409 := proxy.Injected()
	t.Logf("converged %.1fs after the last start, %d writes refused with 409 on the way", time.Since(start).Seconds(), injected409)
	assert.Positive(t, injected409, "409s were injected and retried")
	assertConverged(t, ns, want, recorded)

	// Then 429 for every 3rd write, while new exports come.
	proxy.Inject(controllerAgent, http.StatusTooManyRequests, 3, 0)
	var more strings.Builder
	for i := range 5 {
		name := fmt.Sprintf("c%02d", killClusterIP+i)
		fmt.Fprintf(&more, "%s---\n", clusterIPExport(ns, name, labels.ExportGateway))
		want = append(want, name+"-west")
	}
	require.NoError(t, west.Apply(ctx, more.String()))
	waitMirrors(t, ns, want, 60*time.Second)
	t.Logf("%d writes refused with 429", proxy.Injected()-injected409)
	assert.Greater(t, proxy.Injected(), injected409, "429s were injected and retried")
	proxy.Inject("", 0, 0, 0)
	env.RequireAlive(t, ctl.Process)
	assertConverged(t, ns, want, recorded)
}

// egressPorts returns the egress ports recorded on east's mirrors of ns.
func egressPorts(t require.TestingT, ns string) map[string]string {
	ports, err := env.Cluster("east").EgressPorts(context.Background(), ns)
	require.NoError(t, err)
	return ports
}

// assertConverged waits until east's mirrors of ns are what they must be
// once the controller is done, and fails if they never are:
// exactly the wanted Services, each with exactly one EndpointSlice of
// its own, no EndpointSlice without its Service, every egress port once,
// and the ports recorded earlier unchanged.
func assertConverged(t *testing.T, ns string, want []string, recorded map[string]string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) { converged(c, ns, want, recorded) }, 60*time.Second, 250*time.Millisecond, "converged")
}

func converged(t *assert.CollectT, ns string, want []string, recorded map[string]string) {
	got := mirrorSet(t, ns)
	assert.Len(t, got, len(want), "no mirror twice, none missing, none extra")
	list, err := env.Cluster("east").Client.DiscoveryV1().EndpointSlices(ns).List(context.Background(),
		metav1.ListOptions{LabelSelector: discoveryv1.LabelManagedBy + "=" + labels.EndpointSliceManagedBy})
	require.NoError(t, err)
	perService := map[string]int{}
	for _, s := range list.Items {
		svc := s.Labels[discoveryv1.LabelServiceName]
		perService[svc]++
		_, ok := got[svc]
		assert.True(t, ok, "EndpointSlice %s belongs to an existing mirror (%s)", s.Name, svc)
	}
	for name := range got {
		assert.Equal(t, 1, perService[name], "%s has exactly one EndpointSlice", name)
	}
	ports := egressPorts(t, ns)
	harness.AssertEgressPortsUnique(t, ports)
	for m, p := range recorded {
		assert.Equal(t, p, ports[m], "%s: egress ports recorded before a kill are kept", m)
	}
	for _, m := range want {
		if !strings.HasPrefix(m, "h") || strings.Count(m, "-") == 2 { // all but headless mirrors have ports
			assert.NotEmpty(t, ports[m], "%s has egress ports", m)
		}
	}
}

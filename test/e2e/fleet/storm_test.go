package fleet_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// stormPods is how many pods of the unexported Service the storm creates,
// and then deletes.
const stormPods = 1000

// A storm of 1,000 pod creations and deletions behind a Service west does
// not export sends east's DNS and controller no event: their watches of
// west's EndpointSlices are selected on west's API server by the export
// labels the EndpointSlice controller copies from a Service. An exported
// change in the same storm still arrives, and so does one after it.
func TestUnexportedChurnIsNeverSent(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	west := env.Cluster("west")
	const ns = "storm"
	require.NoError(t, west.Apply(ctx, harness.Namespace(ns)+
		harness.StatefulSet(ns, "web", "web", 1, map[string]string{labels.Exported: labels.ExportFlat})+"---\n"+
		harness.ClusterIPService(ns, "noise", 80, nil)))
	f := env.StartFleet(t, harness.FleetOptions{Local: "east", Remotes: []string{"west"}, Parts: harness.FleetDNS | harness.FleetController,
		Controller: harness.ControllerOptions{Metrics: true}})

	name := "web-west." + ns + ".svc.cluster.local."
	webAddrs := func(c require.TestingT) []string { return podAddrs(c, west, ns, "web") }
	waitAnswers(t, f.DNS, name, 1, webAddrs)

	// What each consumer has received of west's slices so far; and, seen
	// from west's side, every event of the exported Service's slices from
	// now on (w), and of the unexported one's (noise).
	westSlices := map[string]string{"cluster": "west", "kind": "endpointslice"}
	received := map[string]func() float64{}
	for who, url := range map[string]string{"dns": f.DNS.MetricsURL, "controller": f.Controller.MetricsURL()} {
		received[who] = func() float64 {
			return harness.RequireMetric(t, url, "coredns_mcmirror_remote_events_received_total", westSlices)
		}
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 1.0, harness.RequireMetric(c, f.Controller.MetricsURL(), "coredns_mcmirror_controller_link_up", map[string]string{"cluster": "west"}))
	}, 60*time.Second, 50*time.Millisecond, "the controller's link to west up")
	web := countEvents(t, west, ns, "web")
	noise := countEvents(t, west, ns, "noise")
	before := map[string]float64{}
	for who, f := range received {
		before[who] = f()
		assert.Positive(t, before[who], "%s: west's slices listed at start", who)
	}

	// The storm: pods of noise created as fast as west takes them, then
	// deleted; meanwhile web scales to 2.
	var wg sync.WaitGroup
	wg.Go(func() { storm(t, west, ns) })
	require.NoError(t, west.Scale(ctx, ns, "web", 2))
	waitAnswers(t, f.DNS, name, 2, webAddrs)
	wg.Wait()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pods, err := west.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=noise"})
		require.NoError(c, err)
		assert.Empty(c, pods.Items)
		assert.Empty(c, podAddrs(c, west, ns, "noise"))
	}, 3*time.Minute, 100*time.Millisecond, "the storm's pods gone from noise's slices")
	// An exported change after the storm still arrives: the watches live.
	require.NoError(t, west.Scale(ctx, ns, "web", 1))
	waitAnswers(t, f.DNS, name, 1, webAddrs)
	require.Eventually(t, func() bool {
		return received["controller"]() > before["controller"]
	}, 30*time.Second, 50*time.Millisecond, "the controller received web's change")
	env.RequireAlive(t, f.Processes()...)

	// Every event either consumer received since is one of web's, which
	// west's watch saw too (once it has caught up with web's slices as
	// they are now); none of noise's.
	web.caughtUp(t, west, ns, "web")
	n, w := noise.count(), web.count()
	t.Logf("west: %d events of noise's slices, %d of web's", n, w)
	require.GreaterOrEqual(t, n, 20, "the storm churned noise's slices")
	for who, f := range received {
		got := f() - before[who]
		assert.LessOrEqual(t, got, float64(w), "%s received %v slice events, more than web's %d: unexported churn was sent", who, got, w)
		assert.Positive(t, got, "%s received none of web's changes", who)
	}
}

// storm creates stormPods pods of app=noise on west's node, then deletes
// them, as fast as the API server takes them.
func storm(t *testing.T, c *harness.Cluster, ns string) {
	ctx := context.Background()
	each := func(f func(name string) error) {
		var wg sync.WaitGroup
		next := make(chan string)
		for range 16 {
			wg.Go(func() {
				for n := range next {
					assert.NoError(t, f(n))
				}
			})
		}
		for i := range stormPods {
			next <- fmt.Sprintf("noise-%d", i)
		}
		close(next)
		wg.Wait()
	}
	each(func(name string) error {
		_, err := c.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "noise"}},
			Spec: corev1.PodSpec{NodeName: harness.NodeName, Containers: []corev1.Container{{Name: "c", Image: "noise",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 80}}}}},
		}, metav1.CreateOptions{})
		return err
	})
	each(func(name string) error {
		return c.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
}

// events counts the watch events of the EndpointSlices of one Service.
type events struct {
	mu  sync.Mutex
	n   int
	rvs map[string]string // slice name → last resourceVersion seen
}

func (e *events) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n
}

// countEvents counts, until the test ends, every change of the slices of
// Service ns/svc of c from now on.
func countEvents(t *testing.T, c *harness.Cluster, ns, svc string) *events {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sel := metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc}
	l, err := c.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, sel)
	require.NoError(t, err)
	e := &events{rvs: map[string]string{}}
	for _, es := range l.Items {
		e.rvs[es.Name] = es.ResourceVersion
	}
	sel.ResourceVersion = l.ResourceVersion
	w, err := c.Client.DiscoveryV1().EndpointSlices(ns).Watch(ctx, sel)
	require.NoError(t, err)
	go func() {
		for ev := range w.ResultChan() {
			es, ok := ev.Object.(*discoveryv1.EndpointSlice)
			if !ok {
				continue
			}
			e.mu.Lock()
			e.n++
			e.rvs[es.Name] = es.ResourceVersion
			e.mu.Unlock()
		}
	}()
	return e
}

// caughtUp waits until e has seen every slice of Service ns/svc of c as it
// is now.
func (e *events) caughtUp(t *testing.T, c *harness.Cluster, ns, svc string) {
	t.Helper()
	l, err := c.Client.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, es := range l.Items {
			if e.rvs[es.Name] != es.ResourceVersion {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond, "west's watch of %s's slices caught up", svc)
}

func podAddrs(t require.TestingT, c *harness.Cluster, ns, svc string) []string {
	l, err := c.Client.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	require.NoError(t, err)
	var out []string
	for _, es := range l.Items {
		for _, ep := range es.Endpoints {
			if ep.Conditions.Ready != nil && *ep.Conditions.Ready {
				out = append(out, ep.Addresses...)
			}
		}
	}
	slices.Sort(out)
	return out
}

// waitAnswers waits until the Service has n ready pods and s answers name
// with exactly their addresses.
func waitAnswers(t *testing.T, s *harness.DNSServer, name string, n int, addrs func(require.TestingT) []string) {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		want := addrs(ct)
		require.Len(ct, want, n)
		assert.Equal(ct, want, harness.Answers(s.Ask(ct, "udp", name, dns.TypeA)))
	}, 2*time.Minute, 50*time.Millisecond, "%s answers %d addresses", name, n)
}

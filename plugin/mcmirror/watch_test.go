package mcmirror

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/mcmirror/mcmirror/internal/remote/remotetest"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/index"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// These tests run the informer layer against client-go's fake clientsets:
// narrow checks of the wiring. The end-to-end tests run it against real API
// servers.

func service(name string, lbls map[string]string, clusterIP string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: lbls},
		Spec:       corev1.ServiceSpec{ClusterIP: clusterIP, Ports: ports},
	}
}

var exportedGW = map[string]string{labels.Exported: labels.ExportGateway}

func mirrorService(name, cluster, headlessOf, clusterIP string) *corev1.Service {
	l := map[string]string{labels.MirroredService: "true", labels.ClusterName: cluster}
	if headlessOf != "" {
		l[labels.HeadlessMirrorSvcName] = headlessOf
	}
	return service(name, l, clusterIP, corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP})
}

func endpointSlice(name, svc string, eps ...discovery.Endpoint) *discovery.EndpointSlice {
	return &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{labels.ServiceName: svc}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](80), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints:   eps,
	}
}

func podEndpoint(host, ip string, ready bool) discovery.Endpoint {
	return discovery.Endpoint{Addresses: []string{ip}, Hostname: ptr.To(host), Conditions: discovery.EndpointConditions{Ready: ptr.To(ready)}}
}

// addrs returns the A and AAAA addresses of name in the index x, sorted,
// and whether the name is there at all.
func addrs(x *index.Index, name string) ([]string, bool) {
	h := x.Lookup(name)
	if h == nil {
		return nil, false
	}
	var out []string
	for _, fam := range []struct {
		v    []byte
		size int
	}{{h.Addresses(false), net.IPv4len}, {h.Addresses(true), net.IPv6len}} {
		for i := 0; i < len(fam.v); i += fam.size {
			out = append(out, net.IP(fam.v[i:i+fam.size]).String())
		}
	}
	slices.Sort(out)
	return out, true
}

// wantAddrs fails t unless name is in the index x with the addresses want.
func wantAddrs(t *testing.T, x *index.Index, name string, want ...string) {
	t.Helper()
	if got, ok := addrs(x, name); !ok || !slices.Equal(got, want) {
		t.Errorf("%s: %v (in the index: %t), want %v", name, got, ok, want)
	}
}

// wantAbsent fails t when name is in the index x.
func wantAbsent(t *testing.T, x *index.Index, name string) {
	t.Helper()
	if got, ok := addrs(x, name); ok {
		t.Errorf("%s: in the index (%v), want it gone", name, got)
	}
}

// eventBound is how long a test waits for something the code under test
// does in milliseconds (an informer syncs, an event reaches the index, a
// refused connection is counted) before it fails: a machine at load 4,
// under -race, meets it by far, so that a test fails only when the event
// never comes. The tests wait for events, not for this clock; a bound on
// how fast the code is belongs to the benchmarks.
const eventBound = 30 * time.Second

// eventually polls f until it holds, failing t after eventBound.
func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	waitFor(t, eventBound, what, f)
}

// startBounded runs m.Start, which returns once every cluster has synced or
// startup_timeout has passed, and fails t when it has not returned within
// startup_timeout and eventBound: a Start that waited for a link that never
// syncs would never return, and that is what the bound tells apart from a
// slow machine.
func startBounded(t *testing.T, m *MCMirror) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- m.Start() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(m.startupTimeout + eventBound):
		t.Fatalf("Start has not returned %s after startup_timeout %s", eventBound, m.startupTimeout)
	}
}

func startPlugin(t *testing.T, local kubernetes.Interface, links map[string]kubernetes.Interface, timeout time.Duration) *MCMirror {
	t.Helper()
	m, err := New(local, Options{Zones: []string{"cluster.local.", "in-addr.arpa."}, Cluster: "east", TTL: 5, StartupTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range links {
		if err := m.AddLink(name, c); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { m.Stop() })
	startBounded(t, m)
	return m
}

func TestControllerWatches(t *testing.T) {
	ctx := context.Background()
	west := remotetest.NewClientset(
		service("nginx-svc", exportedGW, corev1.ClusterIPNone, corev1.ServicePort{Name: "http", Port: 80}),
		endpointSlice("nginx-svc-1", "nginx-svc", podEndpoint("nginx-set-0", "10.1.0.10", true)),
		service("private", nil, "10.100.0.9"), // not exported
	)
	local := remotetest.NewClientset(
		mirrorService("nginx-svc-west", "west", "", corev1.ClusterIPNone),
		mirrorService("nginx-set-0-west", "west", "nginx-svc-west", "10.96.0.10"),
		mirrorService("nginx-set-1-west", "west", "nginx-svc-west", "10.96.0.11"),
	)
	// startup_timeout is not what is tested: Start returns once both
	// have synced, however long a loaded machine takes.
	m := startPlugin(t, local, map[string]kubernetes.Interface{"west": west}, eventBound)
	if !m.Ready() {
		t.Fatal("not ready after Start")
	}
	if got := testutil.ToFloat64(linkSynced.WithLabelValues("west")); got != 1 {
		t.Errorf("link_synced{cluster=west} = %v", got)
	}
	eventually(t, "objects metric", func() bool {
		return testutil.ToFloat64(linkObjects.WithLabelValues("west", "service")) == 1 && // the fake's watch would send both
			testutil.ToFloat64(linkObjects.WithLabelValues("east", "mirror")) == 3
	})
	wantAddrs(t, m.index, "nginx-svc-west"+z, "10.96.0.10")
	wantAbsent(t, m.index, "private-west"+z)

	// Scale up: a new ready pod, whose mirror exists.
	west.DiscoveryV1().EndpointSlices("default").Update(ctx, endpointSlice("nginx-svc-1", "nginx-svc",
		podEndpoint("nginx-set-0", "10.1.0.10", true), podEndpoint("nginx-set-1", "10.1.0.11", true)), metav1.UpdateOptions{})
	eventually(t, "the new pod", func() bool {
		a, _ := addrs(m.index, "nginx-svc-west"+z)
		return slices.Equal(a, []string{"10.96.0.10", "10.96.0.11"})
	})

	// A mirror's ClusterIP appears for a pod that had none.
	west.DiscoveryV1().EndpointSlices("default").Create(ctx, endpointSlice("nginx-svc-2", "nginx-svc", podEndpoint("nginx-set-2", "10.1.0.12", true)), metav1.CreateOptions{})
	local.CoreV1().Services("default").Create(ctx, mirrorService("nginx-set-2-west", "west", "nginx-svc-west", "10.96.0.12"), metav1.CreateOptions{})
	eventually(t, "the pod whose mirror came", func() bool {
		a, _ := addrs(m.index, "nginx-set-2.nginx-svc-west"+z)
		return slices.Equal(a, []string{"10.96.0.12"})
	})

	// Unexport: the label goes.
	west.CoreV1().Services("default").Update(ctx, service("nginx-svc", nil, corev1.ClusterIPNone), metav1.UpdateOptions{})
	eventually(t, "unexport", func() bool { return m.index.Lookup("nginx-svc-west"+z) == nil })

	// Export a Service whose slices are already there: they come as the
	// EndpointSlice controller labels them.
	west.DiscoveryV1().EndpointSlices("default").Create(ctx, endpointSlice("private-1", "private", podEndpoint("p", "10.1.0.20", true)), metav1.CreateOptions{})
	private := service("private", map[string]string{labels.Exported: labels.ExportFlat}, "10.100.0.9")
	west.CoreV1().Services("default").Update(ctx, private, metav1.UpdateOptions{})
	eventually(t, "the newly exported Service", func() bool {
		a, _ := addrs(m.index, "private-west"+z)
		return slices.Equal(a, []string{"10.1.0.20"})
	})

	// The link goes: so do its names.
	m.RemoveLink("west")
	eventually(t, "link removal", func() bool { return m.index.Lookup("private-west"+z) == nil })
	if err := m.AddLink("east", remotetest.NewClientset()); err == nil {
		t.Error("a link named like the local cluster was accepted")
	}
}

func TestControllerLocalExports(t *testing.T) {
	local := remotetest.NewClientset(
		service("api", exportedGW, "10.100.0.7", corev1.ServicePort{Name: "http", Port: 80}),
		// A mirror carrying the export label is never exported again.
		func() *corev1.Service {
			s := mirrorService("db-west", "west", "", "10.96.0.40")
			s.Labels[labels.Exported] = labels.ExportGateway
			return s
		}(),
	)
	m := startPlugin(t, local, nil, eventBound)
	wantAddrs(t, m.index, "api-global"+z, "10.100.0.7")
	wantAbsent(t, m.index, "db-west-global"+z)
}

func TestControllerDeadLink(t *testing.T) {
	// Nothing listens on port 1: the link never syncs.
	dead, err := kubernetes.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	west := remotetest.NewClientset(service("web", exportedGW, "10.100.0.1", corev1.ServicePort{Name: "http", Port: 80}))
	local := remotetest.NewClientset(mirrorService("web-west", "west", "", "10.96.0.20"))

	before := testutil.ToFloat64(linkErrors.WithLabelValues("paris", link.FailureUnreachable))
	// Start returns (startBounded) although paris never syncs.
	m := startPlugin(t, local, map[string]kubernetes.Interface{"west": west, "paris": dead}, 300*time.Millisecond)
	eventually(t, "readiness despite the dead link", m.Ready)
	eventually(t, "west's answer", func() bool { a, _ := addrs(m.index, "web-west"+z); return slices.Equal(a, []string{"10.96.0.20"}) })
	// Evidence paris was tried before its not being synced counts.
	eventually(t, "watch errors counted", func() bool {
		return testutil.ToFloat64(linkErrors.WithLabelValues("paris", link.FailureUnreachable)) > before
	})
	if got := testutil.ToFloat64(linkSynced.WithLabelValues("paris")); got != 0 {
		t.Errorf("link_synced{cluster=paris} = %v, want 0", got)
	}
}

func TestControllerNotReadyBeforeTimeout(t *testing.T) {
	dead, err := kubernetes.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(remotetest.NewClientset(), Options{Zones: []string{"cluster.local."}, Cluster: "east", StartupTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if m.Ready() {
		t.Error("ready before start")
	}
	if err := m.AddLink("notyet", dead); err != nil {
		t.Fatal(err)
	}
	before := testutil.ToFloat64(linkErrors.WithLabelValues("notyet", link.FailureUnreachable))
	m.watch.start()
	defer m.Stop()
	// Positive evidence that the watches run before their absence of
	// readiness counts: the local cluster has synced, and the link has
	// been tried and has failed. Only the link's time left holds
	// readiness up now.
	eventually(t, "the local cluster synced", func() bool { return m.watch.cluster("east").synced.Load() })
	eventually(t, "the dead link tried and counted", func() bool {
		return testutil.ToFloat64(linkErrors.WithLabelValues("notyet", link.FailureUnreachable)) > before
	})
	if m.Ready() {
		t.Error("ready with a link that has not synced and has time left")
	}
}

func TestControllerProgrammingLatency(t *testing.T) {
	ctx := context.Background()
	west := remotetest.NewClientset(service("web", map[string]string{labels.Exported: labels.ExportFlat}, "10.100.0.1"))
	m := startPlugin(t, remotetest.NewClientset(), map[string]kubernetes.Interface{"latency": west}, eventBound)

	h := programmingLatency.WithLabelValues("latency").(prometheus.Histogram)
	count := func() uint64 {
		var d dto.Metric
		if err := h.Write(&d); err != nil {
			t.Fatal(err)
		}
		return d.GetHistogram().GetSampleCount()
	}
	before := count()
	s := endpointSlice("web-1", "web", podEndpoint("", "10.1.0.1", true))
	s.Annotations = map[string]string{labels.EndpointsLastChangeTriggerTime: time.Now().Add(-time.Second).Format(time.RFC3339Nano)}
	west.DiscoveryV1().EndpointSlices("default").Create(ctx, s, metav1.CreateOptions{})
	eventually(t, "the endpoint", func() bool { a, _ := addrs(m.index, "web-latency"+z); return len(a) == 1 })
	eventually(t, "a latency sample", func() bool { return count() == before+1 })
}

// TestControllerServeDNS answers a query end to end through the informers.
func TestControllerServeDNS(t *testing.T) {
	west := remotetest.NewClientset(service("web", exportedGW, "10.100.0.1", corev1.ServicePort{Name: "http", Port: 80}))
	local := remotetest.NewClientset(mirrorService("web-west", "west", "", "10.96.0.20"))
	m := startPlugin(t, local, map[string]kubernetes.Interface{"west": west}, eventBound)
	m.Next = fromNext
	runCase(t, m, testCase("web-west"+z, dns.TypeA, a("web-west"+z, "10.96.0.20")), false)
	runCase(t, m, testCase("20.0.96.10.in-addr.arpa.", dns.TypePTR, ptrRR("20.0.96.10.in-addr.arpa.", "web-west"+z)), false)
	runCase(t, m, next("web-paris"+z), false)
}

func TestControllerReplaceLink(t *testing.T) {
	flat := map[string]string{labels.Exported: labels.ExportFlat}
	a := remotetest.NewClientset(service("web", flat, "10.100.0.1"), endpointSlice("web-1", "web", podEndpoint("", "10.1.0.1", true)))
	b := remotetest.NewClientset(service("web", flat, "10.100.0.1"), endpointSlice("web-1", "web", podEndpoint("", "10.1.0.2", true)))
	m := startPlugin(t, remotetest.NewClientset(), map[string]kubernetes.Interface{"west": a}, eventBound)
	wantAddrs(t, m.index, "web-west"+z, "10.1.0.1")
	first := m.watch.cluster("west")

	// A configuration that cannot connect: the last known state stays.
	dead, err := kubernetes.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	before := testutil.ToFloat64(linkErrors.WithLabelValues("west", link.FailureUnreachable))
	if err := m.ReplaceLink("west", dead); err != nil {
		t.Fatal(err)
	}
	// Positive evidence the broken configuration was tried: its watches
	// run as the pending replacement, and have failed, and failed again
	// at their retries (a second apart at most). Only then does the old
	// answer that stays count.
	eventually(t, "the new configuration tried and refused, three times", func() bool {
		m.watch.mu.RLock()
		serving, pending := m.watch.clusters["west"], first.next != nil
		m.watch.mu.RUnlock()
		if serving != first {
			t.Fatal("a configuration that never synced took over")
		}
		return pending && testutil.ToFloat64(linkErrors.WithLabelValues("west", link.FailureUnreachable)) >= before+3
	})
	wantAddrs(t, m.index, "web-west"+z, "10.1.0.1")
	if m.watch.cluster("west") != first {
		t.Error("a configuration that never synced took over")
	}

	// A working one takes over once it has synced.
	if err := m.ReplaceLink("west", b); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new configuration's answers", func() bool {
		got, _ := addrs(m.index, "web-west"+z)
		return slices.Equal(got, []string{"10.1.0.2"})
	})
	if got := m.watch.Links(); !slices.Equal(got, []string{"west"}) {
		t.Errorf("links %v", got)
	}

	// A new name is a plain add.
	if err := m.ReplaceLink("paris", a); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the added link", func() bool { return m.index.Lookup("web-paris"+z) != nil })
}

func TestLinkHandler(t *testing.T) {
	m := startPlugin(t, remotetest.NewClientset(), nil, 100*time.Millisecond)
	h := m.LinkHandler()
	h.Add("west", &rest.Config{Host: "http://127.0.0.1:1"})
	if got := m.watch.Links(); !slices.Equal(got, []string{"west"}) {
		t.Fatalf("links %v after Add", got)
	}
	h.Add("West", &rest.Config{Host: "http://127.0.0.1:1"}) // not a cluster name: logged, ignored
	h.Remove("west")
	if got := m.watch.Links(); len(got) != 0 {
		t.Fatalf("links %v after Remove", got)
	}
}

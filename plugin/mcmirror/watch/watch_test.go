package watch

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/mcmirror/mcmirror/internal/remote/remotetest"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/index"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/index/indextest"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/watch/watchtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// These tests run the informer layer against client-go's fake clientsets:
// narrow checks of the wiring, read back through the index it feeds. The
// end-to-end tests run it against real API servers.

// The API objects of the tests (watchtest).
var (
	service       = watchtest.Service
	mirrorService = watchtest.MirrorService
	endpointSlice = watchtest.EndpointSlice
	podEndpoint   = watchtest.PodEndpoint
	flatSlice     = watchtest.FlatSlice
	fedService    = watchtest.FedService
	exportedGW    = watchtest.ExportedGateway
	flatExport    = watchtest.ExportedFlat
	waitFor       = watchtest.WaitFor
	eventBound    = watchtest.EventBound
)

// clusterSetZone is the clusterset zone of the index, with clusterset.
const clusterSetZone = "clusterset.local."

// The names of Services of namespace default: mcmirror's, and the
// clusterset zone's.
const (
	z  = ".default.svc.cluster.local."
	cs = ".default.svc." + clusterSetZone
)

// stack is what the plugin runs of the watches: a Watcher of cluster east,
// and the index it feeds and is the Source of.
type stack struct {
	watch *Watcher
	index *index.Index
	// startup is the startup timeout, for start.
	startup time.Duration
}

// newStack returns the watches of cluster east through local with the
// settings o, and their index: mcmirror's names in cluster.local, with PTR
// names, and, with o.ClusterSet, the clusterset.local zone's.
func newStack(t *testing.T, local kubernetes.Interface, o Options) *stack {
	t.Helper()
	o.Cluster = "east"
	w, err := New(local, o)
	require.NoError(t, err)
	ixOpts := index.Options{Cluster: "east", Zones: []string{"cluster.local."}, PTR: true}
	if o.ClusterSet {
		ixOpts.ClusterSet = []string{clusterSetZone}
	}
	return &stack{watch: w, index: index.New(w, ixOpts), startup: o.StartupTimeout}
}

// start starts the watches, feeding the index, until the test ends, and
// waits for their first sync: once every cluster has synced, or, for a
// link that does not, startup_timeout has passed; it fails t when that has
// not come within startup_timeout and eventBound: a first sync that waited
// for a link that never syncs would never come, and that is what the bound
// tells apart from a slow machine.
func (m *stack) start(t *testing.T) {
	t.Helper()
	m.startFeeding(t, m.index)
}

// startFeeding is start, the watches feeding ix (the index, or a wrapper
// of it).
func (m *stack) startFeeding(t *testing.T, ix Index) {
	t.Helper()
	m.watch.Start(ix)
	t.Cleanup(m.watch.Stop)
	waitFor(t, m.startup+eventBound, "the first sync, or startup_timeout "+m.startup.String(), m.watch.HasSynced)
}

// startWith starts the watches of cluster east over local, with links
// (name, client pairs) added in order, startup_timeout startup and
// stale_max_age maxAge.
func startWith(t *testing.T, local kubernetes.Interface, startup, maxAge time.Duration, links ...any) *stack {
	t.Helper()
	m := newStack(t, local, Options{StartupTimeout: startup, StaleMaxAge: maxAge})
	m.link(t, links...)
	m.start(t)
	return m
}

// link adds links, name and client pairs, in order.
func (m *stack) link(t *testing.T, links ...any) {
	t.Helper()
	for i := 0; i < len(links); i += 2 {
		require.NoError(t, m.watch.AddLink(links[i].(string), links[i+1].(kubernetes.Interface)))
	}
}

// passedOn stands for the answer of the next plugin: a name not claimed.
const passedOn = "192.0.2.53"

// askA is what the plugin answers an A query of name with (the handler's
// ServeDNS, made from the index): the rcode and the addresses, sorted;
// passedOn alone when the name is not mcmirror's and goes on down the
// plugin chain. A name mcmirror claims but does not have is NXDOMAIN, or
// SERVFAIL before the first sync.
func askA(t *testing.T, m *stack, name string) (int, []string) {
	t.Helper()
	missing := dns.RcodeNameError
	if !m.watch.HasSynced() {
		missing = dns.RcodeServerFailure
	}
	if strings.HasSuffix(name, "."+clusterSetZone) {
		h, what, _ := m.index.FindCS(name, clusterSetZone)
		switch {
		case what == index.CSNone, what == index.CSName && !h.Exists():
			return missing, nil
		case what != index.CSName:
			return dns.RcodeSuccess, nil
		}
		return dns.RcodeSuccess, indextest.Addresses(&h)
	}
	if h := m.index.Lookup(name); h != nil {
		return dns.RcodeSuccess, indextest.Addresses(h)
	}
	if _, ok := m.index.Claimed(name, "cluster.local."); ok {
		return missing, nil
	}
	return dns.RcodeSuccess, []string{passedOn}
}

// rcode is the rcode of askA's answer, for one-line checks.
func rcode(rc int, _ []string) string { return dns.RcodeToString[rc] }

// first and second pick one of a call's results, for one-line checks.
func first[A any](a A, _ ...any) A         { return a }
func second[B any](_ any, b B, _ ...any) B { return b }

// wantAddrs fails t unless name is in the index with the addresses want.
func wantAddrs(t *testing.T, m *stack, name string, want ...string) {
	t.Helper()
	got, ok := indextest.Addrs(m.index.Lookup(name))
	assert.False(t, !ok || !slices.Equal(got, want),
		"%s: %v (in the index: %t), want %v", name, got, ok, want)
}

// hasAddrs reports whether name is in the index with the addresses want.
func hasAddrs(m *stack, name string, want ...string) func() bool {
	return func() bool { got, _ := indextest.Addrs(m.index.Lookup(name)); return slices.Equal(got, want) }
}

// wantAbsent fails t when name is in the index.
func wantAbsent(t *testing.T, m *stack, name string) {
	t.Helper()
	got, ok := indextest.Addrs(m.index.Lookup(name))
	assert.False(t, ok, "%s: in the index (%v), want it gone", name, got)
}

// answersA reports whether name is answered with the addresses want.
func answersA(t *testing.T, m *stack, name string, want ...string) func() bool {
	return func() bool {
		rc, got := askA(t, m, name)
		return rc == dns.RcodeSuccess && slices.Equal(got, want)
	}
}

// eventually polls f until it holds, failing t after eventBound.
func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	waitFor(t, eventBound, what, f)
}

// unreachable is link_errors_total{cluster, reason=unreachable}.
func unreachable(cluster string) float64 {
	return testutil.ToFloat64(linkErrors.WithLabelValues(cluster, link.FailureUnreachable))
}

// deadClient is a client of an address nothing listens on.
func deadClient(t *testing.T) kubernetes.Interface {
	dead, err := kubernetes.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1", Timeout: time.Second})
	require.NoError(t, err)
	return dead
}

// wantKeys fails t unless got, the keys of what, are want.
func wantKeys(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	assert.True(t, slices.Equal(got, want), "%s %v, want %v", what, got, want)
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
	m := startWith(t, local, eventBound, 0, "west", west)
	require.True(t, m.watch.HasSynced(), "not ready after Start")
	assert.EqualValues(t, 1, testutil.ToFloat64(linkSynced.WithLabelValues("west")), "link_synced{cluster=west}")
	eventually(t, "objects metric", func() bool {
		return testutil.ToFloat64(linkObjects.WithLabelValues("west", "service")) == 1 && // the fake's watch would send both
			testutil.ToFloat64(linkObjects.WithLabelValues("east", "mirror")) == 3
	})
	wantAddrs(t, m, "nginx-svc-west"+z, "10.96.0.10")
	wantAbsent(t, m, "private-west"+z)

	// Scale up: a new ready pod, whose mirror exists.
	west.DiscoveryV1().EndpointSlices("default").Update(ctx, endpointSlice("nginx-svc-1", "nginx-svc",
		podEndpoint("nginx-set-0", "10.1.0.10", true), podEndpoint("nginx-set-1", "10.1.0.11", true)), metav1.UpdateOptions{})
	eventually(t, "the new pod", hasAddrs(m, "nginx-svc-west"+z, "10.96.0.10", "10.96.0.11"))

	// A mirror's ClusterIP appears for a pod that had none.
	west.DiscoveryV1().EndpointSlices("default").Create(ctx, endpointSlice("nginx-svc-2", "nginx-svc", podEndpoint("nginx-set-2", "10.1.0.12", true)), metav1.CreateOptions{})
	local.CoreV1().Services("default").Create(ctx, mirrorService("nginx-set-2-west", "west", "nginx-svc-west", "10.96.0.12"), metav1.CreateOptions{})
	eventually(t, "the pod whose mirror came", hasAddrs(m, "nginx-set-2.nginx-svc-west"+z, "10.96.0.12"))

	// Unexport: the label goes.
	west.CoreV1().Services("default").Update(ctx, service("nginx-svc", nil, corev1.ClusterIPNone), metav1.UpdateOptions{})
	eventually(t, "unexport", func() bool { return m.index.Lookup("nginx-svc-west"+z) == nil })

	// Export a Service whose slices are already there: they come as the
	// EndpointSlice controller labels them.
	west.DiscoveryV1().EndpointSlices("default").Create(ctx, endpointSlice("private-1", "private", podEndpoint("p", "10.1.0.20", true)), metav1.CreateOptions{})
	private := service("private", map[string]string{labels.Exported: labels.ExportFlat}, "10.100.0.9")
	west.CoreV1().Services("default").Update(ctx, private, metav1.UpdateOptions{})
	eventually(t, "the newly exported Service", hasAddrs(m, "private-west"+z, "10.1.0.20"))

	// The link goes: so do its names.
	m.watch.RemoveLink("west")
	eventually(t, "link removal", func() bool { return m.index.Lookup("private-west"+z) == nil })
	assert.Error(t, m.watch.AddLink("east", remotetest.NewClientset()), "a link named like the local cluster was accepted")
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
	m := startWith(t, local, eventBound, 0)
	wantAddrs(t, m, "api-global"+z, "10.100.0.7")
	wantAbsent(t, m, "db-west-global"+z)
}

func TestControllerDeadLink(t *testing.T) {
	// Nothing listens on port 1: the link never syncs.
	dead := deadClient(t)
	west := remotetest.NewClientset(service("web", exportedGW, "10.100.0.1", corev1.ServicePort{Name: "http", Port: 80}))
	local := remotetest.NewClientset(mirrorService("web-west", "west", "", "10.96.0.20"))

	before := unreachable("paris")
	// Start returns (startBounded) although paris never syncs.
	m := startWith(t, local, 300*time.Millisecond, 0, "west", west, "paris", dead)
	eventually(t, "readiness despite the dead link", m.watch.HasSynced)
	eventually(t, "west's answer", hasAddrs(m, "web-west"+z, "10.96.0.20"))
	// Evidence paris was tried before its not being synced counts.
	eventually(t, "watch errors counted", func() bool { return unreachable("paris") > before })
	assert.EqualValues(t, 0, testutil.ToFloat64(linkSynced.WithLabelValues("paris")), "link_synced{cluster=paris}")
}

func TestControllerNotReadyBeforeTimeout(t *testing.T) {
	dead := deadClient(t)
	m := newStack(t, remotetest.NewClientset(), Options{StartupTimeout: time.Hour})
	assert.False(t, m.watch.HasSynced(), "ready before start")
	require.NoError(t, m.watch.AddLink("notyet", dead))
	before := unreachable("notyet")
	m.watch.Start(m.index)
	defer m.watch.Stop()
	// Positive evidence that the watches run before their absence of
	// readiness counts: the local cluster has synced, and the link has
	// been tried and has failed. Only the link's time left holds
	// readiness up now.
	eventually(t, "the local cluster synced", func() bool { return m.watch.cluster("east").synced.Load() })
	eventually(t, "the dead link tried and counted", func() bool { return unreachable("notyet") > before })
	assert.False(t, m.watch.HasSynced(), "ready with a link that has not synced and has time left")
}

func TestControllerProgrammingLatency(t *testing.T) {
	ctx := context.Background()
	west := remotetest.NewClientset(service("web", map[string]string{labels.Exported: labels.ExportFlat}, "10.100.0.1"))
	m := startWith(t, remotetest.NewClientset(), eventBound, 0, "latency", west)

	h := programmingLatency.WithLabelValues("latency").(prometheus.Histogram)
	count := func() uint64 {
		var d dto.Metric
		require.NoError(t, h.Write(&d))
		return d.GetHistogram().GetSampleCount()
	}
	before := count()
	s := endpointSlice("web-1", "web", podEndpoint("", "10.1.0.1", true))
	s.Annotations = map[string]string{labels.EndpointsLastChangeTriggerTime: time.Now().Add(-time.Second).Format(time.RFC3339Nano)}
	west.DiscoveryV1().EndpointSlices("default").Create(ctx, s, metav1.CreateOptions{})
	eventually(t, "the endpoint", func() bool { a, _ := indextest.Addrs(m.index.Lookup("web-latency" + z)); return len(a) == 1 })
	eventually(t, "a latency sample", func() bool { return count() == before+1 })
}

func TestControllerReplaceLink(t *testing.T) {
	flat := map[string]string{labels.Exported: labels.ExportFlat}
	a := remotetest.NewClientset(service("web", flat, "10.100.0.1"), endpointSlice("web-1", "web", podEndpoint("", "10.1.0.1", true)))
	b := remotetest.NewClientset(service("web", flat, "10.100.0.1"), endpointSlice("web-1", "web", podEndpoint("", "10.1.0.2", true)))
	m := startWith(t, remotetest.NewClientset(), eventBound, 0, "west", a)
	wantAddrs(t, m, "web-west"+z, "10.1.0.1")
	first := m.watch.cluster("west")

	// A configuration that cannot connect: the last known state stays.
	before := unreachable("west")
	require.NoError(t, m.watch.ReplaceLink("west", deadClient(t)))
	// Positive evidence the broken configuration was tried: its watches
	// (the old ones work) have failed, and failed again at their retries (a second apart at most). Only then does the old
	// answer that stays count.
	eventually(t, "the new configuration tried and refused, three times", func() bool {
		require.Same(t, first, m.watch.cluster("west"), "a configuration that never synced took over")
		return unreachable("west") >= before+3
	})
	wantAddrs(t, m, "web-west"+z, "10.1.0.1")
	assert.Same(t, first, m.watch.cluster("west"), "a configuration that never synced took over")

	// A working one takes over once it has synced.
	require.NoError(t, m.watch.ReplaceLink("west", b))
	eventually(t, "the new configuration's answers", hasAddrs(m, "web-west"+z, "10.1.0.2"))
	assert.Equal(t, []string{"west"}, m.watch.Links(), "links")

	// A new name is a plain add.
	require.NoError(t, m.watch.ReplaceLink("paris", a))
	eventually(t, "the added link", func() bool { return m.index.Lookup("web-paris"+z) != nil })
}

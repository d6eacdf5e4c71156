package watch

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/remote"
	"github.com/mcmirror/mcmirror/internal/remote/remotetest"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

// recorder is a storeHandler that records what it is told.
type recorder struct{ events []string }

func (r *recorder) handler() storeHandler {
	name := func(obj any) string { return obj.(*object.Slice).Name + "@" + obj.(*object.Slice).Version }
	return storeHandler{
		add:    func(obj any, initial bool) { r.events = append(r.events, "add "+name(obj)) },
		update: func(_, obj any) { r.events = append(r.events, "update "+name(obj)) },
		del:    func(obj any) { r.events = append(r.events, "del "+name(obj)) },
	}
}

func rawSlice(name, svc, rv string) *discovery.EndpointSlice {
	s := endpointSlice(name, svc)
	s.ResourceVersion = rv
	return s
}

func keys(s *objectStore) []string {
	k := s.idx.ListKeys()
	slices.Sort(k)
	return k
}

// sliceKeys returns the keys of the slices a cluster holds, every way.
func sliceKeys(cl *cluster) []string {
	var k []string
	for _, st := range cl.slices {
		k = append(k, st.idx.ListKeys()...)
	}
	slices.Sort(k)
	return slices.Compact(k)
}

// Only the EndpointSlices of exported Services cross the network: the
// API server selects them by the labels the EndpointSlice controller
// copies from their Service. A Service with slices that becomes exported
// has them sent (and answered) as they are relabelled, and they go when
// it is unexported.
func TestOnlyExportedSlicesSent(t *testing.T) {
	ctx := context.Background()
	objs := []runtime.Object{service("web", flatExport, corev1.ClusterIPNone), flatSlice("web-1", "web", "10.1.0.1")}
	for _, svc := range []string{"a", "b", "c"} {
		objs = append(objs, service(svc, nil, corev1.ClusterIPNone),
			flatSlice(svc+"-1", svc, "10.2.0.1", "10.2.0.2"), flatSlice(svc+"-2", svc, "10.2.0.3"))
	}
	west := remotetest.NewClientset(objs...)
	m := startWith(t, remotetest.NewClientset(), 5*time.Second, 0, "held", west)
	waitFor(t, 5*time.Second, "the exported Service", answersA(t, m, "web-held"+z, "10.1.0.1"))
	cl := m.watch.cluster("held")
	wantKeys(t, "slices held", sliceKeys(cl), "default/web-1")
	assert.EqualValues(t, 1, testutil.ToFloat64(linkObjects.WithLabelValues("held", "endpointslice")), "link_objects{endpointslice}")
	received := func() float64 {
		return testutil.ToFloat64(remote.Received.WithLabelValues("held", "endpointslice"))
	}
	assert.EqualValues(t, 1, received(), "slices received")

	a := service("a", flatExport, corev1.ClusterIPNone)
	_, err := west.CoreV1().Services("default").Update(ctx, a, metav1.UpdateOptions{})
	require.NoError(t, err)
	waitFor(t, 5*time.Second, "every endpoint of the newly exported Service", answersA(t, m, "a-held"+z, "10.2.0.1", "10.2.0.2", "10.2.0.3"))
	assert.EqualValues(t, 3, testutil.ToFloat64(linkObjects.WithLabelValues("held", "endpointslice")), "link_objects{endpointslice}")

	a = service("a", nil, corev1.ClusterIPNone)
	_, err = west.CoreV1().Services("default").Update(ctx, a, metav1.UpdateOptions{})
	require.NoError(t, err)
	waitFor(t, 5*time.Second, "the unexported Service's slices dropped", func() bool {
		return slices.Equal(sliceKeys(cl), []string{"default/web-1"}) &&
			testutil.ToFloat64(linkObjects.WithLabelValues("held", "endpointslice")) == 1
	})
}

// The metric series of a link belong to the watches that serve it: a
// replacement that has not synced does not touch them, and once a link is
// removed its series are gone and stay gone, whatever its old watches do.
func TestLinkMetricsGenerations(t *testing.T) {
	west := remotetest.NewClientset(service("web", flatExport, corev1.ClusterIPNone), flatSlice("web-1", "web", "10.1.0.1"))
	m := startWith(t, remotetest.NewClientset(), time.Second, 0, "gen", west)
	waitFor(t, 5*time.Second, "the first answer", answersA(t, m, "web-gen"+z, "10.1.0.1"))
	old := m.watch.cluster("gen")

	// A kubeconfig that cannot connect: the old watches keep serving,
	// and the metrics keep saying so.
	errs := unreachable("gen")
	require.NoError(t, m.watch.ReplaceLink("gen", deadClient(t)))
	waitFor(t, 5*time.Second, "the replacement tried", func() bool { return unreachable("gen") > errs })
	assert.Equal(t, 1.0, testutil.ToFloat64(linkSynced.WithLabelValues("gen")),
		"link_synced while the old watches serve")
	assert.Equal(t, 1.0, testutil.ToFloat64(linkUp.WithLabelValues("gen")),
		"link_up while the old watches serve")
	for _, kind := range []string{"service", "endpointslice"} {
		assert.Equal(t, 1.0, testutil.ToFloat64(linkObjects.WithLabelValues("gen", kind)),
			"link_objects{%s} while the old watches serve", kind)
	}

	m.watch.RemoveLink("gen")
	require.EqualValues(t, 0, seriesOf("gen"), "series of a removed link")
	// What its watches might still do as they stop writes nothing.
	old.touched(objSlice, 1)
	old.health.core.Result(watchServices, errors.New("no answer"))
	old.health.core.Result(watchServices, nil)
	old.health.setSynced()
	old.health.contact()
	old.health.latency(time.Second)
	m.watch.noteTrigger(object.ServiceKey("default", "web"), "gen", time.Now())
	m.watch.observe(object.ServiceKey("default", "web"))
	assert.EqualValues(t, 0, seriesOf("gen"), "series of a removed link re-created")
}

// clusterSeries are the metrics whose series of a cluster go with it: the
// watches' and the index's dropped addresses.
var clusterSeries = []string{"link_synced", "link_up", "link_withdrawn", "link_last_sync_timestamp_seconds",
	"link_errors_total", "link_objects", "dropped_addresses_total", "programming_duration_seconds"}

// seriesOf returns the number of series of cluster name in clusterSeries,
// as the process's registry has them.
func seriesOf(name string) int {
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		panic(err)
	}
	n := 0
	for _, f := range families {
		if !slices.Contains(clusterSeries, strings.TrimPrefix(f.GetName(), "coredns_mcmirror_")) {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cluster" && l.GetValue() == name {
					n++
				}
			}
		}
	}
	return n
}

func TestReplaceKeepsUnchanged(t *testing.T) {
	rec := &recorder{}
	s := newObjectStore(object.ToSlice, nil, cache.Indexers{sliceServiceIndex: func(obj any) ([]string, error) {
		return []string{obj.(*object.Slice).Namespace + "/" + obj.(*object.Slice).Service}, nil
	}}, rec.handler())
	require.NoError(t, s.Replace([]any{rawSlice("a-1", "a", "1"), rawSlice("a-2", "a", "2"), rawSlice("b-1", "b", "3")}, "3"))
	held := map[string]any{}
	for _, k := range keys(s) {
		held[k], _, _ = s.idx.GetByKey(k)
	}
	rec.events = nil

	// The reflector trims a watch-list's objects as they come.
	assert.Same(t, held["default/a-1"], first(s.Transformer()(rawSlice("a-1", "a", "1"))), "trim of an unchanged object did not return the held one")
	got, _ := s.Transformer()(rawSlice("a-1", "a", "7"))
	assert.True(t, got != held["default/a-1"] && got.(*object.Slice).Version == "7", "trim of a changed object returned the held one")

	// Nothing changed: nothing told, the same objects held.
	require.NoError(t, s.Replace([]any{rawSlice("a-1", "a", "1"), rawSlice("a-2", "a", "2"), rawSlice("b-1", "b", "3")}, "3"))
	assert.Empty(t, rec.events, "what a relist that changed nothing told")
	for k, o := range held {
		assert.Same(t, o, first(s.idx.GetByKey(k)), "%s replaced by a relist that did not change it", k)
	}

	// a-2 changed, b-1 gone, c-1 new.
	require.NoError(t, s.Replace([]any{rawSlice("a-1", "a", "1"), rawSlice("a-2", "a", "5"), rawSlice("c-1", "c", "6")}, "6"))
	want := []string{"update a-2@5", "add c-1@6", "del b-1@3"}
	wantKeys(t, "events", rec.events, want...)
	assert.Same(t, held["default/a-1"], first(s.idx.GetByKey("default/a-1")), "unchanged a-1 replaced")
	wantKeys(t, "held", keys(s), "default/a-1", "default/a-2", "default/c-1")
	assert.Len(t, first(s.idx.ByIndex(sliceServiceIndex, "default/b")), 0, "the index still holds slices of b")
	assert.Len(t, first(s.idx.ByIndex(sliceServiceIndex, "default/a")), 2, "the index's slices of a")
}

func TestServiceTransform(t *testing.T) {
	sel, _ := k8slabels.Parse(labels.DefaultExportSelector)
	tr := serviceTransform(sel)
	in := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", ResourceVersion: "7",
			Labels:      map[string]string{labels.Exported: labels.ExportFlat},
			Annotations: map[string]string{"big": "annotation"}},
		Spec: corev1.ServiceSpec{
			ClusterIP: "10.0.0.1", ClusterIPs: []string{"10.0.0.1", "fd00::1"},
			Ports:                    []corev1.ServicePort{{Name: "http", Port: 80}, {Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}},
			PublishNotReadyAddresses: true,
		},
	}
	out, err := tr(in)
	require.NoError(t, err)
	want := &object.Service{
		Meta: object.Meta{Name: "web", Namespace: "default", Version: "7"}, Exported: true, Mode: labels.Flat,
		ClusterIPs: []string{"10.0.0.1", "fd00::1"},
		Ports:      []object.Port{{Name: "http", Protocol: "tcp", Port: 80}, {Name: "dns", Protocol: "udp", Port: 53}}, PublishNotReady: true,
	}
	assert.Equal(t, want, out)
	// Idempotent: a transform may see its own output again.
	assert.Same(t, out, first(tr(out)), "transform of a trimmed Service made a new object")
	// Keys work on the trimmed object.
	k, err := cache.MetaNamespaceKeyFunc(out)
	assert.True(t, err == nil && k == "default/web", "key %q, %v", k, err)
	c := out.(*object.Service).DeepCopyObject().(*object.Service)
	assert.True(t, reflect.DeepEqual(c, want) && &c.Ports[0] != &want.Ports[0], "DeepCopyObject is not a deep copy")

	h := first(tr(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "h", Labels: map[string]string{"other": "x"}}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}})).(*object.Service)
	assert.True(t, h.Headless && h.ClusterIPs == nil && !h.Exported && h.Mode == labels.Gateway, "headless, unexported: %+v", h)
	// Tombstones pass through.
	tomb := cache.DeletedFinalStateUnknown{Key: "a/b"}
	assert.Equal(t, tomb, first(tr(tomb)), "tombstone changed")
}

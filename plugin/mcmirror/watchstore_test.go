package mcmirror

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/link"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// recorder is a storeHandler that records what it is told.
type recorder struct{ events []string }

func (r *recorder) handler() storeHandler {
	name := func(obj any) string { return obj.(*Slice).Name + "@" + obj.(*Slice).Version }
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

// A fetch fills in only what the watch did not say while it ran: it
// leaves alone what the store holds (the watch's version is as new) and
// what was deleted meanwhile, and is dropped whole after a relist.
func TestObjectStoreFetch(t *testing.T) {
	exported := map[string]bool{"web": true}
	rec := &recorder{}
	s := newObjectStore(toSlice, func(obj any) bool { return exported[obj.(*Slice).Service] }, nil, rec.handler())
	if f := s.beginFetch("default/web", func() {}); f != nil {
		t.Fatal("a fetch before the first list")
	}
	if err := s.Replace([]any{rawSlice("web-1", "web", "1"), rawSlice("db-1", "db", "2")}, "2"); err != nil {
		t.Fatal(err)
	}
	if got := keys(s); !slices.Equal(got, []string{"default/web-1"}) {
		t.Fatalf("held %v: only the exported Service's slice", got)
	}

	exported["db"] = true
	f := s.beginFetch("default/db", func() {})
	// While the fetch runs the watch says: db-2 added, db-3 deleted.
	_ = s.Add(rawSlice("db-2", "db", "5"))
	_ = s.Delete(rawSlice("db-3", "db", "6"))
	n := s.endFetch("default/db", f, []any{rawSlice("db-1", "db", "3"), rawSlice("db-2", "db", "4"), rawSlice("db-3", "db", "4")})
	if n != 1 {
		t.Errorf("fetch added %d, want 1 (db-1)", n)
	}
	if got := keys(s); !slices.Equal(got, []string{"default/db-1", "default/db-2", "default/web-1"}) {
		t.Fatalf("held %v", got)
	}
	if obj, _, _ := s.idx.GetByKey("default/db-2"); obj.(*Slice).Version != "5" {
		t.Errorf("the fetch overwrote the watch's newer db-2 with version %s", obj.(*Slice).Version)
	}

	// A relist while a fetch runs: the fetch is dropped.
	f = s.beginFetch("default/db", func() {})
	if err := s.Replace([]any{rawSlice("web-1", "web", "1"), rawSlice("db-1", "db", "3")}, "9"); err != nil {
		t.Fatal(err)
	}
	if n := s.endFetch("default/db", f, []any{rawSlice("db-7", "db", "8")}); n != 0 {
		t.Errorf("a fetch older than a relist added %d", n)
	}
	// The relist removed db-2 and told the handler; unchanged versions are
	// not told again.
	want := []string{"add web-1@1", "add db-2@5", "add db-1@3", "del db-2@5"}
	if !slices.Equal(rec.events, want) {
		t.Errorf("events %v, want %v", rec.events, want)
	}

	// Unexported: its slices go; a later event of one is not held.
	exported["db"] = false
	s.dropUnless("", "", func() bool { return false }) // an unknown index drops nothing
	_ = s.Update(rawSlice("db-1", "db", "10"))
	if got := keys(s); !slices.Equal(got, []string{"default/web-1"}) {
		t.Errorf("held %v after unexport", got)
	}
}

// Only the EndpointSlices of exported Services are held; a Service with
// slices that becomes exported has them fetched and answered, and dropped
// when it is unexported.
func TestOnlyExportedSlicesHeld(t *testing.T) {
	ctx := context.Background()
	objs := []runtime.Object{service("web", flatExport, corev1.ClusterIPNone), flatSlice("web-1", "web", "10.1.0.1")}
	for _, svc := range []string{"a", "b", "c"} {
		objs = append(objs, service(svc, nil, corev1.ClusterIPNone),
			flatSlice(svc+"-1", svc, "10.2.0.1", "10.2.0.2"), flatSlice(svc+"-2", svc, "10.2.0.3"))
	}
	west := fake.NewClientset(objs...)
	m := startWith(t, fake.NewClientset(), 5*time.Second, 0, "held", west)
	waitFor(t, 5*time.Second, "the exported Service", answersA(t, m, "web-held"+z, "10.1.0.1"))
	cl := m.watch.cluster("held")
	if got := keys(cl.slices); !slices.Equal(got, []string{"default/web-1"}) {
		t.Errorf("slices held %v, want only the exported Service's", got)
	}
	if v := testutil.ToFloat64(linkObjects.WithLabelValues("held", "endpointslice")); v != 1 {
		t.Errorf("link_objects{endpointslice} = %v, want 1", v)
	}

	fetches := testutil.ToFloat64(sliceFetches)
	if _, err := west.CoreV1().Services("default").Update(ctx, service("a", flatExport, corev1.ClusterIPNone), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "every endpoint of the newly exported Service", answersA(t, m, "a-held"+z, "10.2.0.1", "10.2.0.2", "10.2.0.3"))
	if got := testutil.ToFloat64(sliceFetches) - fetches; got != 1 {
		t.Errorf("%v fetches, want 1", got)
	}
	if v := testutil.ToFloat64(linkObjects.WithLabelValues("held", "endpointslice")); v != 3 {
		t.Errorf("link_objects{endpointslice} = %v, want 3", v)
	}

	if _, err := west.CoreV1().Services("default").Update(ctx, service("a", nil, corev1.ClusterIPNone), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the unexported Service's slices dropped", func() bool {
		return slices.Equal(keys(cl.slices), []string{"default/web-1"}) &&
			testutil.ToFloat64(linkObjects.WithLabelValues("held", "endpointslice")) == 1
	})
}

// The metric series of a link belong to the watches that serve it: a
// replacement that has not synced does not touch them, and once a link is
// removed its series are gone and stay gone, whatever its old watches do.
func TestLinkMetricsGenerations(t *testing.T) {
	west := fake.NewClientset(service("web", flatExport, corev1.ClusterIPNone), flatSlice("web-1", "web", "10.1.0.1"))
	m := startWith(t, fake.NewClientset(), time.Second, 0, "gen", west)
	waitFor(t, 5*time.Second, "the first answer", answersA(t, m, "web-gen"+z, "10.1.0.1"))
	old := m.watch.cluster("gen")

	// A kubeconfig that cannot connect: the old watches keep serving,
	// and the metrics keep saying so.
	dead, err := kubernetes.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	errs := testutil.ToFloat64(linkErrors.WithLabelValues("gen", link.FailureUnreachable))
	if err := m.ReplaceLink("gen", dead); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the replacement tried", func() bool {
		return testutil.ToFloat64(linkErrors.WithLabelValues("gen", link.FailureUnreachable)) > errs
	})
	for _, g := range []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{"link_synced", linkSynced.WithLabelValues("gen"), 1},
		{"link_up", linkUp.WithLabelValues("gen"), 1},
		{"link_objects{service}", linkObjects.WithLabelValues("gen", "service"), 1},
		{"link_objects{endpointslice}", linkObjects.WithLabelValues("gen", "endpointslice"), 1},
	} {
		if v := testutil.ToFloat64(g.c); v != g.want {
			t.Errorf("%s = %v while the old watches serve, want %v", g.name, v, g.want)
		}
	}

	m.RemoveLink("gen")
	if n := seriesOf("gen"); n != 0 {
		t.Fatalf("%d series of a removed link", n)
	}
	// What its watches might still do as they stop writes nothing.
	old.touched(objSlice, 1)
	old.health.result(watchServices, errNoAnswer)
	old.health.result(watchServices, nil)
	old.health.setSynced()
	old.health.contact()
	old.health.latency(time.Second)
	m.watch.noteTrigger(groupKey{"default", "web"}, "gen", time.Now())
	m.watch.observe(groupKey{"default", "web"})
	if n := seriesOf("gen"); n != 0 {
		t.Errorf("%d series of a removed link re-created", n)
	}
}

// seriesOf counts the plugin's series with cluster="name".
func seriesOf(name string) int {
	n := 0
	for _, c := range []prometheus.Collector{linkSynced, linkUp, linkWithdrawn, linkLastSync, linkErrors, linkObjects, droppedAddresses, programmingLatency} {
		ch := make(chan prometheus.Metric, 100)
		go func() { c.Collect(ch); close(ch) }()
		for m := range ch {
			var d dto.Metric
			if m.Write(&d) != nil {
				continue
			}
			for _, l := range d.GetLabel() {
				if l.GetName() == "cluster" && l.GetValue() == name {
					n++
				}
			}
		}
	}
	return n
}

// A relist keeps what did not change: trim returns the held object for a
// listed one at the same resourceVersion, Replace leaves it in place and
// tells nothing; a changed object is replaced and told, a missing one
// deleted and told.
func TestReplaceKeepsUnchanged(t *testing.T) {
	rec := &recorder{}
	s := newObjectStore(toSlice, nil, cache.Indexers{sliceServiceIndex: func(obj any) ([]string, error) {
		return []string{obj.(*Slice).Namespace + "/" + obj.(*Slice).Service}, nil
	}}, rec.handler())
	if err := s.Replace([]any{rawSlice("a-1", "a", "1"), rawSlice("a-2", "a", "2"), rawSlice("b-1", "b", "3")}, "3"); err != nil {
		t.Fatal(err)
	}
	held := map[string]any{}
	for _, k := range keys(s) {
		held[k], _, _ = s.idx.GetByKey(k)
	}
	rec.events = nil

	// The reflector trims a watch-list's objects as they come.
	if got, _ := s.Transformer()(rawSlice("a-1", "a", "1")); got != held["default/a-1"] {
		t.Error("trim of an unchanged object did not return the held one")
	}
	if got, _ := s.Transformer()(rawSlice("a-1", "a", "7")); got == held["default/a-1"] || got.(*Slice).Version != "7" {
		t.Error("trim of a changed object returned the held one")
	}

	// Nothing changed: nothing told, the same objects held.
	if err := s.Replace([]any{rawSlice("a-1", "a", "1"), rawSlice("a-2", "a", "2"), rawSlice("b-1", "b", "3")}, "3"); err != nil {
		t.Fatal(err)
	}
	if len(rec.events) != 0 {
		t.Errorf("a relist that changed nothing told %v", rec.events)
	}
	for k, o := range held {
		if got, _, _ := s.idx.GetByKey(k); got != o {
			t.Errorf("%s replaced by a relist that did not change it", k)
		}
	}

	// a-2 changed, b-1 gone, c-1 new.
	if err := s.Replace([]any{rawSlice("a-1", "a", "1"), rawSlice("a-2", "a", "5"), rawSlice("c-1", "c", "6")}, "6"); err != nil {
		t.Fatal(err)
	}
	want := []string{"update a-2@5", "add c-1@6", "del b-1@3"}
	if !slices.Equal(rec.events, want) {
		t.Errorf("events %v, want %v", rec.events, want)
	}
	if got, _, _ := s.idx.GetByKey("default/a-1"); got != held["default/a-1"] {
		t.Error("unchanged a-1 replaced")
	}
	if got := keys(s); !slices.Equal(got, []string{"default/a-1", "default/a-2", "default/c-1"}) {
		t.Errorf("held %v", got)
	}
	if objs, _ := s.idx.ByIndex(sliceServiceIndex, "default/b"); len(objs) != 0 {
		t.Errorf("the index still holds %d slices of b", len(objs))
	}
	if objs, _ := s.idx.ByIndex(sliceServiceIndex, "default/a"); len(objs) != 2 {
		t.Errorf("the index holds %d slices of a, want 2", len(objs))
	}
}

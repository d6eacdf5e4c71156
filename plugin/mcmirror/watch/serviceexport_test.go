package watch

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/remote/remotetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A Service is exported by the export selector (Linkerd's label) or by the
// stamp a ServiceExport's controller writes (labels.ServiceExportMode), each
// watched by a Service watch of its own.

// stamp returns the labels of a Service exported by a ServiceExport in
// mode, plus those of more.
func stamp(mode string, more ...map[string]string) map[string]string {
	l := map[string]string{labels.ServiceExportMode: mode}
	for _, m := range more {
		maps.Copy(l, m)
	}
	return l
}

// held returns what st holds of default/name, or nil.
func held(st *objectStore, name string) any { o, _, _ := st.idx.GetByKey("default/" + name); return o }

// The two watches make one set of exported Services: a Service stamped
// only is answered, in the stamp's mode; one in both watches is answered
// once, from the export selector's; losing either label keeps what the
// other exports (with its slices), losing both drops the name and its
// slices; a stamp added later brings the slices of a Service that had
// none sent (the EndpointSlice controller copies the stamp onto them).
func TestServiceExportStamp(t *testing.T) {
	ctx := context.Background()
	west := remotetest.NewClientset(
		service("lk", flatExport, corev1.ClusterIPNone), flatSlice("lk-1", "lk", "10.1.0.1"),
		service("mcs", stamp(labels.ModeFlat), corev1.ClusterIPNone), flatSlice("mcs-1", "mcs", "10.1.0.2", "10.1.0.3"),
		service("both", stamp(labels.ModeFlat, flatExport), corev1.ClusterIPNone), flatSlice("both-1", "both", "10.1.0.4"),
		service("gw", stamp(labels.ModeGateway), "10.100.0.5", corev1.ServicePort{Name: "http", Port: 80}),
		service("plain", nil, corev1.ClusterIPNone), flatSlice("plain-1", "plain", "10.1.0.6"),
	)
	local := remotetest.NewClientset(mirrorService("gw-west", "west", "", "10.96.0.5"))
	m := startWith(t, local, 5*time.Second, 0, "west", west)
	cl := m.watch.cluster("west")

	// Flat by the stamp: the pod addresses, no mirror needed.
	waitFor(t, 5*time.Second, "the stamped flat Service", answersA(t, m, "mcs-west"+z, "10.1.0.2", "10.1.0.3"))
	// Gateway by the stamp: the local mirror's ClusterIP.
	waitFor(t, 5*time.Second, "the stamped gateway Service", answersA(t, m, "gw-west"+z, "10.96.0.5"))
	waitFor(t, 5*time.Second, "the Service in both watches", answersA(t, m, "both-west"+z, "10.1.0.4"))
	waitFor(t, 5*time.Second, "the Linkerd-labelled Service", answersA(t, m, "lk-west"+z, "10.1.0.1"))
	waitFor(t, 5*time.Second, "-global of the stamped Services", answersA(t, m, "mcs-global"+z, "10.1.0.2", "10.1.0.3"))
	assert.True(t, answersA(t, m, "plain-west"+z, passedOn)(), "plain-west, neither labelled nor stamped, is claimed")
	wantKeys(t, "slices held", sliceKeys(cl), "default/both-1", "default/lk-1", "default/mcs-1")
	wantKeys(t, "export selector's store", keys(cl.services), "default/both", "default/lk")
	wantKeys(t, "ServiceExport store", keys(cl.mcsServices), "default/both", "default/gw", "default/mcs")
	// A Service in both is the export selector's.
	got := m.watch.Service("west", "default", "both")
	assert.False(t, got == nil || any(got) != held(cl.services, "both"),
		"Service(both) is not the export selector's object")
	got = m.watch.Service("west", "default", "mcs")
	assert.False(t, got == nil || got.Mode != labels.Flat, "Service(mcs) = %+v, want flat", got)
	waitFor(t, 5*time.Second, "the objects counted by kind", func() bool {
		return testutil.ToFloat64(linkObjects.WithLabelValues("west", "service")) == 2 &&
			testutil.ToFloat64(linkObjects.WithLabelValues("west", "mcs-service")) == 3
	})

	update := func(name string, lbls map[string]string) {
		t.Helper()
		svc := service(name, lbls, corev1.ClusterIPNone)
		_, err := west.CoreV1().Services("default").Update(ctx, svc, metav1.UpdateOptions{})
		require.NoError(t, err)
	}

	// both loses Linkerd's label: the stamp still exports it, slices and all.
	update("both", stamp(labels.ModeFlat))
	waitFor(t, 5*time.Second, "both out of the export selector's store", func() bool { return held(cl.services, "both") == nil })
	waitFor(t, 5*time.Second, "the groups built", idle(m))
	assert.True(t, answersA(t, m, "both-west"+z, "10.1.0.4")(), "both-west not answered with its pod once only stamped")
	wantKeys(t, "slices held once both is only stamped:", sliceKeys(cl), "default/both-1", "default/lk-1", "default/mcs-1")

	// Linkerd's label back.
	update("both", stamp(labels.ModeFlat, flatExport))
	waitFor(t, 5*time.Second, "both back in the export selector's store", func() bool { return held(cl.services, "both") != nil })
	// Then the stamp goes: Linkerd's label exports it, slices and all.
	update("both", flatExport)
	waitFor(t, 5*time.Second, "both out of the ServiceExport store", func() bool { return held(cl.mcsServices, "both") == nil })
	waitFor(t, 5*time.Second, "the groups built", idle(m))
	assert.True(t, answersA(t, m, "both-west"+z, "10.1.0.4")(), "both-west not answered once only Linkerd-labelled")
	wantKeys(t, "slices held once both is only Linkerd-labelled:", sliceKeys(cl), "default/both-1", "default/lk-1", "default/mcs-1")

	// The stamp goes from mcs: its names and slices go.
	update("mcs", nil)
	waitFor(t, 5*time.Second, "mcs-west passed on", answersA(t, m, "mcs-west"+z, passedOn))
	waitFor(t, 5*time.Second, "mcs's slices dropped", func() bool {
		return slices.Equal(sliceKeys(cl), []string{"default/both-1", "default/lk-1"})
	})
	assert.True(t, answersA(t, m, "lk-west"+z, "10.1.0.1")(), "lk-west, Linkerd-labelled, no longer answered")

	// A stamp on a Service whose slices were never sent: they come.
	update("plain", stamp(labels.ModeFlat))
	waitFor(t, 5*time.Second, "the newly stamped Service", answersA(t, m, "plain-west"+z, "10.1.0.6"))

	// A mirror carrying the stamp is never exported again.
	mirror := mirrorService("db-paris", "paris", "", "10.96.0.9")
	mirror.Labels[labels.ServiceExportMode] = labels.ModeGateway
	_, err := west.CoreV1().Services("default").Create(ctx, mirror, metav1.CreateOptions{})
	require.NoError(t, err)
	update("lk", stamp(labels.ModeFlat, flatExport)) // an event after the mirror's, to wait for
	waitFor(t, 5*time.Second, "lk in the ServiceExport store", func() bool { return held(cl.mcsServices, "lk") != nil })
	assert.Nil(t, held(cl.mcsServices, "db-paris"), "a stamped mirror is held as exported")
}

// A relist of one Service watch drops what it no longer exports from its
// own store only: a Service the other watch still exports keeps its name
// and its slices, and what the other store holds is left as it was.
func TestServiceExportRelist(t *testing.T) {
	west := newRelistProxy(t,
		service("lk", flatExport, corev1.ClusterIPNone), flatSlice("lk-1", "lk", "10.1.0.1"),
		service("mcs", stamp(labels.ModeFlat), corev1.ClusterIPNone), flatSlice("mcs-1", "mcs", "10.1.0.2"),
		service("both", stamp(labels.ModeFlat, flatExport), corev1.ClusterIPNone),
		flatSlice("both-1", "both", "10.1.0.3"))
	m, _ := startCounting(t, "west", west.client(t))
	waitFor(t, 5*time.Second, "the first answers", func() bool {
		return answersA(t, m, "lk-west"+z, "10.1.0.1")() && answersA(t, m, "mcs-west"+z, "10.1.0.2")() &&
			answersA(t, m, "both-west"+z, "10.1.0.3")()
	})
	cl := m.watch.cluster("west")
	lk, mcs := held(cl.services, "lk"), held(cl.mcsServices, "mcs")

	// relist has only the watch whose selector holds key relist, while
	// both is written with lbls, and waits until it is done.
	relists := 0
	relist := func(key string, lbls map[string]string) {
		t.Helper()
		west.holdLists()
		west.expireWhere(func(sel string) bool {
			return strings.Contains(sel, key) && !strings.Contains(sel, discovery.LabelServiceName) // the Services, not their slices
		})
		waitFor(t, 5*time.Second, "the relist at the gate", func() bool { active, _ := m.watch.relists.stats(); return active == 1 })
		west.api.put(service("both", lbls, corev1.ClusterIPNone))
		west.let()
		relists++
		waitFor(t, 10*time.Second, "the relist done", func() bool { return gateStats(m.watch.relists) == [2]int{0, relists} })
		waitFor(t, 5*time.Second, "the groups built", idle(m))
	}
	check := func(when string) {
		t.Helper()
		// The other ways' watches tell the relabelled Service and slice
		// by events of their own, which may come after the relist.
		waitFor(t, 5*time.Second, "both answered "+when, func() bool {
			return answersA(t, m, "both-west"+z, "10.1.0.3")() &&
				slices.Equal(sliceKeys(cl), []string{"default/both-1", "default/lk-1", "default/mcs-1"})
		})
		for name, want := range map[string]string{"lk": "10.1.0.1", "mcs": "10.1.0.2", "both": "10.1.0.3"} {
			assert.True(t, answersA(t, m, name+"-west"+z, want)(), "%s-west answers %v %s, want %s", name, second(askA(t, m, name+"-west"+z)), when, want)
		}
		wantKeys(t, "slices held "+when+":", sliceKeys(cl), "default/both-1", "default/lk-1", "default/mcs-1")
		assert.Same(t, lk, held(cl.services, "lk"), "the unchanged lk replaced in the export selector's store %s", when)
		assert.Same(t, mcs, held(cl.mcsServices, "mcs"), "the unchanged mcs replaced in the ServiceExport store %s", when)
	}

	// The ServiceExport watch relists; both has lost its stamp meanwhile.
	relist(labels.ServiceExportMode, flatExport)
	assert.False(t, held(cl.mcsServices, "both") != nil || held(cl.services, "both") == nil, "both: not only in the export selector's store after the ServiceExport relist")
	check("after the ServiceExport watch relisted")

	// The export selector's watch relists; both has its stamp back and has
	// lost Linkerd's label meanwhile.
	relist(labels.Exported, stamp(labels.ModeFlat))
	assert.False(t, held(cl.services, "both") != nil || held(cl.mcsServices, "both") == nil, "both: not only in the ServiceExport store after the export selector's relist")
	check("after the export selector's watch relisted")
}

// A cluster has synced, and Start returns, only once both Service watches
// have listed: a stamped Service is answered from the first sync on.
func TestServiceExportWatchSynced(t *testing.T) {
	west := remotetest.NewClientset(service("mcs", stamp(labels.ModeFlat), corev1.ClusterIPNone), flatSlice("mcs-1", "mcs", "10.1.0.2"))
	m := startWith(t, remotetest.NewClientset(), eventBound, 0, "west", west)
	cl := m.watch.cluster("west")
	require.True(t, cl.synced.Load(), "west not synced after Start")
	assert.True(t, cl.mcsServices.HasSynced(), "west synced before its ServiceExport watch listed")
	wantAddrs(t, m, "mcs-west"+z, "10.1.0.2")
}

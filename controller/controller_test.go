package controller

import (
	"errors"
	"testing"

	"github.com/mcmirror/mcmirror/internal/labels"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// An error is retried with backoff maxRetries times, then dropped; success
// forgets the key's failures.
func TestHandleErr(t *testing.T) {
	f := newFixture(t, fixtureOptions{}, nil)
	c := f.c
	const key = "west/default/web"
	errs := testutil.ToFloat64(syncsTotal.WithLabelValues("error"))
	dropped := testutil.ToFloat64(syncsTotal.WithLabelValues("dropped"))
	for i := range maxRetries {
		c.handleErr(f.ctx, errors.New("boom"), key)
		assert.Equal(t, i+1, c.queue.NumRequeues(key))
	}
	c.handleErr(f.ctx, errors.New("boom"), key)
	assert.Equal(t, 0, c.queue.NumRequeues(key), "dropped")
	assert.Equal(t, float64(maxRetries), testutil.ToFloat64(syncsTotal.WithLabelValues("error"))-errs)
	assert.Equal(t, float64(1), testutil.ToFloat64(syncsTotal.WithLabelValues("dropped"))-dropped)

	c.handleErr(f.ctx, errors.New("boom"), key)
	c.handleErr(f.ctx, nil, key)
	assert.Equal(t, 0, c.queue.NumRequeues(key), "success forgets")
}

// A failed write makes the sync fail (so it is retried); the next sync
// completes the work.
func TestSyncRetriesFailedWrites(t *testing.T) {
	f := newFixture(t, fixtureOptions{}, map[string][]runtime.Object{
		"west": {exported("default", "web", "true", false, tcp("http", 80))},
	})
	fail := true
	f.local.PrependReactor("create", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		if fail {
			return true, nil, errors.New("API server unavailable")
		}
		return false, nil, nil
	})
	require.Error(t, f.c.sync(f.ctx, "west/default/web"))
	f.waitCaches()
	assert.NotNil(t, f.service("default", "web-west"))
	assert.Nil(t, f.slice("default", "web-west"))
	fail = false
	assert.Equal(t, []string{"create endpointslices web-west"}, f.sync("west/default/web"))
	assert.Empty(t, f.sync("west/default/web"))
}

// The gauges say how many mirrors each cluster has.
func TestMirrorsGauge(t *testing.T) {
	f := newFixture(t, fixtureOptions{}, map[string][]runtime.Object{
		"gauge": {
			exported("default", "web", "true", false, tcp("http", 80)),
			exported("default", "db", "true", true, tcp("http", 80)), endpoints("default", "db", "db-0", "db-1"),
			exported("default", "portless", "true", true),
		},
	})
	f.converge("gauge/default/web")
	f.converge("gauge/default/db")
	f.converge("gauge/default/portless")
	assert.Equal(t, float64(2), testutil.ToFloat64(mirrorsGauge.WithLabelValues("gauge", "service")))
	assert.Equal(t, float64(2), testutil.ToFloat64(mirrorsGauge.WithLabelValues("gauge", "pod")))
	assert.Equal(t, float64(1), testutil.ToFloat64(notMirroredGauge.WithLabelValues("gauge", ReasonHeadlessWithoutPorts)))
}

// A linked cluster that cannot be listed keeps its mirrors (the last known
// state is served); an unknown cluster is not swept before the link
// sources have been read.
func TestUnsyncedLinkKeepsMirrors(t *testing.T) {
	mirror := func(cluster string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-" + cluster, Labels: map[string]string{
			ManagedBy: ManagedByValue, labels.ClusterName: cluster, RemoteService: "web", labels.MirroredService: "true"}}}
	}
	f := newFixture(t, fixtureOptions{local: []runtime.Object{mirror("dead"), mirror("later")}}, nil)
	dead := fake.NewClientset()
	dead.PrependReactor("list", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	f.c.AddClient("dead", dead)
	assert.Empty(t, f.sync("dead/default/web"))
	assert.NotNil(t, f.service("default", "web-dead"))

	sourcesSynced := false
	f.c.opts.LinksSynced = func() bool { return sourcesSynced }
	assert.Empty(t, f.sync("later/default/web"), "maybe a link Secret not read yet")
	sourcesSynced = true
	assert.Equal(t, []string{"delete services web-later"}, f.sync("later/default/web"))
}

package controller

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/link"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	k8stesting "k8s.io/client-go/testing"
)

// mirrorState lists the local Services and EndpointSlices as the fake API
// holds them, for a restart.
func (f *fixture) mirrorState() []runtime.Object {
	var state []runtime.Object
	svcs, err := f.local.CoreV1().Services("").List(f.ctx, metav1.ListOptions{})
	require.NoError(f.t, err)
	for i := range svcs.Items {
		state = append(state, &svcs.Items[i])
	}
	es, err := f.local.DiscoveryV1().EndpointSlices("").List(f.ctx, metav1.ListOptions{})
	require.NoError(f.t, err)
	for i := range es.Items {
		state = append(state, &es.Items[i])
	}
	return state
}

// After a restart, a cluster whose link Secret is refused (edited into an
// unusable kubeconfig while its link ran) is an unreachable link, not a
// removed one: its mirrors and per-pod mirrors stay. Once the Secret is
// deleted, they are swept.
func TestRefusedLinkKeepsMirrors(t *testing.T) {
	remote := west(
		exported("default", "web", "true", false, tcp("http", 80)),
		exported("default", "db", "true", true, tcp("http", 80)), endpoints("default", "db", "db-0"),
	)
	f := newFixture(t, fixtureOptions{}, remote)
	f.convergeAll("west/default/web", "west/default/db")
	before := f.serviceNames("default")
	require.Equal(t, []string{"db-0-west", "db-west", "web-west"}, before)

	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "links", Name: "west-link", Labels: map[string]string{labels.LinkClusterName: "west"}},
		Type:       labels.LinkSecretType,
	}
	// The restart: the same objects, no link to west.
	g := newFixture(t, fixtureOptions{local: append(f.mirrorState(), secret)}, nil)
	g.c.opts.LinksSynced = func() bool { return true }
	g.c.LinkRefused(secret, link.ReasonExec, errors.New("exec is not allowed"))
	assert.Contains(t, strings.Join(g.drainEvents(), "\n"), ReasonLinkSecretRefused)
	assert.Equal(t, 2, g.c.sweep())
	assert.Empty(t, g.sync("west/default/web"))
	assert.Empty(t, g.sync("west/default/db"))
	assert.Equal(t, before, g.serviceNames("default"), "every mirror kept")
	assert.NotNil(t, g.slice("default", "db-0-west"))

	// Looked at again after refusedRecheck: still there, still kept.
	g.now = g.now.Add(refusedRecheck)
	assert.Empty(t, g.sync("west/default/web"))
	// The Secret is deleted: the cluster is unlinked, its mirrors go.
	require.NoError(t, g.local.CoreV1().Secrets("links").Delete(g.ctx, "west-link", metav1.DeleteOptions{}))
	g.now = g.now.Add(refusedRecheck)
	g.convergeAll("west/default/web", "west/default/db")
	assert.Empty(t, g.serviceNames("default"))
	assert.Equal(t, 0, g.c.ports.Len())
}

// A refused Secret is remembered while its link runs (a refused update
// keeps the link running): once that link is removed, the cluster's
// mirrors stay while the Secret exists, and go once it is deleted.
func TestRefusedUpdateOfRunningLink(t *testing.T) {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "links", Name: labels.LinkSecretNamePrefix + "west"}}
	f := newFixture(t, fixtureOptions{local: []runtime.Object{secret}}, west(exported("default", "web", "true", false, tcp("http", 80))))
	f.converge("west/default/web")
	f.c.LinkRefused(secret, link.ReasonInvalid, errors.New("bad"))
	assert.Empty(t, f.sync("west/default/web"), "the running link is used")
	f.c.Remove("west")
	f.now = f.now.Add(2 * time.Minute) // past the link removal grace, and a recheck
	assert.Empty(t, f.sync("west/default/web"), "the refused Secret still names west")
	assert.NotNil(t, f.service("default", "web-west"))

	require.NoError(t, f.local.CoreV1().Secrets("links").Delete(f.ctx, secret.Name, metav1.DeleteOptions{}))
	f.now = f.now.Add(refusedRecheck)
	assert.Equal(t, []string{"delete endpointslices web-west", "delete services web-west"}, f.sync("west/default/web"))

	// The local cluster's name holds nothing.
	f.c.LinkRefused(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "links", Name: labels.LinkSecretNamePrefix + "east"}}, link.ReasonReserved, errors.New("local"))
	assert.False(t, f.c.heldByRefusedLink(f.ctx, "east"))
}

// A create that answers AlreadyExists (the Service informer has not caught
// up) leaves the Service's state unknown: its EndpointSlice is neither
// skipped-then-deleted nor touched, and the sync is retried.
func TestStaleCacheKeepsSlice(t *testing.T) {
	f := newFixture(t, fixtureOptions{}, west(exported("default", "web", "true", false, tcp("http", 80))))
	f.converge("west/default/web")
	svc, ok, _ := f.c.services.GetStore().GetByKey("default/web-west")
	require.True(t, ok)
	ports := f.c.ports.Len()
	// The cache loses the Service, as one that has not seen it yet.
	require.NoError(t, f.c.services.GetStore().Delete(svc))

	f.local.ClearActions()
	err := f.c.sync(f.ctx, "west/default/web")
	require.Error(t, err)
	assert.True(t, apierrors.IsAlreadyExists(errors.Unwrap(errors.Unwrap(err))) || strings.Contains(err.Error(), "already exists"), "%v", err)
	for _, a := range f.local.Actions() {
		assert.NotEqual(t, "delete", a.GetVerb(), "%v", a)
	}
	assert.NotNil(t, f.slice("default", "web-west"), "the live EndpointSlice stays")
	assert.Equal(t, ports, f.c.ports.Len(), "and so do its ports")
}

// A headless export over the per-slice limit is split over several
// EndpointSlices; the second sync writes nothing, and a change of one pod
// rewrites one slice.
func TestSyncHeadlessSplit(t *testing.T) {
	hosts := []string{"db-0", "db-1", "db-2", "db-3", "db-4", "db-5", "db-6"}
	f := newFixture(t, fixtureOptions{maxEndpoints: 3}, west(exported("default", "db", "true", true, tcp("http", 80)), endpoints("default", "db", hosts...)))
	f.converge("west/default/db")
	total := 0
	for _, n := range []string{"db-west", "db-west.2", "db-west.3"} {
		es := f.slice("default", n)
		require.NotNil(t, es, n)
		assert.LessOrEqual(t, len(es.Endpoints), 3)
		assert.Equal(t, "db-west", es.Labels[discoveryv1.LabelServiceName])
		total += len(es.Endpoints)
	}
	assert.Equal(t, 7, total)
	assert.Empty(t, f.sync("west/default/db"))

	f.remote("west", endpoints("default", "db", "db-0", "db-1", "db-2", "db-3", "db-4", "db-5", "db-7"))
	f.now = f.now.Add(time.Hour) // no PodGrace in this fixture anyway
	writes := f.converge("west/default/db")
	sliceWrites := slices.DeleteFunc(slices.Clone(writes), func(w string) bool {
		return !strings.HasPrefix(w, "update endpointslices db-west") && !strings.HasPrefix(w, "create endpointslices db-west")
	})
	assert.Equal(t, []string{"update endpointslices db-west.3"}, sliceWrites, "only the slice that held db-6 changes: %v", writes)
}

// A write the API server keeps refusing is an Event on the mirror and a
// metric, not only a log line at verbosity 2.
func TestPersistentWriteFailureIsReported(t *testing.T) {
	f := newFixture(t, fixtureOptions{}, west(exported("default", "web", "true", false, tcp("http", 80))))
	f.local.PrependReactor("create", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Group: "discovery.k8s.io", Kind: "EndpointSlice"}, "web-west",
			field.ErrorList{field.TooMany(field.NewPath("endpoints"), 1001, 1000)})
	})
	metric := writeErrorsTotal.WithLabelValues("create", "endpointslices", string(metav1.StatusReasonInvalid))
	before := testutil.ToFloat64(metric)
	require.Error(t, f.c.sync(f.ctx, "west/default/web"))
	assert.Equal(t, before+1, testutil.ToFloat64(metric))
	ev := strings.Join(f.drainEvents(), "\n")
	assert.Contains(t, ev, ReasonWriteFailed)
	assert.Contains(t, ev, "web-west")
}

// Ports of a mirror whose namespace is gone (with everything in it) are
// released: no object records them any more.
func TestMissingNamespaceReleasesPorts(t *testing.T) {
	f := newFixture(t, fixtureOptions{local: []runtime.Object{namespace("shop")}}, west(exported("shop", "web", "true", false, tcp("http", 80))))
	f.converge("west/shop/web")
	require.Equal(t, 1, f.c.ports.Len())
	// The namespace is deleted, and its objects with it.
	require.NoError(t, f.local.DiscoveryV1().EndpointSlices("shop").Delete(f.ctx, "web-west", metav1.DeleteOptions{}))
	require.NoError(t, f.local.CoreV1().Services("shop").Delete(f.ctx, "web-west", metav1.DeleteOptions{}))
	require.NoError(t, f.local.CoreV1().Namespaces().Delete(f.ctx, "shop", metav1.DeleteOptions{}))
	f.waitCaches()
	assert.Empty(t, f.sync("west/shop/web"))
	assert.Contains(t, strings.Join(f.drainEvents(), "\n"), ReasonNamespaceMissing)
	assert.Equal(t, 0, f.c.ports.Len(), "released")
}

// Two clusters whose mirrors want one name (foo-east of west, foo of
// east-west: both foo-east-west): the first made is kept, the other is a
// conflict (metric, Event), and it is synced again, and made, when the
// winner goes.
func TestConflictBetweenClusters(t *testing.T) {
	f := newFixture(t, fixtureOptions{}, map[string][]runtime.Object{
		"west":      {exported("default", "foo-east", "true", false, tcp("http", 80))},
		"east-west": {exported("default", "foo", "true", false, tcp("http", 80))},
	})
	conflicts := conflictsTotal.WithLabelValues("services")
	before := testutil.ToFloat64(conflicts)
	f.converge("west/default/foo-east")
	assert.Empty(t, f.sync("east-west/default/foo"))
	assert.Equal(t, before+1, testutil.ToFloat64(conflicts))
	assert.Contains(t, strings.Join(f.drainEvents(), "\n"), ReasonNameTaken)
	assert.Equal(t, "west", f.service("default", "foo-east-west").Labels[labels.ClusterName])

	f.queued()
	f.deleteRemoteService("west", "default", "foo-east")
	f.converge("west/default/foo-east")
	require.Eventually(t, func() bool { return slices.Contains(f.queued(), "east-west/default/foo") }, 5*time.Second, time.Millisecond, "the loser is synced again when the winner goes")
	f.converge("east-west/default/foo")
	assert.Equal(t, "east-west", f.service("default", "foo-east-west").Labels[labels.ClusterName])
}

// A foreign EndpointSlice holding a wanted name: left alone, counted, an
// Event on it.
func TestConflictForeignSlice(t *testing.T) {
	foreign := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "web-west", Labels: map[string]string{"app": "mine"}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	f := newFixture(t, fixtureOptions{local: []runtime.Object{foreign}}, west(exported("default", "web", "true", false, tcp("http", 80))))
	conflicts := conflictsTotal.WithLabelValues("endpointslices")
	before := testutil.ToFloat64(conflicts)
	f.sync("west/default/web")
	assert.Equal(t, before+1, testutil.ToFloat64(conflicts))
	assert.Contains(t, strings.Join(f.drainEvents(), "\n"), ReasonNameTaken)
	assert.Equal(t, map[string]string{"app": "mine"}, f.slice("default", "web-west").Labels)
}

// Throttling (429) and conflicts (409) are retried with backoff by the
// work queue until the writes go through.
func TestRetriesThrottlingAndConflicts(t *testing.T) {
	f := newFixture(t, fixtureOptions{}, west(exported("default", "web", "true", false, tcp("http", 80))))
	var mu sync.Mutex
	var attempts []time.Time
	f.local.PrependReactor("create", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, time.Now())
		if len(attempts) <= 2 {
			return true, nil, apierrors.NewTooManyRequests("slow down", 0)
		}
		return false, nil, nil
	})
	conflicted := false
	f.local.PrependReactor("create", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if !conflicted {
			conflicted = true
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "discovery.k8s.io", Resource: "endpointslices"}, "web-west", fmt.Errorf("the object has been modified"))
		}
		return false, nil, nil
	})
	throttled := writeErrorsTotal.WithLabelValues("create", "services", string(metav1.StatusReasonTooManyRequests))
	conflict := writeErrorsTotal.WithLabelValues("create", "endpointslices", string(metav1.StatusReasonConflict))
	t429, t409 := testutil.ToFloat64(throttled), testutil.ToFloat64(conflict)

	// The key is queued before the worker runs: an Add while it is being
	// synced would run it again at once, without backoff.
	f.c.queue.Add("west/default/web")
	go func() {
		for f.c.processNextWorkItem(f.ctx) {
		}
	}()
	t.Cleanup(f.c.queue.ShutDown)
	require.Eventually(t, func() bool { return f.slice("default", "web-west") != nil }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, t429+2, testutil.ToFloat64(throttled))
	assert.Equal(t, t409+1, testutil.ToFloat64(conflict))
	mu.Lock()
	require.Len(t, attempts, 3)
	// The backoff doubles from 100 ms: no hot loop.
	assert.GreaterOrEqual(t, attempts[1].Sub(attempts[0]), 90*time.Millisecond)
	assert.GreaterOrEqual(t, attempts[2].Sub(attempts[1]), 190*time.Millisecond)
	mu.Unlock()
	require.Eventually(t, func() bool { return f.c.queue.NumRequeues("west/default/web") == 0 }, 5*time.Second, 5*time.Millisecond, "forgotten on success")
}

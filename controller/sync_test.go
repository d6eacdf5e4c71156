package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/remote/remotetest"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
)

var egressIP = netip.MustParseAddr("192.0.2.10")

// The resources of the fake trackers.
var svcGVR, esGVR = corev1.SchemeGroupVersion.WithResource("services"), discoveryv1.SchemeGroupVersion.WithResource("endpointslices")

// fixture is a controller on a fake local cluster "east" linked to fake
// remote clusters. Syncs are run by hand, one key at a time.
type fixture struct {
	t       testing.TB
	ctx     context.Context
	c       *Controller
	local   *fake.Clientset
	remotes map[string]*fake.Clientset
	events  *record.FakeRecorder
	now     time.Time
}

type fixtureOptions struct {
	ports            PortRange
	createNamespaces bool
	podGrace         time.Duration
	headlessGrace    time.Duration
	// maxEndpoints replaces maxEndpointsPerSlice when set.
	maxEndpoints int
	local        []runtime.Object
	// egressService replaces the fixed egressIP (Options.EgressService).
	egressService types.NamespacedName
	// mcs is the MCS API's client (Options.MCS); nil leaves it off.
	mcs mcsclient.Interface
}

func newFixture(t testing.TB, o fixtureOptions, remotes map[string][]runtime.Object) *fixture {
	t.Helper()
	if o.ports.IsZero() {
		o.ports = PortRange{First: 30000, Last: 30099}
	}
	local := fake.NewClientset(append([]runtime.Object{namespace("default")}, o.local...)...)
	// The API server allocates ClusterIPs; the fake does not.
	var next atomic.Int32
	local.PrependReactor("create", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
		svc := a.(k8stesting.CreateAction).GetObject().(*corev1.Service)
		if svc.Spec.ClusterIP == "" {
			n := next.Add(1)
			svc.Spec.ClusterIP = fmt.Sprintf("10.96.%d.%d", n/250, n%250+1)
			svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
		}
		return false, nil, nil
	})
	f := &fixture{t: t, ctx: t.Context(), local: local, remotes: map[string]*fake.Clientset{},
		events: record.NewFakeRecorder(1000), now: time.Unix(1_000_000, 0)}
	egress := egressIP
	if o.egressService.Name != "" {
		egress = netip.Addr{}
	}
	c, err := New(Options{
		Cluster: "east", Client: local, EgressAddress: egress, EgressService: o.egressService, EgressPorts: o.ports,
		CreateNamespaces: o.createNamespaces, PodGrace: o.podGrace, HeadlessGrace: o.headlessGrace, LinkRemovalGrace: time.Minute,
		Recorder: f.events, MCS: o.mcs,
	})
	require.NoError(t, err)
	c.now = func() time.Time { return f.now }
	if o.maxEndpoints > 0 {
		c.maxEndpoints = o.maxEndpoints
	}
	f.c = c
	for name, objs := range remotes {
		f.remotes[name] = remotetest.NewClientset(objs...)
		c.links.AddClient(name, f.remotes[name])
	}
	f.start()
	return f
}

// start runs the informers, as Run does, without the workers.
func (f *fixture) start() {
	c := f.c
	for _, inf := range c.localInformers() {
		go inf.Run(f.ctx.Done())
	}
	// The handlers' first events, not only the stores: a late one would
	// enqueue a key while a test runs it.
	require.Eventually(f.t, func() bool {
		return !slices.ContainsFunc(c.localSynced,
			func(synced cache.InformerSynced) bool { return !synced() })
	}, 10*time.Second, time.Millisecond)
	c.restorePorts(klog.Background())
	c.initEgress()
	c.running.Store(true)
	c.links.Start(f.ctx)
	require.Eventually(f.t, c.linksSynced, 10*time.Second, time.Millisecond)
}

// linksSynced reports whether the link sources and every linked cluster
// have synced, and the clusters' keys are in the queue.
func (c *Controller) linksSynced() bool {
	return c.linkSourcesSynced() &&
		!slices.ContainsFunc(c.links.Serving(),
			func(r *remoteCluster) bool { return !r.enqueued.Load() })
}

// sync runs one sync of key and returns the writes it made to the local
// cluster; then it waits until the informers have seen them.
func (f *fixture) sync(key string) []string {
	f.t.Helper()
	f.local.ClearActions()
	require.NoError(f.t, f.c.sync(f.ctx, key))
	writes := writesOf(f.local.Actions())
	f.waitCaches()
	return writes
}

// writesOf lists the writes among actions: "verb resource[/subresource]
// name".
func writesOf(actions []k8stesting.Action) []string {
	var writes []string
	for _, a := range actions {
		var name string
		switch a := a.(type) {
		case interface{ GetObject() runtime.Object }: // a create or an update
			name = a.GetObject().(metav1.Object).GetName()
		case k8stesting.DeleteAction:
			name = a.GetName()
		case k8stesting.PatchAction:
			name = a.GetName()
		default:
			continue
		}
		res := a.GetResource().Resource
		if a.GetSubresource() != "" {
			res += "/" + a.GetSubresource()
		}
		writes = append(writes, a.GetVerb()+" "+res+" "+name)
	}
	return writes
}

// failing makes the local API server refuse verb on resource while the
// flag returned is true.
func (f *fixture) failing(verb, resource string) *bool {
	fail := true
	f.local.PrependReactor(verb, resource, func(k8stesting.Action) (bool, runtime.Object, error) {
		if fail {
			return true, nil, errors.New("API server unavailable")
		}
		return false, nil, nil
	})
	return &fail
}

// waitCaches waits until the local informers hold what the fake API holds.
func (f *fixture) waitCaches() {
	f.t.Helper()
	require.Eventually(f.t, func() bool {
		svcs, err := f.local.Tracker().List(svcGVR, corev1.SchemeGroupVersion.WithKind("Service"), "")
		if err != nil {
			return false
		}
		if !holds(f.c.services.GetStore(), svcs.(*corev1.ServiceList).Items, func(got, want *corev1.Service) bool {
			return semEqual(got.Spec, want.Spec) && semEqual(got.Labels, want.Labels) && semEqual(got.Annotations, want.Annotations)
		}) {
			return false
		}
		es, err := f.local.Tracker().List(esGVR, discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice"), "")
		if err != nil || !informed(f.local.Tracker(), esGVR, f.c.slices.GetStore(), ownedSliceSelector,
			es.(*discoveryv1.EndpointSliceList).Items, func(got, want *discoveryv1.EndpointSlice) bool {
				return semEqual(got.Endpoints, want.Endpoints) && semEqual(got.Ports, want.Ports)
			}) {
			return false
		}
		nss, _ := f.local.Tracker().List(corev1.SchemeGroupVersion.WithResource("namespaces"), corev1.SchemeGroupVersion.WithKind("Namespace"), "")
		return len(nss.(*corev1.NamespaceList).Items) == len(f.c.namespaces.GetStore().List())
	}, 10*time.Second, time.Millisecond)
}

// holds reports whether store holds exactly items, each the same as its
// item.
func holds[T any](store cache.Store, items []T, same func(got, want *T) bool) bool {
	if len(items) != len(store.List()) {
		return false
	}
	for i := range items {
		got, ok, _ := store.Get(&items[i])
		if !ok || !same(got.(*T), &items[i]) {
			return false
		}
	}
	return true
}

var semEqual = apiequality.Semantic.DeepEqual

// ownedSliceSelector selects the controller's EndpointSlices, as its informer does.
var ownedSliceSelector = k8slabels.SelectorFromSet(k8slabels.Set{discoveryv1.LabelManagedBy: labels.EndpointSliceManagedBy})

// converge syncs key until a sync writes nothing, and returns every write.
func (f *fixture) converge(key string) []string {
	f.t.Helper()
	return convergeBy(f.t, key, f.sync)
}

// convergeAll converges each key in turn.
func (f *fixture) convergeAll(keys ...string) {
	f.t.Helper()
	for _, k := range keys {
		f.converge(k)
	}
}

// convergeBy runs sync of key until it writes nothing, and returns every
// write.
func convergeBy(t testing.TB, key string, sync func(key string) []string) []string {
	t.Helper()
	var all []string
	for range 5 {
		w := sync(key)
		if len(w) == 0 {
			return all
		}
		all = append(all, w...)
	}
	t.Fatalf("%s: no convergence: %v", key, all)
	return nil
}

// remote applies objects to a remote cluster and waits for the informers.
func (f *fixture) remote(cluster string, objs ...runtime.Object) {
	f.t.Helper()
	cs := f.remotes[cluster]
	for _, o := range objs {
		m := o.(metav1.Object)
		gvr := svcGVR
		if _, ok := o.(*discoveryv1.EndpointSlice); ok {
			gvr = esGVR
		}
		err := cs.Tracker().Update(gvr, o, m.GetNamespace())
		if apierrors.IsNotFound(err) {
			err = cs.Tracker().Add(o)
		}
		require.NoError(f.t, err)
	}
	// Each slice carries its Service's labels, as the EndpointSlice
	// controller writes them: the watches of a way of export select the
	// slices of the Services it exports.
	require.NoError(f.t, remotetest.RelabelAll(cs))
	f.waitRemote(cluster)
}

// deleteRemoteService deletes a Service of a remote cluster and waits for
// the informers.
func (f *fixture) deleteRemoteService(cluster, ns, name string) {
	f.t.Helper()
	require.NoError(f.t, f.remotes[cluster].Tracker().Delete(svcGVR, ns, name))
	f.waitRemote(cluster)
}

func (f *fixture) waitRemote(cluster string) {
	f.t.Helper()
	r, _ := f.c.links.Get(cluster)
	tr := f.remotes[cluster].Tracker()
	sameSvc := func(got, want *corev1.Service) bool {
		return semEqual(got.Labels, want.Labels) && semEqual(got.Spec, want.Spec)
	}
	sameES := func(got, want *discoveryv1.EndpointSlice) bool { return semEqual(got.Endpoints, want.Endpoints) }
	require.Eventually(f.t, func() bool {
		svcs, _ := tr.List(svcGVR, corev1.SchemeGroupVersion.WithKind("Service"), "")
		es, _ := tr.List(esGVR, discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice"), "")
		for _, w := range r.ways {
			if !informed(tr, svcGVR, w.services.GetStore(), w.way.Services, svcs.(*corev1.ServiceList).Items, sameSvc) ||
				!informed(tr, esGVR, w.slices.GetStore(), w.way.Slices(), es.(*discoveryv1.EndpointSliceList).Items, sameES) {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond)
}

// informed reports whether store, an informer's, holds every one of items
// (what the fake tracker holds of gvr) that sel selects, and the same as
// each other one it holds, and nothing the tracker no longer holds: the
// fake lists by label selector but watches everything, so an informer
// also holds any other object it heard of.
func informed[T any](tr k8stesting.ObjectTracker, gvr schema.GroupVersionResource, store cache.Store, sel k8slabels.Selector,
	items []T, same func(got, want *T) bool) bool {
	for i := range items {
		got, ok, _ := store.Get(&items[i])
		if !ok && sel.Matches(k8slabels.Set(any(&items[i]).(metav1.Object).GetLabels())) || ok && !same(got.(*T), &items[i]) {
			return false
		}
	}
	for _, k := range store.ListKeys() {
		ns, name, _ := strings.Cut(k, "/")
		if _, err := tr.Get(gvr, ns, name); err != nil {
			return false
		}
	}
	return true
}

func (f *fixture) service(ns, name string) *corev1.Service {
	return found(f.local.CoreV1().Services(ns).Get(f.ctx, name, metav1.GetOptions{}))
}

func (f *fixture) slice(ns, name string) *discoveryv1.EndpointSlice {
	return found(f.local.DiscoveryV1().EndpointSlices(ns).Get(f.ctx, name, metav1.GetOptions{}))
}

// found is what a Get found, nil when it failed.
func found[T any](obj *T, err error) *T {
	if err != nil {
		return nil
	}
	return obj
}

func (f *fixture) serviceNames(ns string) []string {
	list, err := f.local.CoreV1().Services(ns).List(f.ctx, metav1.ListOptions{})
	require.NoError(f.t, err)
	var out []string
	for _, s := range list.Items {
		out = append(out, s.Name)
	}
	slices.Sort(out)
	return out
}

// drainEvents returns the events recorded so far.
func (f *fixture) drainEvents() []string {
	var out []string
	for {
		select {
		case e := <-f.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// west is the remote objects of a fixture with one linked cluster, west.
func west(objs ...runtime.Object) map[string][]runtime.Object {
	return map[string][]runtime.Object{"west": objs}
}

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func exported(ns, name string, mode string, headless bool, ports ...corev1.ServicePort) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: "7",
			Labels: map[string]string{labels.Exported: mode}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.97.0.10", Ports: ports},
	}
	if headless {
		s.Spec.ClusterIP = corev1.ClusterIPNone
	}
	return s
}

func tcp(name string, port int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: port, Protocol: corev1.ProtocolTCP}
}

// endpoints is a remote EndpointSlice of svc with one endpoint per host
// ("" for no hostname); hosts ending in "!" are not ready.
func endpoints(ns, svc string, hosts ...string) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: svc + "-abcde", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(80)), Protocol: new(corev1.ProtocolTCP)}},
	}
	for i, h := range hosts {
		ready := !strings.HasSuffix(h, "!")
		h = strings.TrimSuffix(h, "!")
		ep := discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.201.0.%d", i+1)}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}
		if h != "" {
			ep.Hostname = new(h)
		}
		es.Endpoints = append(es.Endpoints, ep)
	}
	return es
}

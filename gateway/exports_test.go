package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/remote"
	"github.com/mcmirror/mcmirror/internal/remote/remotetest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func exportedService(name, clusterIP string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{labels.Exported: labels.ExportGateway}},
		Spec:       corev1.ServiceSpec{ClusterIP: clusterIP, Ports: ports},
	}
}

type ep struct {
	addr, host string
	ready      *bool
}

func endpointSlice(svc, name, portName string, port int32, eps ...ep) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Port: new(port), Protocol: new(corev1.ProtocolTCP)}},
	}
	if portName != "" {
		es.Ports[0].Name = new(portName)
	}
	for _, e := range eps {
		endpoint := discoveryv1.Endpoint{Addresses: []string{e.addr}, Conditions: discoveryv1.EndpointConditions{Ready: e.ready}}
		if e.host != "" {
			endpoint.Hostname = new(e.host)
		}
		es.Endpoints = append(es.Endpoints, endpoint)
	}
	return es
}

// resolve decides from a Service and its EndpointSlices alone.
func TestResolve(t *testing.T) {
	http := corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}
	yes, no := new(true), new(false)
	web := exportedService("web", "10.96.0.1", http, corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP})
	headless := exportedService("db", corev1.ClusterIPNone, http)
	flat := exportedService("flat", "10.96.0.2", http)
	flat.Labels[labels.Exported] = labels.ExportFlat
	mirror := exportedService("web-paris", "10.96.0.3", http)
	mirror.Labels[labels.MirroredService] = labels.MirroredServiceValue
	unnamed := exportedService("single", "10.96.0.4", corev1.ServicePort{Port: 80})
	publish := exportedService("db2", corev1.ClusterIPNone, http)
	publish.Spec.PublishNotReadyAddresses = true

	webSlices := []*discoveryv1.EndpointSlice{
		endpointSlice("web", "web-a", "http", 8080, ep{addr: "10.0.0.1", ready: yes}, ep{addr: "10.0.0.2", ready: no}),
		endpointSlice("web", "web-b", "http", 8080, ep{addr: "10.0.0.3"}, ep{addr: "not-an-ip", ready: yes}),
		endpointSlice("web", "web-c", "metrics", 9090, ep{addr: "10.0.0.9", ready: yes}),
	}
	dbSlices := []*discoveryv1.EndpointSlice{
		endpointSlice("db", "db-a", "http", 5432, ep{addr: "10.0.1.0", host: "db-0", ready: yes}, ep{addr: "10.0.1.1", host: "db-1", ready: no}),
		endpointSlice("db", "db-b", "http", 5432, ep{addr: "fd00::2", host: "db-2", ready: yes}),
	}
	last := func(n int) int { return n - 1 }
	first := func(int) int { return 0 }

	for _, tc := range []struct {
		name   string
		svc    *corev1.Service
		slices []*discoveryv1.EndpointSlice
		dest   Destination
		pick   func(int) int
		want   string // the target, or
		reason Reason
	}{
		{name: "no Service", dest: Destination{Service: "web", Port: 80}, reason: ReasonNotExported},
		{name: "flat mode", svc: flat, slices: webSlices, dest: Destination{Service: "flat", Port: 80}, reason: ReasonNotExported},
		{name: "a mirror", svc: mirror, slices: webSlices, dest: Destination{Service: "web-paris", Port: 80}, reason: ReasonNotExported},
		{name: "port not exported", svc: web, slices: webSlices, dest: Destination{Service: "web", Port: 81}, reason: ReasonPortNotExposed},
		{name: "a UDP port", svc: web, slices: webSlices, dest: Destination{Service: "web", Port: 53}, reason: ReasonPortNotExposed},
		{name: "pod of a ClusterIP Service", svc: web, slices: webSlices, dest: Destination{Service: "web", Host: "web-0", Port: 80}, reason: ReasonPodNotExported},
		{name: "no such pod", svc: headless, slices: dbSlices, dest: Destination{Service: "db", Host: "db-9", Port: 80}, reason: ReasonPodNotExported},
		{name: "pod not ready", svc: headless, slices: dbSlices, dest: Destination{Service: "db", Host: "db-1", Port: 80}, reason: ReasonNoEndpoint},
		{name: "no slices", svc: web, dest: Destination{Service: "web", Port: 80}, reason: ReasonNoEndpoint},
		{name: "first ready endpoint, by the slice's port of the same name", svc: web, slices: webSlices, dest: Destination{Service: "web", Port: 80}, pick: first, want: "10.0.0.1:8080"},
		{name: "last ready endpoint: ready unknown counts as ready, bad addresses and other ports skipped", svc: web, slices: webSlices, dest: Destination{Service: "web", Port: 80}, pick: last, want: "10.0.0.3:8080"},
		{name: "pod", svc: headless, slices: dbSlices, dest: Destination{Service: "db", Host: "db-0", Port: 80}, want: "10.0.1.0:5432"},
		{name: "IPv6 pod", svc: headless, slices: dbSlices, dest: Destination{Service: "db", Host: "db-2", Port: 80}, want: "[fd00::2]:5432"},
		{name: "not ready, published anyway", svc: publish, slices: dbSlices, dest: Destination{Service: "db2", Host: "db-1", Port: 80}, want: "10.0.1.1:5432"},
		{name: "single unnamed port", svc: unnamed, slices: []*discoveryv1.EndpointSlice{endpointSlice("single", "s", "", 8000, ep{addr: "10.0.2.1"})}, dest: Destination{Service: "single", Port: 80}, want: "10.0.2.1:8000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pick := tc.pick
			if pick == nil {
				pick = first
			}
			// Selector-less Services opted in: what is tested here is
			// the choice among endpoints (trust_endpoints_test.go: which
			// endpoints may be chosen).
			got, reason := resolve(tc.svc, tc.slices, tc.dest, pick, &EndpointPolicy{Selectorless: []string{"*"}})
			assert.Equal(t, tc.reason, reason)
			if tc.want != "" {
				assert.Equal(t, netip.MustParseAddrPort(tc.want), got)
			}
		})
	}
}

// Exports follows the cluster: Services and endpoints that come and go,
// and a Service destination spread over every ready endpoint.
func TestExportsFollowsCluster(t *testing.T) {
	http := corev1.ServicePort{Name: "http", Port: 80}
	unexported := exportedService("secret", "10.96.0.9", http)
	delete(unexported.Labels, labels.Exported)
	client := remotetest.NewClientset(
		exportedService("web", "10.96.0.1", http),
		endpointSlice("web", "web-a", "http", 8080, ep{addr: "10.0.0.1"}, ep{addr: "10.0.0.2"}),
		endpointSlice("web", "web-b", "http", 8080, ep{addr: "10.0.0.3"}),
		unexported, endpointSlice("secret", "secret-a", "http", 8080, ep{addr: "10.0.9.1"}),
	)
	exports := runExports(t, client, EndpointPolicy{Selectorless: []string{"*"}})
	ctx := t.Context()
	require.Eventually(t, func() bool { return value(exportedServices) == 1 }, 5*time.Second, 5*time.Millisecond)

	webDest := Destination{Namespace: "default", Service: "web", Port: 80}
	seen := map[string]int{}
	for range 300 {
		got, reason := exports.Resolve(webDest)
		require.Empty(t, reason)
		seen[got.String()]++
	}
	assert.Len(t, seen, 3, "a Service destination goes to every ready endpoint: %v", seen)
	_, reason := exports.Resolve(Destination{Namespace: "default", Service: "secret", Port: 80})
	assert.Equal(t, ReasonNotExported, reason)

	// Endpoints go: nothing ready.
	slices := client.DiscoveryV1().EndpointSlices("default")
	for _, name := range []string{"web-a", "web-b"} {
		require.NoError(t, slices.Delete(ctx, name, metav1.DeleteOptions{}))
	}
	require.Eventually(t, func() bool { _, r := exports.Resolve(webDest); return r == ReasonNoEndpoint }, 5*time.Second, 5*time.Millisecond)

	// A Service exported later, with its endpoints.
	_, err := client.CoreV1().Services("default").Create(ctx, exportedService("late", corev1.ClusterIPNone, http), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = slices.Create(ctx, endpointSlice("late", "late-a", "http", 7000, ep{addr: "10.0.3.1", host: "late-0"}), metav1.CreateOptions{})
	require.NoError(t, err)
	lateDest := Destination{Namespace: "default", Service: "late", Host: "late-0", Port: 80}
	require.Eventually(t, func() bool { got, _ := exports.Resolve(lateDest); return got.String() == "10.0.3.1:7000" }, 5*time.Second, 5*time.Millisecond)
	// The gauge is set by the informer's event handler, which runs after
	// the store Resolve reads has changed: wait for it.
	require.Eventually(t, func() bool { return value(exportedServices) == 2 }, 5*time.Second, 5*time.Millisecond)

	// The Service goes.
	require.NoError(t, client.CoreV1().Services("default").Delete(ctx, "late", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool { _, r := exports.Resolve(lateDest); return r == ReasonNotExported }, 5*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { return value(exportedServices) == 1 }, 5*time.Second, 5*time.Millisecond)
}

// selectingWatches makes client's watches of Services keep to their label
// selector as an API server's do, which the fake's do not (they send every
// object): a Service that comes to match is added, one that stops matching
// is deleted, the others are not sent. A Service that only the
// ServiceExport stamp exports is then never seen by the selector's
// informer, which must not be what ends its streams.
func selectingWatches(client *fake.Clientset) {
	client.PrependWatchReactor("services", func(action k8stesting.Action) (bool, watch.Interface, error) {
		opts := action.(k8stesting.WatchActionImpl).ListOptions
		sel, err := k8slabels.Parse(opts.LabelSelector)
		if err != nil {
			return true, nil, err
		}
		// What the watch's list held: those that match (nothing writes
		// between the informer's list and its watch here).
		matched := map[string]bool{} // by key; the filter runs on one goroutine
		list, err := client.Tracker().List(action.GetResource(), corev1.SchemeGroupVersion.WithKind("Service"), action.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		for _, svc := range list.(*corev1.ServiceList).Items {
			matched[svc.Namespace+"/"+svc.Name] = sel.Matches(k8slabels.Set(svc.Labels))
		}
		w, err := client.Tracker().Watch(action.GetResource(), action.GetNamespace(), opts)
		if err != nil {
			return true, nil, err
		}
		return true, watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
			svc, ok := ev.Object.(*corev1.Service)
			if !ok {
				return ev, true
			}
			key := svc.Namespace + "/" + svc.Name
			was, is := matched[key], ev.Type != watch.Deleted && sel.Matches(k8slabels.Set(svc.Labels))
			matched[key] = is
			switch {
			case ev.Type == watch.Deleted:
				return ev, was
			case is && !was:
				ev.Type = watch.Added
			case !is && was:
				ev.Type = watch.Deleted
			case !is:
				return ev, false
			}
			return ev, true
		}), nil
	})
}

// relabel sets (or, with value "", removes) the label key of the Service
// default/name through client, and returns when it wrote it.
func relabel(t *testing.T, client *fake.Clientset, name, key, value string) time.Time {
	t.Helper()
	ctx := context.Background()
	svc, err := client.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	if value == "" {
		delete(svc.Labels, key)
	} else {
		svc.Labels[key] = value
	}
	at := time.Now()
	_, err = client.CoreV1().Services("default").Update(ctx, svc, metav1.UpdateOptions{})
	require.NoError(t, err)
	return at
}

// newExports is Exports over client with the default export selector.
func newExports(t *testing.T, client *fake.Clientset) *Exports {
	t.Helper()
	sel, err := k8slabels.Parse(labels.DefaultExportSelector)
	require.NoError(t, err)
	return NewExports(client, sel)
}

// runExports runs Exports over client with the default export selector and
// policy, until t ends: not synced before Run, synced once it returns.
func runExports(t *testing.T, client *fake.Clientset, policy EndpointPolicy) *Exports {
	t.Helper()
	exports := newExports(t, client)
	exports.SetPolicy(policy)
	assert.False(t, exports.HasSynced())
	ctx := t.Context()
	require.NoError(t, exports.Run(ctx))
	assert.True(t, exports.HasSynced())
	return exports
}

// seen waits until the informer of route i holds the Service default/name
// with label key set to value, or, for value "", without it or not at all
// (a watch that selects deletes it): proof that a change relabel made to a
// Service the informer held was delivered, before a test asserts that it
// changed nothing.
func seen(t *testing.T, e *Exports, i int, name, key, value string) {
	t.Helper()
	require.Eventually(t, func() bool {
		obj, ok, _ := e.routes[i].services.GetStore().GetByKey("default/" + name)
		return (!ok && value == "") || (ok && obj.(*corev1.Service).Labels[key] == value)
	}, 5*time.Second, time.Millisecond, "route %d sees %s=%q on %s", i, key, value, name)
}

// A Service is exported by the export selector or by the ServiceExport
// stamp, whichever: a Service only stamped resolves, whatever the selector,
// in gateway mode only (a mirror never); the stamp taken off, or turned to
// flat, withdraws it unless the selector still exports it, and taking the
// selector's label off one that is also stamped withdraws nothing. So
// with watches that send every object (the fake's: each informer checks
// its selector again) and with watches that select.
func TestExportsServiceExportStamp(t *testing.T) {
	for _, selecting := range []bool{false, true} {
		t.Run(fmt.Sprintf("selecting watches %v", selecting), func(t *testing.T) {
			http := corev1.ServicePort{Name: "http", Port: 80}
			objs := []runtime.Object{}
			for i, s := range []struct {
				name string
				lbls map[string]string
			}{
				{"web", map[string]string{labels.ServiceExportMode: labels.ModeGateway}},
				{"toflat", map[string]string{labels.ServiceExportMode: labels.ModeGateway}},
				{"gone", map[string]string{labels.ServiceExportMode: labels.ModeGateway}},
				{"flat", map[string]string{labels.ServiceExportMode: labels.ModeFlat}},
				{"both", map[string]string{labels.Exported: labels.ExportGateway, labels.ServiceExportMode: labels.ModeGateway}},
				{"both2", map[string]string{labels.Exported: labels.ExportGateway, labels.ServiceExportMode: labels.ModeGateway}},
				{"web-paris", map[string]string{labels.ServiceExportMode: labels.ModeGateway, labels.MirroredService: labels.MirroredServiceValue}},
			} {
				svc := exportedService(s.name, "10.96.1.1", http)
				svc.Labels = s.lbls
				objs = append(objs, svc, endpointSlice(s.name, s.name+"-a", "http", 8080, ep{addr: fmt.Sprintf("10.0.%d.1", i)}))
			}
			client := remotetest.NewClientset(objs...)
			if selecting {
				selectingWatches(client)
			}
			exports := runExports(t, client, EndpointPolicy{Selectorless: []string{"*"}})

			resolves := func(name string) Reason {
				_, r := exports.Resolve(Destination{Namespace: "default", Service: name, Port: 80})
				return r
			}
			got, reason := exports.Resolve(Destination{Namespace: "default", Service: "web", Port: 80})
			require.Empty(t, reason, "a Service only stamped, gateway mode")
			assert.Equal(t, "10.0.0.1:8080", got.String())
			assert.Empty(t, resolves("both"), "stamped and selected")
			assert.Equal(t, ReasonNotExported, resolves("flat"), "stamped flat")
			assert.Equal(t, ReasonNotExported, resolves("web-paris"), "a mirror, stamped")
			// Every Service exported either way, once, flat ones too (as the
			// selector's remote-discovery ones), mirrors never.
			require.Eventually(t, func() bool { return value(exportedServices) == 6 }, 5*time.Second, 5*time.Millisecond)

			relabel(t, client, "toflat", labels.ServiceExportMode, labels.ModeFlat)
			require.Eventually(t, func() bool { return resolves("toflat") == ReasonNotExported }, 5*time.Second, time.Millisecond, "stamp turned flat")
			relabel(t, client, "gone", labels.ServiceExportMode, "")
			require.Eventually(t, func() bool { return resolves("gone") == ReasonNotExported }, 5*time.Second, time.Millisecond, "stamp removed")
			require.Eventually(t, func() bool { return value(exportedServices) == 5 }, 5*time.Second, 5*time.Millisecond)

			relabel(t, client, "both", labels.ServiceExportMode, "")
			seen(t, exports, 1, "both", labels.ServiceExportMode, "")
			assert.Empty(t, resolves("both"), "the stamp removed, the selector's label stays")
			relabel(t, client, "both2", labels.Exported, "")
			seen(t, exports, 0, "both2", labels.Exported, "")
			assert.Empty(t, resolves("both2"), "the selector's label removed, the stamp stays")
			assert.Equal(t, 5.0, value(exportedServices))
			assert.Empty(t, resolves("web"))
		})
	}
}

// The streams of a Service exported by the ServiceExport stamp are guarded
// as those of one the selector exports: the stamp taken off, or turned to
// flat, ends them within the bound (from the stamp's informer's event: a
// watch that selects sends the selector's informer nothing); a Service
// exported both ways keeps them while either way still exports it.
func TestServiceExportStampGuardsStreams(t *testing.T) {
	stamp := func(mode string) map[string]string { return map[string]string{labels.ServiceExportMode: mode} }
	both := func() map[string]string {
		return map[string]string{labels.Exported: labels.ExportGateway, labels.ServiceExportMode: labels.ModeGateway}
	}
	for _, tc := range []struct {
		name       string
		lbls       map[string]string
		key, value string // the change
		route      int    // whose informer sees it
		ends       bool
	}{
		{"stamp removed", stamp(labels.ModeGateway), labels.ServiceExportMode, "", 1, true},
		{"stamp turned flat", stamp(labels.ModeGateway), labels.ServiceExportMode, labels.ModeFlat, 1, true},
		{"both, the selector's label removed", both(), labels.Exported, "", 0, false},
		{"both, the stamp removed", both(), labels.ServiceExportMode, "", 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, client, _ := guardedPairLabelled(t, tc.lbls, selectingWatches)
			exports := p.ingress.Resolver.(*Exports)
			c, br, _ := p.stream(t)
			before := value(streamsEnded.WithLabelValues("east", streamNotExported))
			start := relabel(t, client, "web", tc.key, tc.value)
			if tc.ends {
				requireEnded(t, c, start, tc.name)
				require.Eventually(t, func() bool { return value(streamsEnded.WithLabelValues("east", streamNotExported)) == before+1 }, time.Second, time.Millisecond)
				resp, _ := connect(t, dialIngress(t, p.ingressAddr, p.east.ClientConfig("west", nil)), connectRequest("web.default:80"))
				assert.Equal(t, http.StatusForbidden, resp.StatusCode, "a new stream")
				return
			}
			seen(t, exports, tc.route, "web", tc.key, tc.value)
			_, why := exports.stillAllowed(Destination{Namespace: "default", Service: "web", Port: 80})
			require.Empty(t, why)
			time.Sleep(300 * time.Millisecond) // the event and a sweep
			requireOpen(t, c, br, tc.name)
			assert.Equal(t, before, value(streamsEnded.WithLabelValues("east", streamNotExported)))
		})
	}
}

// The ingress answers not_synced until it has listed the Services of both
// ways of export: the ServiceExport's informer synced last keeps it so.
func TestExportsNotSyncedUntilServiceExportsListed(t *testing.T) {
	client := remotetest.NewClientset()
	var failing atomic.Bool
	failing.Store(true)
	client.PrependReactor("list", "services", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.(k8stesting.ListActionImpl).ListOptions.LabelSelector == remote.Stamped.Services.String() && failing.Load() {
			return true, nil, errors.New("not yet")
		}
		return false, nil, nil
	})
	exports := newExports(t, client)
	ctx := t.Context()
	ran := make(chan error, 1)
	go func() { ran <- exports.Run(ctx) }()
	require.Eventually(t, func() bool { return exports.routes[0].services.HasSynced() && exports.routes[0].slices.HasSynced() }, 5*time.Second, time.Millisecond)
	assert.False(t, exports.HasSynced(), "the ServiceExport's Services not listed yet")
	failing.Store(false)
	require.NoError(t, within(t, ran, 10*time.Second,
		"Run did not return once every informer could sync"))
	assert.True(t, exports.HasSynced())
}

package controller

import (
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// Export by ServiceExport: the exporting cluster's controller stamps
// labels.ServiceExportMode on the Service, and the linked clusters mirror
// it as they mirror a Service that Linkerd's label exports.

// stamped is a remote Service exported by a ServiceExport only: the stamp,
// no Linkerd label.
func stamped(ns, name, mode string, headless bool, ports ...corev1.ServicePort) *corev1.Service {
	s := exported(ns, name, "", headless, ports...)
	s.Labels = map[string]string{labels.ServiceExportMode: mode}
	return s
}

// unlabelled is s without any export label.
func unlabelled(s *corev1.Service) *corev1.Service {
	s = s.DeepCopy()
	s.Labels = nil
	return s
}

// A Service stamped "gateway", and nothing else, gets the mirror a Linkerd
// export gets: a ClusterIP Service and its EndpointSlice to the egress;
// its slices' changes are followed; removing the stamp unexports it.
func TestSyncServiceExportGateway(t *testing.T) {
	f := newFixture(t, fixtureOptions{}, west(
		stamped("default", "web", labels.ModeGateway, false, tcp("http", 80)),
		endpoints("default", "web", ""),
		exported("default", "api", "true", false, tcp("http", 80)),
	))
	r, _ := f.c.links.Get("west")
	// Each Service informer lists by its own selector (the fake lists by
	// label selector).
	_, bySelector, _ := r.ways[0].services.GetStore().GetByKey("default/web")
	_, byStamp, _ := r.ways[1].services.GetStore().GetByKey("default/web")
	assert.False(t, bySelector, "the export selector's informer does not list it")
	assert.True(t, byStamp, "the ServiceExport informer lists it")
	// The link's sync enqueues it beside the Linkerd export; so do a
	// change of its remote EndpointSlice, a sweep and a change of its
	// namespace. (Before any sync: no mirror's event enqueues it too.)
	require.Eventually(t, r.enqueued.Load, 10*time.Second, time.Millisecond)
	assert.Equal(t, []string{"west/default/api", "west/default/web"}, f.queued())
	f.remote("west", endpoints("default", "web", "", ""))
	assert.Equal(t, []string{"west/default/web"}, f.queued())
	assert.Equal(t, 2, f.c.sweep())
	assert.Equal(t, []string{"west/default/api", "west/default/web"}, f.queued())
	f.c.onNamespace(namespace("default"))
	assert.Equal(t, []string{"west/default/api", "west/default/web"}, f.queued())

	assert.Equal(t, []string{"create services web-west", "create endpointslices web-west"}, f.sync("west/default/web"))
	f.converge("west/default/api")
	web, api := f.service("default", "web-west"), f.service("default", "api-west")
	require.NotNil(t, web)
	assert.Equal(t, map[string]string{
		labels.MirroredService: "true", labels.ClusterName: "west", labels.ManagedBy: labels.ManagedByValue, labels.RemoteService: "web", labels.ModeLabel: labels.ModeGateway,
	}, web.Labels)
	assert.Equal(t, api.Spec.Ports, web.Spec.Ports)
	assert.Equal(t, api.Spec.Type, web.Spec.Type)
	assert.Equal(t, "80/TCP=30000", web.Annotations[labels.EgressPorts])
	es := f.slice("default", "web-west")
	require.NotNil(t, es)
	require.Len(t, es.Endpoints, 1)
	assert.Equal(t, []string{egressIP.String()}, es.Endpoints[0].Addresses)
	assert.Empty(t, f.sync("west/default/web"), "second sync of unchanged state")

	// The stamp removed: unexported, as when Linkerd's label is removed.
	f.remote("west", unlabelled(stamped("default", "web", labels.ModeGateway, false, tcp("http", 80))))
	assert.ElementsMatch(t, []string{"delete services web-west", "delete endpointslices web-west"}, f.converge("west/default/web"))
	assert.Equal(t, []string{"api-west"}, f.serviceNames("default"))
	assert.Equal(t, 1, f.c.ports.Len(), "web's egress port is released")
}

// A Service stamped "flat" is mirrored as Linkerd's remote-discovery: a
// headless mirror only, no EndpointSlice, no egress port, no per-pod
// mirror; the stamp removed, the mirror goes.
func TestSyncServiceExportFlat(t *testing.T) {
	f := newFixture(t, fixtureOptions{}, west(
		stamped("default", "db", labels.ModeFlat, true, tcp("http", 80)),
		endpoints("default", "db", "db-0", "db-1"),
		exported("default", "linkerd", labels.ExportFlat, true, tcp("http", 80)),
		endpoints("default", "linkerd", "linkerd-0", "linkerd-1"),
	))
	assert.Equal(t, []string{"create services db-west"}, f.sync("west/default/db"))
	assert.Equal(t, []string{"create services linkerd-west"}, f.sync("west/default/linkerd"))
	db, linkerd := f.service("default", "db-west"), f.service("default", "linkerd-west")
	require.NotNil(t, db)
	assert.Equal(t, labels.ModeFlat, db.Labels[labels.ModeLabel])
	assert.Equal(t, corev1.ClusterIPNone, db.Spec.ClusterIP)
	assert.Empty(t, db.Annotations[labels.EgressPorts])
	assert.Nil(t, f.slice("default", "db-west"))
	assert.Equal(t, linkerd.Spec, db.Spec, "as Linkerd's remote-discovery")
	delete(linkerd.Labels, labels.RemoteService)
	delete(db.Labels, labels.RemoteService)
	assert.Equal(t, linkerd.Labels, db.Labels, "as Linkerd's remote-discovery")
	assert.Empty(t, f.sync("west/default/db"))
	assert.Equal(t, 0, f.c.ports.Len())

	// Stamped gateway instead: a ClusterIP mirror (no named endpoints
	// after the headless grace; here the hostnames make it headless).
	f.remote("west", stamped("default", "db", labels.ModeGateway, true, tcp("http", 80)))
	f.converge("west/default/db")
	assert.Equal(t, labels.ModeGateway, f.service("default", "db-west").Labels[labels.ModeLabel])
	assert.Equal(t, []string{"db-0-west", "db-1-west", "db-west", "linkerd-west"}, f.serviceNames("default"))

	f.remote("west", unlabelled(stamped("default", "db", labels.ModeFlat, true, tcp("http", 80))))
	f.converge("west/default/db")
	assert.Equal(t, []string{"linkerd-west"}, f.serviceNames("default"))
	assert.Equal(t, 0, f.c.ports.Len())
}

// Exported both ways, a Service has one mirror; removing either label
// keeps it, unchanged; removing both deletes it.
func TestSyncServiceExportAndLinkerd(t *testing.T) {
	both := func(linkerd, stamp string) *corev1.Service {
		s := exported("default", "web", "", false, tcp("http", 80))
		s.Labels = map[string]string{}
		if linkerd != "" {
			s.Labels[labels.Exported] = linkerd
		}
		if stamp != "" {
			s.Labels[labels.ServiceExportMode] = stamp
		}
		return s
	}
	f := newFixture(t, fixtureOptions{}, west(both("true", labels.ModeGateway), endpoints("default", "web", "")))
	r, _ := f.c.links.Get("west")
	_, bySelector, _ := r.ways[0].services.GetStore().GetByKey("default/web")
	_, byStamp, _ := r.ways[1].services.GetStore().GetByKey("default/web")
	require.True(t, bySelector && byStamp, "in both informers")
	require.Eventually(t, r.enqueued.Load, 10*time.Second, time.Millisecond)
	assert.Equal(t, []string{"west/default/web"}, f.queued(), "one key")

	assert.Equal(t, []string{"create services web-west", "create endpointslices web-west"}, f.converge("west/default/web"))
	assert.Equal(t, []string{"web-west"}, f.serviceNames("default"))
	before := f.service("default", "web-west")

	unchanged := func(what string) {
		t.Helper()
		assert.Empty(t, f.converge("west/default/web"), what)
		after := f.service("default", "web-west")
		require.NotNil(t, after, what)
		assert.Equal(t, before.Spec.ClusterIP, after.Spec.ClusterIP, what)
		assert.Equal(t, before.Annotations[labels.EgressPorts], after.Annotations[labels.EgressPorts], what)
		assert.Equal(t, labels.ModeGateway, after.Labels[labels.ModeLabel], what)
		es := f.slice("default", "web-west")
		require.NotNil(t, es, what)
		assert.Equal(t, []string{egressIP.String()}, es.Endpoints[0].Addresses, what)
	}
	// Linkerd's label removed, the stamp kept: still exported.
	f.remote("west", both("", labels.ModeGateway))
	unchanged("Linkerd's label removed")
	// Back, then the stamp removed: still exported.
	f.remote("west", both("true", labels.ModeGateway))
	unchanged("Linkerd's label back")
	f.remote("west", both("true", ""))
	unchanged("the stamp removed")

	// Linkerd's label decides the mode when both are there.
	f.remote("west", both(labels.ExportFlat, labels.ModeGateway))
	f.converge("west/default/web")
	assert.Equal(t, labels.ModeFlat, f.service("default", "web-west").Labels[labels.ModeLabel])
	assert.Nil(t, f.slice("default", "web-west"))

	f.remote("west", both("", ""))
	f.converge("west/default/web")
	assert.Empty(t, f.serviceNames("default"))
	assert.Equal(t, 0, f.c.ports.Len())
}

// A stamp other than gateway or flat, or one on a mirror, exports nothing.
func TestSyncServiceExportNotStamped(t *testing.T) {
	mirror := stamped("default", "mirror", labels.ModeGateway, false, tcp("http", 80))
	mirror.Labels[labels.MirroredService] = labels.MirroredServiceValue
	f := newFixture(t, fixtureOptions{}, west(stamped("default", "odd", "yes", false, tcp("http", 80)), mirror))
	r, _ := f.c.links.Get("west")
	// The fake watches everything: a Service its selector does not list
	// still reaches the informer once it changes.
	f.remote("west", stamped("default", "odd", "yes", false, tcp("http", 81)))
	require.Eventually(t, func() bool {
		obj, held, _ := r.ways[1].services.GetStore().GetByKey("default/odd")
		return held && obj.(*corev1.Service).Spec.Ports[0].Port == 81
	}, 10*time.Second, time.Millisecond)
	assert.Empty(t, f.sync("west/default/odd"))
	assert.Empty(t, f.sync("west/default/mirror"))
	assert.Empty(t, f.serviceNames("default"))
	assert.Nil(t, f.slice("default", "odd-west"))
}

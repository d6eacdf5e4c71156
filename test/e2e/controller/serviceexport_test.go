package controller_test

import (
	"testing"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Export by ServiceExport: a Service of west stamped with
// serviceexport.mcmirror.dev/mode, without Linkerd's label, gets its mirror
// in east (gateway: an EndpointSlice to the egress; flat: a headless
// mirror only); a Service exported both ways keeps its mirror when
// Linkerd's label goes (the export selector's watch deletes it, the
// stamp's keeps it); removing the stamp deletes the mirror.
func TestServiceExportStamp(t *testing.T) {
	const ns = "e2e-svcexport"
	ctx := setUp(t, ns, "east", "west")
	west := env.Cluster("west")
	p := startController(t, "controller")

	require.NoError(t, west.Apply(ctx, harness.ClusterIPService(ns, "web", 80, map[string]string{labels.ServiceExportMode: labels.ModeGateway})))
	require.NoError(t, west.Apply(ctx, harness.ClusterIPService(ns, "flat", 80, map[string]string{labels.ServiceExportMode: labels.ModeFlat})))
	require.NoError(t, west.Apply(ctx, harness.ClusterIPService(ns, "both", 80,
		map[string]string{labels.ServiceExportMode: labels.ModeGateway, labels.Exported: labels.ExportGateway})))
	// Neither gateway nor flat: not exported.
	require.NoError(t, west.Apply(ctx, harness.ClusterIPService(ns, "odd", 80, map[string]string{labels.ServiceExportMode: "yes"})))

	var before map[string]corev1.Service
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m := mirrors(c, ns)
		assert.Equal(c, []string{"both-west", "flat-west", "web-west"}, names(m))
		web := m["web-west"]
		assert.Equal(c, labels.ModeGateway, web.Labels[labels.ModeLabel])
		assert.Equal(c, "west", web.Labels[labels.ClusterName])
		assert.Equal(c, "web", web.Labels[labels.RemoteService])
		assert.NotEqual(c, corev1.ClusterIPNone, web.Spec.ClusterIP)
		assert.Contains(c, web.Annotations[labels.EgressPorts], "80/TCP=")
		assert.Equal(c, labels.ModeFlat, m["flat-west"].Labels[labels.ModeLabel])
		assert.Equal(c, corev1.ClusterIPNone, m["flat-west"].Spec.ClusterIP)
		// The flat mirror has no EndpointSlice: check the others.
		delete(m, "flat-west")
		assertConsistent(c, ctx, ns, m)
		assertPortsUnique(c, ctx)
		before = m
	}, wait, tick)
	es, err := env.Cluster("east").Client.DiscoveryV1().EndpointSlices(ns).Get(ctx, "web-west", metav1.GetOptions{})
	require.NoError(t, err)
	require.Len(t, es.Endpoints, 1)
	assert.Equal(t, []string{egress}, es.Endpoints[0].Addresses, "web-west's EndpointSlice points at the egress")
	_, err = env.Cluster("east").Client.DiscoveryV1().EndpointSlices(ns).Get(ctx, "flat-west", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "a flat mirror has no EndpointSlice: %v", err)

	// Linkerd's label removed, the stamp kept: the mirror stays, the same
	// object; it records the remote Service's new resourceVersion, so the
	// change was seen.
	require.NoError(t, west.LabelService(ctx, ns, "both", labels.Exported, ""))
	remote := service(t, west, ns, "both")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m := mirrors(c, ns)
		b, ok := m["both-west"]
		require.True(c, ok, "still exported by its stamp")
		assert.Equal(c, remote.ResourceVersion, b.Annotations[labels.RemoteResourceVersion])
		assert.Equal(c, before["both-west"].UID, b.UID, "both-west was not recreated")
		assert.Equal(c, before["both-west"].Spec.ClusterIP, b.Spec.ClusterIP)
		assert.Equal(c, before["both-west"].Annotations[labels.EgressPorts], b.Annotations[labels.EgressPorts])
		delete(m, "flat-west")
		assertConsistent(c, ctx, ns, m)
	}, wait, tick)
	env.RequireAlive(t, p)

	// The stamps removed: unexported, the mirrors go.
	require.NoError(t, west.LabelService(ctx, ns, "web", labels.ServiceExportMode, ""))
	require.NoError(t, west.LabelService(ctx, ns, "both", labels.ServiceExportMode, ""))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m := mirrors(c, ns)
		assert.Equal(c, []string{"flat-west"}, names(m))
		_, err = env.Cluster("east").Client.DiscoveryV1().EndpointSlices(ns).Get(ctx, "web-west", metav1.GetOptions{})
		assert.True(c, apierrors.IsNotFound(err), "web-west's EndpointSlice is deleted: %v", err)
		ports, err := env.Cluster("east").EgressPorts(ctx, "")
		require.NoError(c, err)
		assert.NotContains(c, ports, ns+"/web-west")
		assert.NotContains(c, ports, ns+"/both-west")
	}, wait, tick)
	env.RequireAlive(t, p)
}

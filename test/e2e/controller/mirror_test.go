package controller_test

import (
	"fmt"
	"testing"

	"github.com/mcmirror/mcmirror/controller"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// Export, scale 3→5→2, port change, unexport: the mirrors follow, per-pod
// mirrors included, and are consistent at every step.
func TestExportScaleUnexport(t *testing.T) {
	const ns = "e2e-scale"
	ctx := setUp(t, ns, "east", "west", "paris")
	west, paris := env.Cluster("west"), env.Cluster("paris")
	startController(t, "controller")

	require.NoError(t, west.Apply(ctx, statefulSet(ns, "nginx-svc", 3, "true")))
	require.NoError(t, west.Apply(ctx, clusterIPService(ns, "web", 80, "true")))
	require.NoError(t, paris.Apply(ctx, statefulSet(ns, "nginx-svc", 2, "true")))

	expect := func(westPods, parisPods int) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			m := mirrors(c, ns)
			assert.Equal(c, ordinals("nginx-svc-set", "west", westPods), podMirrors(m, "nginx-svc-west"))
			assert.Equal(c, ordinals("nginx-svc-set", "paris", parisPods), podMirrors(m, "nginx-svc-paris"))
			hm := m["nginx-svc-west"]
			assert.Equal(c, corev1.ClusterIPNone, hm.Spec.ClusterIP)
			assert.Equal(c, "west", hm.Labels[labels.ClusterName])
			assert.Equal(c, "true", hm.Labels[labels.MirroredService])
			assert.NotEmpty(c, hm.Annotations[labels.RemoteResourceVersion])
			assert.Contains(c, m, "web-west")
			assertConsistent(c, ctx, ns, m)
			assertPortsUnique(c, ctx)
		}, wait, tick, "west %d pods, paris %d pods", westPods, parisPods)
	}
	expect(3, 2)
	require.NoError(t, west.Scale(ctx, ns, "nginx-svc-set", 5))
	expect(5, 2)
	require.NoError(t, west.Scale(ctx, ns, "nginx-svc-set", 2))
	expect(2, 2)

	// Port change: the mirror's port follows, with an egress port of its
	// own.
	oldPorts := mirrors(t, ns)["web-west"].Annotations[labels.EgressPorts]
	require.NoError(t, west.Apply(ctx, clusterIPService(ns, "web", 8080, "true")))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m := mirrors(c, ns)
		web := m["web-west"]
		require.Len(c, web.Spec.Ports, 1)
		assert.Equal(c, int32(8080), web.Spec.Ports[0].Port)
		assert.Contains(c, web.Annotations[labels.EgressPorts], "8080/TCP=")
		assert.NotEqual(c, oldPorts, web.Annotations[labels.EgressPorts])
		assertConsistent(c, ctx, ns, m)
	}, wait, tick)

	// Unexport (Linkerd #8475): every mirror of west's nginx-svc goes,
	// per-pod ones included; paris's stay.
	require.NoError(t, west.LabelService(ctx, ns, "nginx-svc", labels.Exported, ""))
	waitMirrors(t, ns, "nginx-svc-paris", "nginx-svc-set-0-paris", "nginx-svc-set-1-paris", "web-west")
}

// A Service (and an EndpointSlice) that the controller did not make keeps
// its name: untouched, reported with an Event; the mirror appears once it
// is gone.
func TestForeignObjectsUntouched(t *testing.T) {
	const ns = "e2e-foreign"
	ctx := setUp(t, ns, "east", "west")
	east, west := env.Cluster("east"), env.Cluster("west")
	require.NoError(t, east.Apply(ctx, fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata: {name: nginx-svc-west, namespace: %s, labels: {app: mine}}
spec:
  selector: {app: mine}
  ports: [{name: x, port: 1234}]
`, ns)))
	foreign := service(t, east, ns, "nginx-svc-west")

	startController(t, "controller")
	require.NoError(t, west.Apply(ctx, statefulSet(ns, "nginx-svc", 2, "true")))
	require.NoError(t, west.Apply(ctx, clusterIPService(ns, "other", 80, "true")))

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, hasEvent(c, "east", ns, func(e corev1.Event) bool {
			return e.Reason == controller.ReasonNameTaken && e.InvolvedObject.Name == "nginx-svc-west" && e.InvolvedObject.UID == foreign.UID
		}), "a %s Event on the foreign Service", controller.ReasonNameTaken)
		assert.Contains(c, mirrors(c, ns), "other-west", "other exports are mirrored meanwhile")
	}, wait, tick)
	now := service(t, east, ns, "nginx-svc-west")
	assert.Equal(t, foreign.ResourceVersion, now.ResourceVersion, "the foreign Service is untouched")
	assert.Empty(t, podMirrors(mirrors(t, ns), "nginx-svc-west"), "no per-pod mirrors for a mirror that cannot exist")

	// The operator removes it: the mirror takes the name.
	require.NoError(t, east.Client.CoreV1().Services(ns).Delete(ctx, "nginx-svc-west", metav1.DeleteOptions{}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m := mirrors(c, ns)
		assert.Equal(c, labels.ManagedByValue, m["nginx-svc-west"].Labels[labels.ManagedBy])
		assert.Equal(c, ordinals("nginx-svc-set", "west", 2), podMirrors(m, "nginx-svc-west"))
		assertConsistent(c, ctx, ns, m)
	}, wait, tick)
}

// Headless exports without ports, and names that do not fit a DNS label,
// are not mirrored, and say why.
func TestNotMirrorable(t *testing.T) {
	const ns = "e2e-refused"
	ctx := setUp(t, ns, "east", "west")
	west := env.Cluster("west")
	metrics := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	startController(t, "controller", "--metrics-addr", metrics)
	long := "a-service-name-that-is-long-enough-to-overflow-the-dns-label"
	require.NoError(t, west.Apply(ctx, clusterIPService(ns, long, 80, "true")))
	require.NoError(t, west.Apply(ctx, fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata: {name: portless, namespace: %s, labels: {%s: "true"}}
spec: {clusterIP: None, selector: {app: x}}
`, ns, labels.Exported)))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, reason := range []string{controller.ReasonNameTooLong, controller.ReasonHeadlessWithoutPorts} {
			assert.True(c, hasEvent(c, "east", ns, func(e corev1.Event) bool { return e.Reason == reason }), "an Event %s", reason)
		}
	}, wait, tick)
	assert.Empty(t, mirrors(t, ns))

	// And the metrics say so.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		url := "http://" + metrics + "/metrics"
		assert.Equal(c, 1.0, harness.RequireSeries(c, url, `coredns_mcmirror_controller_not_mirrored{cluster="west",reason="HeadlessWithoutPorts"}`))
		assert.Equal(c, 1.0, harness.RequireSeries(c, url, `coredns_mcmirror_controller_not_mirrored{cluster="west",reason="MirrorNameInvalid"}`))
		assert.Equal(c, 2.0, harness.RequireSeries(c, url, `coredns_mcmirror_controller_links`))
		harness.RequireSeries(c, url, `coredns_mcmirror_controller_syncs_total{result="success"}`)
	}, wait, tick)
}

// Flat mode: only the mirror Service, headless, without endpoints.
func TestFlatMode(t *testing.T) {
	const ns = "e2e-flat"
	ctx := setUp(t, ns, "east", "paris")
	p := startController(t, "controller", "--v", "4")
	require.NoError(t, env.Cluster("paris").Apply(ctx, statefulSet(ns, "db", 2, labels.ExportFlat)))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m := mirrors(c, ns)
		assert.Equal(c, []string{"db-paris"}, names(m))
		assert.Equal(c, corev1.ClusterIPNone, m["db-paris"].Spec.ClusterIP)
	}, wait, tick)
	// Nothing else appears: once a sync of the export has written
	// nothing (the pods' EndpointSlices seen), there is nothing else.
	waitSynced(t, p, 0, "paris/"+ns+"/db")
	m := mirrors(t, ns)
	assert.Equal(t, []string{"db-paris"}, names(m))
	// Flat mirrors have no slices (the import's derived Service has).
	slices, err := env.Cluster("east").Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "!" + mcsv1beta1.LabelServiceName})
	require.NoError(t, err)
	assert.Empty(t, slices.Items)
}

package controller_test

import (
	"strings"
	"testing"

	"github.com/mcmirror/mcmirror/controller"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// importEvents returns the messages of the Events of reason on the
// ServiceImport ns/name in east.
func importEvents(c require.TestingT, ns, name, reason string) []string {
	var out []string
	for _, e := range events(c, "east", ns) {
		if e.Reason == reason && e.InvolvedObject.Kind == "ServiceImport" && e.InvolvedObject.Name == name {
			out = append(out, e.Message)
		}
	}
	return out
}

// A flat-mode export's EndpointSlices are whatever their writers chose,
// and the import's slices are what kube-proxy programs for the
// ClusterSetIP: east's import of west's db carries the pods the
// EndpointSlice controller lists for db, not the slice a tenant of west
// wrote beside them (pointing at an address of its choosing), nor
// anything of a selector-less Service not opted in. Each refusal is an
// Event on the ServiceImport and counted by reason.
func TestServiceImportEndpointPolicy(t *testing.T) {
	const ns = "e2e-mcs-policy"
	ctx := setUp(t, ns, "east", "west")
	west := env.Cluster("west")
	ctl := env.StartFleet(t, harness.FleetOptions{Local: "east", Parts: harness.FleetController,
		Links:      []harness.Link{{Name: "west", Kubeconfig: west.Kubeconfig}},
		Controller: harness.ControllerOptions{Metrics: true},
	}).Controller
	refused := func(c require.TestingT, reason string) float64 {
		return metric(c, ctl.MetricsAddr, "coredns_mcmirror_controller_import_endpoints_refused", map[string]string{"reason": reason})
	}
	var unmanagedBefore, selectorlessBefore float64
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		unmanagedBefore, selectorlessBefore = refused(c, "unmanaged_slice"), refused(c, "selectorless")
	}, wait, tick)

	require.NoError(t, west.Apply(ctx, statefulSet(ns, "db", 2, labels.ExportFlat)))
	// The tenant's slice of db, labelled as the EndpointSlice controller
	// labels db's, so that the export's watch selects it.
	_, err := west.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "db-tenant", Labels: map[string]string{
			discoveryv1.LabelServiceName: "db", labels.Exported: labels.ExportFlat, discoveryv1.LabelManagedBy: "tenant.example"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.96.0.1"}, Hostname: ptr.To("db-9"),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(80))}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	west.CreateSelectorless(t, ns, "legacy", harness.SelectorlessService{
		Labels: map[string]string{labels.Exported: labels.ExportFlat}, Headless: true, Port: 80, TargetPort: 80,
		Endpoints: []harness.PodAddr{{Name: "legacy-0", IP: "10.96.0.2"}},
	})

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		want := podIPs(c, west, ns)
		require.Len(c, want, 2)
		imp := requireImport(c, ns, "db", "ServiceImport db")
		assert.Equal(c, want, byHostname(imp.slices["west"]), "west's pods, and only them")

		legacy := requireImport(c, ns, "legacy", "ServiceImport legacy")
		require.Contains(c, legacy.slices, "west")
		assert.Empty(c, legacy.slices["west"].Endpoints, "a selector-less Service not opted in: nothing")

		msgs := importEvents(c, ns, "db", controller.ReasonImportEndpointsRefused)
		assert.True(c, len(msgs) > 0 && strings.Contains(msgs[len(msgs)-1], "(unmanaged_slice)"), "Event on db: %v", msgs)
		msgs = importEvents(c, ns, "legacy", controller.ReasonImportEndpointsRefused)
		assert.True(c, len(msgs) > 0 && strings.Contains(msgs[len(msgs)-1], "(selectorless)"), "Event on legacy: %v", msgs)
		assert.Greater(c, refused(c, "unmanaged_slice"), unmanagedBefore)
		assert.Greater(c, refused(c, "selectorless"), selectorlessBefore)
	}, wait, tick)
	env.RequireAlive(t, ctl.Process)
}

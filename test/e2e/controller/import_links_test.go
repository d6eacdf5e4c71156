package controller_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/mcmirror/mcmirror/controller"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// deadKubeconfig writes a kubeconfig of a cluster that cannot be reached
// (nothing listens on port 1) and returns its path.
func deadKubeconfig(t *testing.T) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["dead"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	cfg.AuthInfos["dead"] = &clientcmdapi.AuthInfo{Token: "x"}
	cfg.Contexts["dead"] = &clientcmdapi.Context{Cluster: "dead", AuthInfo: "dead"}
	cfg.CurrentContext = "dead"
	path := filepath.Join(t.TempDir(), "dead.kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*cfg, path))
	return path
}

// leftImport writes in east what an earlier run left of the import
// ns/name from cluster alone: the ServiceImport naming it, the derived
// Service under derivedName with its ClusterSetIP on the ServiceImport, and
// the cluster's slice of it (owned by the derived Service when owned) with
// one endpoint at addr:port. It returns the derived Service.
func leftImport(t *testing.T, ns, name, derivedName, cluster, addr string, port int32, owned bool) *corev1.Service {
	t.Helper()
	ctx := context.Background()
	east := env.Cluster("east")
	imports := mcsClient(t, "east").MulticlusterV1beta1().ServiceImports(ns)
	si, err := imports.Create(ctx, &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{labels.ManagedBy: labels.ManagedByValue}},
		Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP,
			Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	derived, err := east.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: derivedName,
			Labels:          map[string]string{labels.ManagedBy: labels.ManagedByValue, labels.ServiceImport: name, mcsv1beta1.LabelServiceName: name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: mcsv1beta1.SchemeGroupVersion.String(), Kind: "ServiceImport", Name: name, UID: si.UID}}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, derived.Spec.ClusterIPs)
	si.Spec.IPs = derived.Spec.ClusterIPs
	si, err = imports.Update(ctx, si, metav1.UpdateOptions{})
	require.NoError(t, err)
	// Its status names the exporting cluster: the import waits for that
	// cluster's link before it changes anything.
	si.Status.Clusters = []mcsv1beta1.ClusterStatus{{Cluster: cluster}}
	_, err = imports.UpdateStatus(ctx, si, metav1.UpdateOptions{})
	require.NoError(t, err)
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: derived.Name + "-" + cluster, Labels: map[string]string{
			discoveryv1.LabelServiceName: derived.Name, discoveryv1.LabelManagedBy: labels.EndpointSliceManagedBy,
			labels.ManagedBy: labels.ManagedByValue, mcsv1beta1.LabelServiceName: name, mcsv1beta1.LabelSourceCluster: cluster}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(port)}},
	}
	if owned {
		slice.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: derived.Name, UID: derived.UID}}
	}
	_, err = east.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{})
	require.NoError(t, err)
	return derived
}

// A link that never syncs holds up no import it takes no part in: east's
// own export is imported at once. The import that a previous run made
// from the unreachable cluster waits --link-startup-timeout, then goes on
// (west's export joins it) and keeps that cluster's slice as it last was,
// with an Event; the timeout is counted.
func TestImportsWithUnsyncedLink(t *testing.T) {
	const ns = "e2e-mcs-unsynced"
	ctx := setUp(t, ns, "east", "west")
	west := env.Cluster("west")
	leftImport(t, ns, "db", controller.DerivedName(ns, "db"), "tokyo", "10.250.0.7", 8080, true)

	ctl := env.StartFleet(t, harness.FleetOptions{Local: "east", Parts: harness.FleetController,
		Links:      []harness.Link{{Name: "west", Kubeconfig: west.Kubeconfig}, {Name: "tokyo", Kubeconfig: deadKubeconfig(t)}},
		Controller: harness.ControllerOptions{Metrics: true, Args: []string{"--link-startup-timeout", "5s"}},
	}).Controller
	exportLocalAPI(t, ns)
	require.NoError(t, west.Apply(ctx, clusterIPService(ns, "db", 80, labels.ExportGateway)))

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		imp := requireImport(c, ns, "api", "ServiceImport api, whatever tokyo does")
		assert.Equal(c, []string{"http 10.200.0.1:8080"}, endpointsOf(imp.slices["east"]))
	}, wait, tick)

	series := func(cluster string) map[string]string { return map[string]string{"cluster": cluster} }
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 1.0, metric(c, ctl.MetricsAddr, "coredns_mcmirror_controller_link_startup_timeouts_total", series("tokyo")))
		assert.Equal(c, 0.0, metric(c, ctl.MetricsAddr, "coredns_mcmirror_controller_link_synced", series("tokyo")))
		assert.Equal(c, 1.0, metric(c, ctl.MetricsAddr, "coredns_mcmirror_controller_link_synced", series("west")))
		assert.Equal(c, 0.0, metric(c, ctl.MetricsAddr, "coredns_mcmirror_controller_link_startup_timeouts_total", series("west")))

		msgs := importEvents(c, ns, "db", controller.ReasonImportSourceNotSynced)
		assert.NotEmpty(c, msgs, "an Event on ServiceImport db")
		imp := requireImport(c, ns, "db", "ServiceImport db kept")
		assert.Equal(c, []mcsv1beta1.ClusterStatus{{Cluster: "west"}, {Cluster: "tokyo"}}, imp.si.Status.Clusters)
		assert.Equal(c, []string{"http 10.250.0.7:8080"}, endpointsOf(imp.slices["tokyo"]), "tokyo's slice as it last was")
		require.Contains(c, imp.slices, "west", "west joins")
		assert.Len(c, endpointsOf(imp.slices["west"]), 1)
	}, wait, tick)
	env.RequireAlive(t, ctl.Process)
}

package controller_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"testing"

	"github.com/mcmirror/mcmirror/controller"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// imported is what east has of the import of ns/name: the ServiceImport,
// its derived Service and the derived Service's slices by source cluster.
type imported struct {
	si      *mcsv1beta1.ServiceImport
	derived *corev1.Service
	slices  map[string]discoveryv1.EndpointSlice
}

func readImport(c *assert.CollectT, ns, name string) (imported, bool) {
	ctx := context.Background()
	east := env.Cluster("east")
	var out imported
	si, err := mcsClient(c, "east").MulticlusterV1beta1().ServiceImports(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return out, false
	}
	require.NoError(c, err)
	out.si = si
	out.derived = service(c, east, ns, controller.DerivedName(ns, name))
	list, err := east.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{
		LabelSelector: mcsv1beta1.LabelServiceName + "=" + name})
	require.NoError(c, err)
	out.slices = map[string]discoveryv1.EndpointSlice{}
	for _, es := range list.Items {
		out.slices[es.Labels[mcsv1beta1.LabelSourceCluster]] = es
	}
	return out, true
}

// requireImport is readImport's import of ns/name, which must exist.
func requireImport(c *assert.CollectT, ns, name string, msgAndArgs ...any) imported {
	imp, ok := readImport(c, ns, name)
	require.True(c, ok, msgAndArgs...)
	return imp
}

// endpointsOf renders a slice as "addr:port" for each ready endpoint and
// port name, sorted.
func endpointsOf(es discoveryv1.EndpointSlice) []string {
	var out []string
	for _, ep := range es.Endpoints {
		for _, p := range es.Ports {
			out = append(out, fmt.Sprintf("%s %s:%d", ptr.Deref(p.Name, ""), ep.Addresses[0], ptr.Deref(p.Port, 0)))
		}
	}
	slices.Sort(out)
	return out
}

// podIPs are the addresses of the pods of ns in cluster that have one, by
// name.
func podIPs(c require.TestingT, cluster *harness.Cluster, ns string) map[string]string {
	pods, err := cluster.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(c, err)
	out := map[string]string{}
	for _, p := range pods.Items {
		if p.Status.PodIP != "" {
			out[p.Name] = p.Status.PodIP
		}
	}
	return out
}

// byHostname renders a slice as the first address of each endpoint, by
// hostname.
func byHostname(es discoveryv1.EndpointSlice) map[string]string {
	out := map[string]string{}
	for _, ep := range es.Endpoints {
		out[ptr.Deref(ep.Hostname, "")] = ep.Addresses[0]
	}
	return out
}

// exportLocalAPI exports east's own ns/api, endpoint 10.200.0.1:8080. East
// runs no EndpointSlice controller, so the test writes the slice it
// would, with the Service's labels copied.
func exportLocalAPI(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	east := env.Cluster("east")
	require.NoError(t, east.Apply(ctx, clusterIPService(ns, "api", 80, labels.ExportGateway)))
	_, err := east.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "api-local", Labels: map[string]string{
			discoveryv1.LabelServiceName: "api", labels.Exported: labels.ExportGateway,
			discoveryv1.LabelManagedBy: labels.EndpointSliceControllerName}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.200.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(8080))}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// Every Service the clusterset exports gets, in east, a ServiceImport, a
// derived Service whose ClusterIP is the ClusterSetIP, and an
// EndpointSlice per exporting cluster: west's through its mirror (the
// gateway egress), east's own endpoints directly. Port changes, and
// unexports, follow; the last unexport deletes it all.
func TestServiceImportLifecycle(t *testing.T) {
	const ns = "e2e-mcs-import"
	ctx := setUp(t, ns, "east", "west")
	east, west := env.Cluster("east"), env.Cluster("west")
	p := startController(t, "controller")
	require.NoError(t, west.Apply(ctx, clusterIPService(ns, "api", 80, labels.ExportGateway)))

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m := mirrors(c, ns)
		mirror, ok := m["api-west"]
		require.True(c, ok, "mirror api-west")
		port, ok := labels.ParseEgressPorts(mirror.Annotations[labels.EgressPorts])["80/TCP"]
		require.True(c, ok)
		imp := requireImport(c, ns, "api", "ServiceImport api")
		assert.Equal(c, mcsv1beta1.ClusterSetIP, imp.si.Spec.Type)
		assert.Equal(c, []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}, imp.si.Spec.Ports)
		assert.NotEmpty(c, imp.derived.Spec.ClusterIPs)
		assert.Equal(c, imp.derived.Spec.ClusterIPs, imp.si.Spec.IPs, "the ClusterSetIP is the derived Service's ClusterIP")
		assert.Equal(c, imp.derived.Name, imp.si.Annotations[controller.DerivedServiceAnnotation], "as Gateway API implementations find it")
		assert.Equal(c, []mcsv1beta1.ClusterStatus{{Cluster: "west"}}, imp.si.Status.Clusters)
		assert.Equal(c, "api", imp.derived.Labels[labels.ServiceImport])
		assert.Equal(c, "api", imp.derived.Labels[mcsv1beta1.LabelServiceName])
		assert.Nil(c, imp.derived.Spec.Selector)
		require.Contains(c, imp.slices, "west")
		assert.Equal(c, []string{fmt.Sprintf("http %s:%d", egress, port)}, endpointsOf(imp.slices["west"]), "west through the egress")
		assert.Equal(c, labels.EndpointSliceManagedBy, imp.slices["west"].Labels[discoveryv1.LabelManagedBy])
		assert.Equal(c, imp.derived.Name, imp.slices["west"].Labels[discoveryv1.LabelServiceName])
	}, wait, tick)

	// A ServiceExport of the derived Service is not valid: what mcmirror
	// made is not exported again (nor stamped), and an Event says why.
	derivedName := controller.DerivedName(ns, "api")
	createServiceExport(t, "east", ns, derivedName)
	requireConditions(t, "east", ns, derivedName, map[string]string{"Valid": "False/DerivedService", "Ready": "False/Failed"})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, hasEvent(c, "east", ns, func(e corev1.Event) bool {
			return e.Reason == controller.ReasonServiceExportInvalid && e.InvolvedObject.Kind == "ServiceExport" && e.InvolvedObject.Name == derivedName
		}), "a %s Event on the ServiceExport", controller.ReasonServiceExportInvalid)
	}, wait, tick)
	d := service(t, east, ns, derivedName)
	assert.NotContains(t, d.Labels, labels.ServiceExportMode, "the derived Service is not stamped")

	// East exports its own api: its endpoints join, directly. East runs no
	// EndpointSlice controller, so the test writes the slice it would,
	// with the Service's labels copied.
	exportLocalAPI(t, ns)
	// The oldest export first, by the Services' creation (a second's
	// resolution), then the lowest cluster ID.
	order := []mcsv1beta1.ClusterStatus{{Cluster: "east"}, {Cluster: "west"}}
	eastAPI := service(t, east, ns, "api")
	westAPI := service(t, west, ns, "api")
	if westAPI.CreationTimestamp.Before(&eastAPI.CreationTimestamp) {
		order = []mcsv1beta1.ClusterStatus{{Cluster: "west"}, {Cluster: "east"}}
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		imp := requireImport(c, ns, "api")
		assert.Equal(c, order, imp.si.Status.Clusters, "the oldest export first")
		assert.Equal(c, []string{"http 10.200.0.1:8080"}, endpointsOf(imp.slices["east"]), "east's own endpoints")
		assert.Len(c, imp.slices, 2)
	}, wait, tick)
	derivedUID := func() types.UID { return service(t, east, ns, controller.DerivedName(ns, "api")).UID }
	uid := derivedUID()

	// West adds a port: the import has the union, west's slice both.
	_, err := west.Client.CoreV1().Services(ns).Patch(ctx, "api", types.StrategicMergePatchType,
		[]byte(`{"spec":{"ports":[{"name":"http","port":80},{"name":"grpc","port":9090}]}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		imp := requireImport(c, ns, "api")
		assert.ElementsMatch(c, []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}, {Name: "grpc", Protocol: corev1.ProtocolTCP, Port: 9090}}, imp.si.Spec.Ports)
		assert.Len(c, imp.derived.Spec.Ports, 2)
		assert.Len(c, endpointsOf(imp.slices["west"]), 2)
		assert.Equal(c, []string{"http 10.200.0.1:8080"}, endpointsOf(imp.slices["east"]))
	}, wait, tick)
	assert.Equal(t, uid, derivedUID(), "the derived Service is updated in place: its ClusterSetIP stays")

	// West unexports: its slice goes, east's stays.
	require.NoError(t, west.LabelService(ctx, ns, "api", labels.Exported, ""))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		imp := requireImport(c, ns, "api")
		assert.Equal(c, []mcsv1beta1.ClusterStatus{{Cluster: "east"}}, imp.si.Status.Clusters)
		assert.NotContains(c, imp.slices, "west")
		assert.Contains(c, imp.slices, "east")
	}, wait, tick)

	// The last export goes: so does everything.
	require.NoError(t, east.LabelService(ctx, ns, "api", labels.Exported, ""))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, ok := readImport(c, ns, "api")
		assert.False(c, ok, "ServiceImport deleted")
		_, err := east.Client.CoreV1().Services(ns).Get(ctx, controller.DerivedName(ns, "api"), metav1.GetOptions{})
		assert.True(c, apierrors.IsNotFound(err), "derived Service deleted: %v", err)
		list, err := east.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: mcsv1beta1.LabelServiceName})
		require.NoError(c, err)
		assert.Empty(c, list.Items, "slices deleted")
	}, wait, tick)
	env.RequireAlive(t, p)
}

// A headless Service exported in flat mode by paris is imported as
// Headless: the derived Service has no ClusterIP, and paris's slice holds
// its pods' addresses under their hostnames.
func TestServiceImportHeadlessFlat(t *testing.T) {
	const ns = "e2e-mcs-headless"
	ctx := setUp(t, ns, "east", "paris")
	paris := env.Cluster("paris")
	startController(t, "controller")
	require.NoError(t, paris.Apply(ctx, statefulSet(ns, "db", 2, labels.ExportFlat)))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		want := podIPs(c, paris, ns)
		require.Len(c, want, 2)
		imp := requireImport(c, ns, "db")
		assert.Equal(c, mcsv1beta1.Headless, imp.si.Spec.Type)
		assert.Empty(c, imp.si.Spec.IPs)
		assert.Equal(c, corev1.ClusterIPNone, imp.derived.Spec.ClusterIP)
		assert.Equal(c, want, byHostname(imp.slices["paris"]), "paris's pods by hostname")
	}, wait, tick)
}

// A cluster unlinked (its link Secret deleted) leaves the import: its
// EndpointSlice goes, and with it the last export, the ServiceImport.
func TestServiceImportClusterUnlinked(t *testing.T) {
	const ns, secretNS = "e2e-mcs-unlink", "e2e-mcs-unlink-links"
	ctx := setUp(t, ns, "east", "paris")
	namespace(t, secretNS, "east")
	east, paris := env.Cluster("east"), env.Cluster("paris")
	secret := east.CreateLinkSecret(t, secretNS, "paris", paris.LinkData(t))
	o := eastController("controller")
	o.LinkSecrets = secretNS
	p := env.StartFleet(t, o).Controller.Process
	require.NoError(t, paris.Apply(ctx, clusterIPService(ns, "api", 80, labels.ExportGateway)))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		imp := requireImport(c, ns, "api")
		assert.Equal(c, []mcsv1beta1.ClusterStatus{{Cluster: "paris"}}, imp.si.Status.Clusters)
		assert.Contains(c, imp.slices, "paris")
	}, wait, tick)

	require.NoError(t, east.Client.CoreV1().Secrets(secretNS).Delete(ctx, secret.Name, metav1.DeleteOptions{}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, ok := readImport(c, ns, "api")
		assert.False(c, ok, "ServiceImport deleted with paris unlinked")
		list, err := east.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: mcsv1beta1.LabelSourceCluster + "=paris"})
		require.NoError(c, err)
		assert.Empty(c, list.Items)
	}, wait, tick)
	env.RequireAlive(t, p)
}

// Upgrading from a release that named derived Services
// derived-<10 hex digits>: the controller renames the derived Service,
// keeping its ClusterSetIP, and nothing stays under the former name.
func TestServiceImportDerivedNameUpgrade(t *testing.T) {
	const ns = "e2e-mcs-rename"
	ctx := setUp(t, ns, "east", "west")
	east, west := env.Cluster("east"), env.Cluster("west")
	require.NoError(t, west.Apply(ctx, clusterIPService(ns, "api", 80, labels.ExportGateway)))

	// What the earlier release left in east: the ServiceImport, its
	// derived Service under the former name, with a ClusterIP the API
	// server allocated, and west's slice of it.
	sum := sha256.Sum256([]byte(ns + "/api"))
	former := "derived-" + hex.EncodeToString(sum[:])[:10]
	require.NotEqual(t, former, controller.DerivedName(ns, "api"))
	old := leftImport(t, ns, "api", former, "west", egress, 31000, false)

	p := startController(t, "controller")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := east.Client.CoreV1().Services(ns).Get(ctx, former, metav1.GetOptions{})
		assert.True(c, apierrors.IsNotFound(err), "the derived Service under its former name is gone: %v", err)
		_, err = east.Client.DiscoveryV1().EndpointSlices(ns).Get(ctx, former+"-west", metav1.GetOptions{})
		assert.True(c, apierrors.IsNotFound(err), "and its slice: %v", err)
		imp := requireImport(c, ns, "api")
		assert.Equal(c, old.Spec.ClusterIPs, imp.derived.Spec.ClusterIPs, "the ClusterSetIP stays")
		assert.Equal(c, old.Spec.ClusterIPs, imp.si.Spec.IPs)
		assert.Equal(c, "api", imp.derived.Labels[labels.ServiceImport])
		require.Contains(c, imp.slices, "west")
		assert.Equal(c, imp.derived.Name+"-west", imp.slices["west"].Name)
	}, wait, tick)
	env.RequireAlive(t, p)
}

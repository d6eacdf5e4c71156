package trust_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// policyName is the ValidatingAdmissionPolicy of deploy/admission-policy.yaml.
const policyName = "mcmirror-mirror-metadata"

// requirePolicyRefusal fails t unless err is the policy's refusal.
func requirePolicyRefusal(t *testing.T, err error, what string) {
	t.Helper()
	require.Error(t, err, "%s: admitted", what)
	require.True(t, apierrors.IsForbidden(err), "%s: want 403 Forbidden, got %v", what, err)
	require.Contains(t, err.Error(), "ValidatingAdmissionPolicy '"+policyName+"'", what)
	t.Logf("%s: %v", what, err)
}

// serviceEdit is a change to a Service, named for the log.
type serviceEdit struct {
	what string
	edit func(*corev1.Service)
}

// requireEditsRefused makes each edit in turn to Service ns/name as client
// reads it, and requires the policy to refuse each update.
func requireEditsRefused(t *testing.T, client kubernetes.Interface, ns, name string, edits []serviceEdit) {
	t.Helper()
	ctx := context.Background()
	for _, e := range edits {
		s, err := client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		e.edit(s)
		_, err = client.CoreV1().Services(ns).Update(ctx, s, metav1.UpdateOptions{})
		requirePolicyRefusal(t, err, "edit in "+ns+": "+e.what)
	}
}

// With deploy/admission-policy.yaml applied, the controller, run as the
// ServiceAccount of deploy/controller.yaml, mirrors as before; nobody else
// may set, change or remove the mirror labels and the egress-ports
// annotation, nor the ServiceExport stamp of a Service: not a user bound
// to the edit ClusterRole in another namespace (creating a forged mirror,
// stamping a Service by hand), not one of the mirror's own namespace
// (relabelling the real mirror, changing its Service's stamp), not the
// cluster admin. Their ordinary writes still go through, and so do
// Linkerd's service mirror's writes of its own mirrors and the
// controller's stamp of a Service its ServiceExport exports.
func TestAdmissionPolicy(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	g, west := env.Cluster("guarded"), env.Cluster("west")
	require.NoError(t, g.Apply(ctx, harness.RepoFile(t, "deploy", "controller.yaml")))
	require.NoError(t, g.Apply(ctx, harness.RepoFile(t, "deploy", "admission-policy.yaml")))
	shop := env.UniqueNamespace(t, "shop", g, west)
	tenant := env.UniqueNamespace(t, "tenant", g)

	forged := func(name string) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: mirrorLabels("evil"),
				Annotations: map[string]string{labels.EgressPorts: "80/TCP=30000"}},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
		}
	}
	// The policy is in force once the API server has read it and its
	// binding: a dry run of a forged mirror is refused.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := g.Client.CoreV1().Services(tenant).Create(ctx, forged("probe-west"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		assert.True(c, apierrors.IsForbidden(err), "dry run: %v", err)
	}, wait, tick, "the admission policy is in force")

	// The controller, as its ServiceAccount, mirrors west's export.
	kc, err := g.ServiceAccountKubeconfigFile(ctx, t.TempDir(), "mcmirror", "mcmirror-controller")
	require.NoError(t, err)
	exportService(t, west, shop, "web", "web-0", "192.0.2.33")
	ctl := env.StartFleet(t, harness.FleetOptions{Local: g.Name, Remotes: []string{"west"}, Parts: harness.FleetController,
		EgressPorts: harness.EgressPortWindow().String(), Controller: harness.ControllerOptions{Kubeconfig: kc}}).Controller.Process
	mirror, port := waitMirror(t, g, shop, "web-west")
	assert.Equal(t, labels.ManagedByValue, mirror.Labels[labels.ManagedBy])
	t.Logf("the controller, as %s, made %s/%s with egress port %d", labels.ControllerServiceAccount, shop, mirror.Name, port)

	// A user bound to edit in another namespace: a forged mirror is
	// refused; the same Service without the mirror metadata is not.
	dev := editor(t, g, tenant, "dev")
	_, err = dev.CoreV1().Services(tenant).Create(ctx, forged("evil-west"), metav1.CreateOptions{})
	requirePolicyRefusal(t, err, "edit in "+tenant+": create a Service labelled as a mirror")
	plain := forged("plain")
	plain.Labels, plain.Annotations = map[string]string{"app": "plain"}, nil
	plain, err = dev.CoreV1().Services(tenant).Create(ctx, plain, metav1.CreateOptions{})
	require.NoError(t, err, "an ordinary Service")
	// The ServiceExport stamp is the controller's too: without a
	// ServiceExport, no tenant exports a Service to every linked cluster,
	// nor dates its export back.
	requireEditsRefused(t, dev, tenant, plain.Name, []serviceEdit{
		{"add the egress-ports annotation", func(s *corev1.Service) {
			s.Annotations = map[string]string{labels.EgressPorts: "80/TCP=" + strconv.Itoa(port)}
		}},
		{"add mirror.linkerd.io/mirrored-service", func(s *corev1.Service) { s.Labels[labels.MirroredService] = "true" }},
		{"add mcmirror.dev/managed-by", func(s *corev1.Service) { s.Labels[labels.ManagedBy] = labels.ManagedByValue }},
		{"add the ServiceExport stamp", func(s *corev1.Service) { s.Labels[labels.ServiceExportMode] = labels.ModeGateway }},
		{"add the ServiceExport time", func(s *corev1.Service) {
			s.Annotations = map[string]string{labels.ServiceExportCreated: "1970-01-01T00:00:00Z"}
		}},
	})
	stampedSvc := forged("stamped")
	stampedSvc.Labels = map[string]string{labels.ServiceExportMode: labels.ModeFlat}
	stampedSvc.Annotations = nil
	_, err = dev.CoreV1().Services(tenant).Create(ctx, stampedSvc, metav1.CreateOptions{})
	requirePolicyRefusal(t, err, "edit in "+tenant+": create a Service with the ServiceExport stamp")
	// The edit role writes no EndpointSlice at all (RBAC, before the
	// policy).
	_, err = dev.DiscoveryV1().EndpointSlices(tenant).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "evil-west", Labels: map[string]string{
			discoveryv1.LabelServiceName: "evil-west", discoveryv1.LabelManagedBy: labels.EndpointSliceManagedBy}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}, metav1.CreateOptions{})
	require.True(t, apierrors.IsForbidden(err), "edit creates no EndpointSlice: %v", err)
	require.NotContains(t, err.Error(), policyName, "refused by RBAC")

	// A user bound to edit in the mirror's own namespace: the real
	// mirror's route metadata cannot be changed; another label can.
	owner := editor(t, g, shop, "owner")
	requireEditsRefused(t, owner, shop, "web-west", []serviceEdit{
		{"point the egress port elsewhere", func(s *corev1.Service) { s.Annotations[labels.EgressPorts] = "80/TCP=" + strconv.Itoa(port+1) }},
		{"remove the egress-ports annotation", func(s *corev1.Service) { delete(s.Annotations, labels.EgressPorts) }},
		{"point the mirror at another remote Service", func(s *corev1.Service) { s.Labels[labels.RemoteService] = "db" }},
		{"point the mirror at another cluster", func(s *corev1.Service) { s.Labels[labels.ClusterName] = "paris" }},
		{"remove mcmirror.dev/managed-by", func(s *corev1.Service) { delete(s.Labels, labels.ManagedBy) }},
	})
	s, err := owner.CoreV1().Services(shop).Get(ctx, "web-west", metav1.GetOptions{})
	require.NoError(t, err)
	s.Labels["team"] = "shop"
	_, err = owner.CoreV1().Services(shop).Update(ctx, s, metav1.UpdateOptions{})
	require.NoError(t, err, "a label of the namespace's own")

	requireStampReserved(t, g, owner, shop)

	// The cluster admin is held to it too.
	_, err = g.Client.CoreV1().Services(tenant).Create(ctx, forged("admin-west"), metav1.CreateOptions{})
	requirePolicyRefusal(t, err, "admin: create a Service labelled as a mirror")
	_, err = g.Client.DiscoveryV1().EndpointSlices(tenant).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "admin-west", Labels: map[string]string{
			discoveryv1.LabelServiceName: "admin-west", discoveryv1.LabelManagedBy: labels.EndpointSliceManagedBy}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}, metav1.CreateOptions{})
	requirePolicyRefusal(t, err, "admin: create an EndpointSlice marked as the controller's")
	// The stamp is reserved on Services only: the EndpointSlice
	// controller copies a Service's labels, the stamp included, onto the
	// slices it writes.
	_, err = g.Client.DiscoveryV1().EndpointSlices(tenant).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "stamped-abcde", Labels: map[string]string{
			discoveryv1.LabelServiceName: "stamped", labels.ServiceExportMode: labels.ModeGateway,
			discoveryv1.LabelManagedBy: labels.EndpointSliceControllerName}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}, metav1.CreateOptions{})
	require.NoError(t, err, "an EndpointSlice with the Service's stamp, as the EndpointSlice controller writes it")

	// Linkerd's service mirror writes the Linkerd keys on its own mirrors,
	// never mcmirror's.
	lmc := "linkerd-multicluster"
	require.NoError(t, g.Apply(ctx, "apiVersion: v1\nkind: Namespace\nmetadata: {name: "+lmc+"}\n"))
	linkerd := editor(t, g, lmc, harness.UniqueName("linkerd-service-mirror-west"))
	lm := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: harness.UniqueName("web-west"), Labels: map[string]string{
		labels.MirroredService: "true", labels.ClusterName: "west"}}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	_, err = linkerd.CoreV1().Services(lmc).Create(ctx, lm, metav1.CreateOptions{})
	require.NoError(t, err, "Linkerd's service mirror makes its own mirror")
	lm.Name += "-x"
	lm.Labels[labels.ManagedBy] = labels.ManagedByValue
	_, err = linkerd.CoreV1().Services(lmc).Create(ctx, lm, metav1.CreateOptions{})
	requirePolicyRefusal(t, err, "Linkerd's service mirror: a Service labelled as mcmirror's")

	// The controller was refused nothing, and its mirror is as it made it.
	for _, refusal := range []string{"denied request", "forbidden"} {
		assert.NotContains(t, strings.ToLower(ctl.Log(t)), refusal, "the controller's writes were all admitted")
	}
	after, err := g.Client.CoreV1().Services(shop).Get(ctx, "web-west", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, mirror.Annotations[labels.EgressPorts], after.Annotations[labels.EgressPorts])
	assert.Equal(t, mirror.Labels[labels.RemoteService], after.Labels[labels.RemoteService])
	env.RequireAlive(t, ctl)
}

// requireStampReserved: in namespace ns of the guarded cluster g, the
// controller, as its ServiceAccount, stamps the Service that a
// ServiceExport exports (the policy admits it); owner, bound to edit in
// ns, may not change the stamp's mode, date the export back, or remove
// the stamp, change the labels it exports, and still edits the Service
// otherwise; the ServiceImport gets the exported labels (by server-side
// apply: the ServiceAccount's patch); once the ServiceExport is deleted,
// the controller removes the stamp (admitted too).
func requireStampReserved(t *testing.T, g *harness.Cluster, owner kubernetes.Interface, ns string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, g.Apply(ctx, fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata: {name: api, namespace: %s, labels: {team: shop}}
spec: {selector: {app: api}, ports: [{port: 80}]}
`, ns)))
	mcs, err := mcsclient.NewForConfig(g.Config)
	require.NoError(t, err)
	se, err := mcs.MulticlusterV1beta1().ServiceExports(ns).Create(ctx, &mcsv1beta1.ServiceExport{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api"},
		Spec:       mcsv1beta1.ServiceExportSpec{ExportedLabels: map[string]string{"tier-export": "gold"}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	created := se.CreationTimestamp.UTC().Format(time.RFC3339)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		svc, err := g.Client.CoreV1().Services(ns).Get(ctx, "api", metav1.GetOptions{})
		require.NoError(c, err)
		assert.Equal(c, labels.ModeGateway, svc.Labels[labels.ServiceExportMode])
		assert.Equal(c, created, svc.Annotations[labels.ServiceExportCreated])
		assert.Equal(c, `{"labels":{"tier-export":"gold"}}`, svc.Annotations[labels.ServiceExportMetadata])
		si, err := mcs.MulticlusterV1beta1().ServiceImports(ns).Get(ctx, "api", metav1.GetOptions{})
		require.NoError(c, err)
		assert.Equal(c, "gold", si.Labels["tier-export"], "the exported label, applied as the controller's ServiceAccount")
	}, wait, tick, "the controller stamps %s/api for its ServiceExport", ns)

	requireEditsRefused(t, owner, ns, "api", []serviceEdit{
		{"change the ServiceExport stamp's mode", func(s *corev1.Service) { s.Labels[labels.ServiceExportMode] = labels.ModeFlat }},
		{"date the export back", func(s *corev1.Service) { s.Annotations[labels.ServiceExportCreated] = "1970-01-01T00:00:00Z" }},
		{"remove the ServiceExport stamp", func(s *corev1.Service) { delete(s.Labels, labels.ServiceExportMode) }},
		{"remove the ServiceExport time", func(s *corev1.Service) { delete(s.Annotations, labels.ServiceExportCreated) }},
		{"change the exported labels", func(s *corev1.Service) {
			s.Annotations[labels.ServiceExportMetadata] = `{"labels":{"tier-export":"forged"}}`
		}},
		{"remove the exported labels", func(s *corev1.Service) { delete(s.Annotations, labels.ServiceExportMetadata) }},
	})
	s, err := owner.CoreV1().Services(ns).Get(ctx, "api", metav1.GetOptions{})
	require.NoError(t, err)
	s.Labels["tier"] = "backend"
	s, err = owner.CoreV1().Services(ns).Update(ctx, s, metav1.UpdateOptions{})
	require.NoError(t, err, "a label of the Service's owner, beside the stamp")
	assert.Equal(t, created, s.Annotations[labels.ServiceExportCreated])

	require.NoError(t, mcs.MulticlusterV1beta1().ServiceExports(ns).Delete(ctx, "api", metav1.DeleteOptions{}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		svc, err := g.Client.CoreV1().Services(ns).Get(ctx, "api", metav1.GetOptions{})
		require.NoError(c, err)
		assert.NotContains(c, svc.Labels, labels.ServiceExportMode)
		assert.NotContains(c, svc.Annotations, labels.ServiceExportCreated)
		assert.NotContains(c, svc.Annotations, labels.ServiceExportMetadata)
		assert.Equal(c, "backend", svc.Labels["tier"])
	}, wait, tick, "the controller removes the stamp of %s/api once its ServiceExport is gone", ns)
}

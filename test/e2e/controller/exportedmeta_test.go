package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/mcmirror/mcmirror/controller"
	"github.com/mcmirror/mcmirror/internal/labels"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// createExportedMeta creates the ServiceExport of ns/name in cluster with
// the exported labels and annotations given.
func createExportedMeta(t *testing.T, cluster, ns, name string, lbls, annotations map[string]string) *mcsv1beta1.ServiceExport {
	t.Helper()
	se, err := mcsClient(t, cluster).MulticlusterV1beta1().ServiceExports(ns).Create(context.Background(), &mcsv1beta1.ServiceExport{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       mcsv1beta1.ServiceExportSpec{ExportedLabels: lbls, ExportedAnnotations: annotations},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return se
}

// A ServiceExport's exportedLabels and exportedAnnotations reach the
// ServiceImport in another cluster, and only they (not the Service's own
// labels and annotations), as the specification says ("Labels and
// Annotations") and the conformance suite's two Optional specs check:
// paris exports first, west later with other ones; both ServiceExports
// say Conflict (LabelsConflict), and east's ServiceImport has paris's,
// not west's. A key reserved to the implementation is not exported, with
// an Event on the ServiceExport and a count; the import keeps its owner
// label. An export that stops exporting an annotation takes it off the
// ServiceImport, and a label put there by hand stays; a sync of the
// import with nothing new to export writes nothing.
func TestExportedLabelsAndAnnotations(t *testing.T) {
	const ns = "e2e-mcs-exported-meta"
	ctx := setUp(t, ns, "east", "west", "paris")
	for _, cluster := range []string{"paris", "west"} {
		require.NoError(t, env.Cluster(cluster).Apply(ctx, fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata: {name: hello, namespace: %s, labels: {team: a}, annotations: {note: own}}
spec: {selector: {app: hello}, ports: [{name: http, port: 80}]}
`, ns)))
	}
	_, parisMetrics := startExporter(t, "paris", "west")
	westProc, _ := startExporter(t, "west", "paris")
	eastOpts := eastController("controller")
	eastOpts.Controller.Metrics = true
	eastCtl := env.StartFleet(t, eastOpts).Controller
	eastProc, eastMetrics := eastCtl.Process, eastCtl.MetricsAddr
	refused := map[string]string{"reason": "ExportedMetadataRefused"}
	var before float64
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		before = metric(c, parisMetrics, "coredns_mcmirror_controller_mcs_refused_total", refused)
	}, wait, tick)

	// Paris first (its Services and ServiceExport are created first, so
	// it is the older export, or of the same second and the lower
	// cluster ID: the precedence is paris's either way).
	parisSE := createExportedMeta(t, "paris", ns, "hello",
		map[string]string{"dummy-label": "true", labels.ManagedBy: "someone"},
		map[string]string{"dummy-annotation": "true"})
	requireConditions(t, "paris", ns, "hello", map[string]string{"Valid": "True/Valid", "Ready": "True/Ready", "Conflict": "False/NoConflicts"})
	siClient := mcsClient(t, "east").MulticlusterV1beta1().ServiceImports(ns)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		si, err := siClient.Get(ctx, "hello", metav1.GetOptions{})
		require.NoError(c, err)
		assert.Equal(c, "true", si.Labels["dummy-label"])
		assert.Equal(c, "true", si.Annotations["dummy-annotation"])
		assert.Equal(c, labels.ManagedByValue, si.Labels[labels.ManagedBy], "the owner label is the controller's")
		assert.NotContains(c, si.Labels, "team", "the Service's own labels are not exported")
		assert.NotContains(c, si.Annotations, "note", "the Service's own annotations are not exported")
	}, wait, tick)

	// The reserved key: said on paris's ServiceExport, counted.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		se, err := mcsClient(c, "paris").MulticlusterV1beta1().ServiceExports(ns).Get(ctx, "hello", metav1.GetOptions{})
		require.NoError(c, err)
		valid := meta.FindStatusCondition(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionValid))
		require.NotNil(c, valid)
		assert.Contains(c, valid.Message, `exportedLabels "mcmirror.dev/managed-by": reserved`)
		assert.True(c, hasEvent(c, "paris", ns, func(e corev1.Event) bool {
			return e.Reason == "ExportedMetadataRefused" && e.InvolvedObject.UID == parisSE.UID &&
				strings.Contains(e.Message, "mcmirror.dev/managed-by")
		}), "an ExportedMetadataRefused Event on paris's ServiceExport")
		assert.Greater(c, metric(c, parisMetrics, "coredns_mcmirror_controller_mcs_refused_total", refused), before)
	}, wait, tick)

	// West exports later, with other labels and annotations: a conflict
	// on both ServiceExports; east's import keeps paris's.
	createExportedMeta(t, "west", ns, "hello", map[string]string{"dummy-label2": "true"}, map[string]string{"dummy-annotation2": "true"})
	conflict := map[string]string{"Valid": "True/Valid", "Conflict": "True/" + string(mcsv1beta1.ServiceExportReasonLabelsConflict)}
	requireConditions(t, "paris", ns, "hello", conflict)
	requireConditions(t, "west", ns, "hello", conflict)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		si, err := siClient.Get(ctx, "hello", metav1.GetOptions{})
		require.NoError(c, err)
		// West's export is seen (positive evidence), and loses.
		assert.Equal(c, []mcsv1beta1.ClusterStatus{{Cluster: "paris"}, {Cluster: "west"}}, si.Status.Clusters)
		assert.Equal(c, "true", si.Labels["dummy-label"])
		assert.Equal(c, "true", si.Annotations["dummy-annotation"])
		assert.NotContains(c, si.Labels, "dummy-label2")
		assert.NotContains(c, si.Annotations, "dummy-annotation2")
	}, wait, tick)
	se, err := mcsClient(t, "west").MulticlusterV1beta1().ServiceExports(ns).Get(ctx, "hello", metav1.GetOptions{})
	require.NoError(t, err)
	c := meta.FindStatusCondition(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionConflict))
	require.NotNil(t, c)
	assert.Contains(t, c.Message, `{"dummy-label":"true"} applies, the oldest export's (paris)`)
	assert.Contains(t, c.Message, "exported annotations")

	// A label put on east's ServiceImport by hand; then paris exports no
	// annotation any more: the one it exported goes, the hand-made label
	// stays.
	_, err = siClient.Patch(ctx, "hello", types.MergePatchType, []byte(`{"metadata":{"labels":{"by-hand":"yes"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	_, err = mcsClient(t, "paris").MulticlusterV1beta1().ServiceExports(ns).Patch(ctx, "hello", types.MergePatchType,
		[]byte(`{"spec":{"exportedAnnotations":null}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		si, err := siClient.Get(ctx, "hello", metav1.GetOptions{})
		require.NoError(c, err)
		assert.NotContains(c, si.Annotations, "dummy-annotation", "no longer exported")
		assert.NotContains(c, si.Annotations, "dummy-annotation2", "west's still loses")
		assert.Equal(c, "true", si.Labels["dummy-label"])
		assert.Equal(c, "yes", si.Labels["by-hand"], "a label the controller did not put there stays")
		assert.NotEmpty(c, si.Annotations[controller.DerivedServiceAnnotation])
	}, wait, tick)

	// Nothing new: a change to the ServiceImport that does not concern
	// what is exported is synced (syncs_total moves) without a write.
	applied := map[string]string{"verb": "apply", "resource": "serviceimports"}
	updated := map[string]string{"verb": "update", "resource": "serviceimports"}
	success := map[string]string{"result": "success"}
	var writes [2]float64
	var syncs float64
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		w := [2]float64{metric(c, eastMetrics, "coredns_mcmirror_controller_writes_total", applied),
			metric(c, eastMetrics, "coredns_mcmirror_controller_writes_total", updated)}
		assert.Positive(c, w[0], "the exported labels and annotations were applied")
		assert.Equal(c, writes, w, "the writes have settled")
		writes, syncs = w, metric(c, eastMetrics, "coredns_mcmirror_controller_syncs_total", success)
	}, wait, tick)
	_, err = siClient.Patch(ctx, "hello", types.MergePatchType, []byte(`{"metadata":{"annotations":{"touched":"yes"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Greater(c, metric(c, eastMetrics, "coredns_mcmirror_controller_syncs_total", success), syncs)
	}, wait, tick)
	assert.Equal(t, writes[0], metric(t, eastMetrics, "coredns_mcmirror_controller_writes_total", applied))
	assert.Equal(t, writes[1], metric(t, eastMetrics, "coredns_mcmirror_controller_writes_total", updated))
	env.RequireAlive(t, westProc)
	env.RequireAlive(t, eastProc)
}

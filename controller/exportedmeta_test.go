package controller

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/mcs"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// A ServiceExport's exportedLabels and exportedAnnotations ride in the
// stamp, screened; what is left out is said by the Valid condition (and
// an Event), and the export stays valid.
func TestPlanExportMetadata(t *testing.T) {
	se := testExport(nil)
	se.Spec.ExportedLabels = map[string]string{"dummy-label": "true", labels.ManagedBy: "someone"}
	se.Spec.ExportedAnnotations = map[string]string{"dummy-annotation": "true"}
	in := exportInput{cluster: "east", export: se, service: testExportService(nil), defaultMode: labels.ModeGateway}
	p := planExport(in)
	require.True(t, p.writeStamp)
	assert.Equal(t, `{"labels":{"dummy-label":"true"},"annotations":{"dummy-annotation":"true"}}`, p.stamp.metadata)
	require.Len(t, p.refusedMetadata, 1)
	assert.Contains(t, p.refusedMetadata[0], `exportedLabels "mcmirror.dev/managed-by": reserved`)
	valid := condition(t, p, mcsv1beta1.ServiceExportConditionValid)
	assert.Equal(t, metav1.ConditionTrue, valid.Status)
	assert.Contains(t, valid.Message, `not exported to the ServiceImports: exportedLabels "mcmirror.dev/managed-by"`)

	// Written, then planned again: nothing more to write.
	in.owned = p.stamp
	assert.False(t, planExport(in).writeStamp)

	// The exported labels change: the stamp is written again.
	se.Spec.ExportedLabels = map[string]string{"dummy-label": "false"}
	p = planExport(in)
	assert.True(t, p.writeStamp)
	assert.Equal(t, `{"labels":{"dummy-label":"false"},"annotations":{"dummy-annotation":"true"}}`, p.stamp.metadata)
	assert.Empty(t, p.refusedMetadata)
	assert.Equal(t, "the Service can be exported", condition(t, p, mcsv1beta1.ServiceExportConditionValid).Message)

	// Exported metadata written by hand beside a ServiceExport that
	// exports none: set back, refused.
	in = exportInput{cluster: "east", export: testExport(nil), defaultMode: labels.ModeGateway,
		owned: stamp{mode: labels.ModeGateway, created: exportCreated.Format(time.RFC3339)},
		service: testExportService(func(s *corev1.Service) {
			s.Labels = map[string]string{labels.ServiceExportMode: labels.ModeGateway}
			s.Annotations = map[string]string{labels.ServiceExportCreated: exportCreated.Format(time.RFC3339),
				labels.ServiceExportMetadata: `{"labels":{"forged":"yes"}}`}
		})}
	p = planExport(in)
	assert.True(t, p.writeStamp)
	assert.Equal(t, "{}", p.stamp.metadata)
	assert.Equal(t, `{"labels":{"forged":"yes"}}`, p.foreign.metadata)
}

// The conformance suite's two-cluster spec: east exports first with its
// labels and annotations, west later with others. Both ServiceExports say
// Conflict (LabelsConflict first), and the import, in every cluster, has
// east's.
func TestExportedMetadataConflict(t *testing.T) {
	eastMeta := mcs.Metadata{Labels: map[string]string{"dummy-label": "true"}, Annotations: map[string]string{"dummy-annotation": "true"}}
	westMeta := mcs.Metadata{Labels: map[string]string{"dummy-label2": "true"}, Annotations: map[string]string{"dummy-annotation2": "true"}}
	stamped := func(created time.Time, m mcs.Metadata) *corev1.Service {
		return testExportService(func(s *corev1.Service) {
			s.Labels = map[string]string{labels.ServiceExportMode: labels.ModeGateway}
			s.Annotations = map[string]string{labels.ServiceExportCreated: created.Format(time.RFC3339), labels.ServiceExportMetadata: m.Encode()}
		})
	}
	eastSvc, westSvc := stamped(exportCreated, eastMeta), stamped(exportCreated.Add(time.Second), westMeta)

	for _, tc := range []struct {
		cluster, peer string
		created       time.Time
		own           mcs.Metadata
		peerSvc       *corev1.Service
	}{
		{"east", "west", exportCreated, eastMeta, westSvc},
		{"west", "east", exportCreated.Add(time.Second), westMeta, eastSvc},
	} {
		se := testExport(nil)
		se.CreationTimestamp = metav1.NewTime(tc.created)
		se.Spec.ExportedLabels, se.Spec.ExportedAnnotations = tc.own.Labels, tc.own.Annotations
		p := planExport(exportInput{cluster: tc.cluster, export: se, service: testExportService(nil), defaultMode: labels.ModeGateway,
			peers: []mcs.Export{peerExport(tc.peer, tc.peerSvc)}})
		c := condition(t, p, mcsv1beta1.ServiceExportConditionConflict)
		assert.Equal(t, metav1.ConditionTrue, c.Status, tc.cluster)
		assert.Equal(t, string(mcsv1beta1.ServiceExportReasonLabelsConflict), c.Reason, tc.cluster)
		assert.Contains(t, c.Message, `{"dummy-label":"true"} applies, the oldest export's (east)`, tc.cluster)
		assert.Contains(t, c.Message, `the exports disagree on exported annotations`, tc.cluster)
	}

	var sources []importSource
	for cluster, svc := range map[string]*corev1.Service{"east": eastSvc, "west": westSvc} {
		e := peerExport(cluster, svc)
		sources = append(sources, importSource{cluster: cluster, created: e.Created, service: svc, metadata: e.Metadata})
	}
	p := planImport(importInput{ns: "shop", name: "web", sources: sources})
	assert.Equal(t, eastMeta, p.merged.Metadata)
}

// A linked cluster's exported metadata is read only beside the stamp's
// label, and screened again: that cluster's controller may be another
// release's, or not mcmirror's.
func TestPeerExportMetadata(t *testing.T) {
	s := testExportService(func(s *corev1.Service) {
		s.Annotations = map[string]string{labels.ServiceExportMetadata: `{"labels":{"a":"1"}}`}
	})
	assert.True(t, peerExport("west", s).Metadata.Empty(), "no stamp's label: not believed")
	s.Labels = map[string]string{labels.ServiceExportMode: labels.ModeFlat}
	assert.Equal(t, mcs.Metadata{Labels: map[string]string{"a": "1"}}, peerExport("west", s).Metadata)
	s.Annotations[labels.ServiceExportMetadata] = `{"labels":{"a":"1","mcmirror.dev/managed-by":"x"},"annotations":{"multicluster.kubernetes.io/derived-service":"elsewhere","b":"2"}}`
	assert.Equal(t, mcs.Metadata{Labels: map[string]string{"a": "1"}, Annotations: map[string]string{"b": "2"}}, peerExport("west", s).Metadata,
		"reserved keys screened out")
	s.Annotations[labels.ServiceExportMetadata] = `a=1`
	assert.True(t, peerExport("west", s).Metadata.Empty(), "not the JSON mcmirror writes: none")
}

// managedFields is a ServiceImport's managed fields entry of manager, by
// operation, owning the labels and annotations given.
func managedFields(t *testing.T, manager string, op metav1.ManagedFieldsOperationType, lbls, annotations []string) metav1.ManagedFieldsEntry {
	t.Helper()
	set := func(keys []string) map[string]any {
		m := map[string]any{}
		for _, k := range keys {
			m["f:"+k] = map[string]any{}
		}
		return m
	}
	raw, err := json.Marshal(map[string]any{"f:metadata": map[string]any{"f:labels": set(lbls), "f:annotations": set(annotations)}})
	require.NoError(t, err)
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: raw}}
}

// What the controller applied on a ServiceImport is read from its managed
// fields: its own Apply entry's keys, with the ServiceImport's values;
// another manager's keys, and the owner label every apply carries, are not.
func TestAppliedMetadata(t *testing.T) {
	si := &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{
		Namespace: "shop", Name: "web",
		Labels:      map[string]string{labels.ManagedBy: labels.ManagedByValue, "dummy-label": "true", "by-hand": "yes"},
		Annotations: map[string]string{DerivedServiceAnnotation: "derived-x", "dummy-annotation": "true"},
		ManagedFields: []metav1.ManagedFieldsEntry{
			managedFields(t, ImportFieldManager, metav1.ManagedFieldsOperationApply, []string{labels.ManagedBy, "dummy-label"}, []string{"dummy-annotation"}),
			managedFields(t, ImportFieldManager, metav1.ManagedFieldsOperationUpdate, []string{labels.ManagedBy}, []string{DerivedServiceAnnotation}),
			managedFields(t, "kubectl-label", metav1.ManagedFieldsOperationUpdate, []string{"by-hand"}, nil),
		},
	}}
	got, err := appliedMetadata(si)
	require.NoError(t, err)
	assert.Equal(t, mcs.Metadata{Labels: map[string]string{"dummy-label": "true"}, Annotations: map[string]string{"dummy-annotation": "true"}}, got)

	// Only the owner label applied: nothing exported.
	si.ManagedFields = []metav1.ManagedFieldsEntry{managedFields(t, ImportFieldManager, metav1.ManagedFieldsOperationApply, []string{labels.ManagedBy}, nil)}
	got, err = appliedMetadata(si)
	require.NoError(t, err)
	assert.True(t, got.Empty(), "%+v", got)
	assert.True(t, got.Equal(mcs.Metadata{}))

	si.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: ImportFieldManager, Operation: metav1.ManagedFieldsOperationApply, FieldsV1: &metav1.FieldsV1{Raw: []byte("{")}}}
	_, err = appliedMetadata(si)
	assert.ErrorContains(t, err, "ServiceImport shop/web")
}

// The apply names the ServiceImport by UID, keeps it the controller's,
// and carries exactly the exported pairs: none is no annotations at all,
// so that the ones applied before are removed.
func TestImportMetadataApply(t *testing.T) {
	si := &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "si-uid"}}
	body, err := importMetadataApply(si, mcs.Metadata{Labels: map[string]string{"dummy-label": "true"}, Annotations: map[string]string{"dummy-annotation": "true"}})
	require.NoError(t, err)
	assert.JSONEq(t, `{"apiVersion":"multicluster.x-k8s.io/v1beta1","kind":"ServiceImport","metadata":{"name":"web","namespace":"shop","uid":"si-uid",
		"labels":{"mcmirror.dev/managed-by":"controller","dummy-label":"true"},"annotations":{"dummy-annotation":"true"}}}`, string(body))
	body, err = importMetadataApply(si, mcs.Metadata{})
	require.NoError(t, err)
	assert.JSONEq(t, `{"apiVersion":"multicluster.x-k8s.io/v1beta1","kind":"ServiceImport","metadata":{"name":"web","namespace":"shop","uid":"si-uid",
		"labels":{"mcmirror.dev/managed-by":"controller"}}}`, string(body))
}

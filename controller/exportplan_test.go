package controller

import (
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/mcs"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
)

var exportCreated = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func testExport(annotations map[string]string) *mcsv1alpha1.ServiceExport {
	return &mcsv1alpha1.ServiceExport{ObjectMeta: metav1.ObjectMeta{
		Namespace: "shop", Name: "web", Generation: 3, Annotations: annotations,
		CreationTimestamp: metav1.NewTime(exportCreated),
	}}
}

func testExportService(mut func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", CreationTimestamp: metav1.NewTime(exportCreated.Add(-time.Hour))},
		Spec: corev1.ServiceSpec{
			Type:      corev1.ServiceTypeClusterIP,
			ClusterIP: "10.96.0.10",
			Ports:     []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
		},
	}
	if mut != nil {
		mut(s)
	}
	return s
}

func condition(t *testing.T, p exportPlan, typ mcsv1alpha1.ServiceExportConditionType) metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(p.conditions, string(typ))
	require.NotNil(t, c, "no %s condition in %+v", typ, p.conditions)
	return *c
}

func TestPlanExport(t *testing.T) {
	created := exportCreated.Format(time.RFC3339)
	gw := stamp{mode: labels.ModeGateway, created: created}
	tests := []struct {
		name      string
		in        exportInput
		stamp     stamp
		write     bool
		valid     string // reason of Valid; "" for no conditions
		ready     metav1.ConditionStatus
		conflict  string // reason of Conflict; "" for none
		validTrue bool
	}{
		{name: "export, Service unstamped: stamp it, Ready pending",
			in:    exportInput{export: testExport(nil), service: testExportService(nil)},
			stamp: gw, write: true, valid: "Valid", validTrue: true, ready: metav1.ConditionUnknown, conflict: "NoConflicts"},
		{name: "stamped already: nothing to write, Ready",
			in:    exportInput{export: testExport(nil), service: testExportService(nil), owned: gw},
			stamp: gw, valid: "Valid", validTrue: true, ready: metav1.ConditionTrue, conflict: "NoConflicts"},
		{name: "flat by annotation",
			in:    exportInput{export: testExport(map[string]string{labels.ModeLabel: "flat"}), service: testExportService(nil), owned: gw},
			stamp: stamp{mode: labels.ModeFlat, created: created}, write: true, valid: "Valid", validTrue: true, ready: metav1.ConditionUnknown, conflict: "NoConflicts"},
		{name: "flat by default",
			in:    exportInput{export: testExport(nil), service: testExportService(nil), defaultMode: labels.ModeFlat},
			stamp: stamp{mode: labels.ModeFlat, created: created}, write: true, valid: "Valid", validTrue: true, ready: metav1.ConditionUnknown, conflict: "NoConflicts"},
		{name: "bad mode annotation: invalid, stamp removed",
			in:    exportInput{export: testExport(map[string]string{labels.ModeLabel: "mesh"}), service: testExportService(nil), owned: gw},
			write: true, valid: reasonInvalidMode, ready: metav1.ConditionFalse},
		{name: "no Service",
			in:    exportInput{export: testExport(nil)},
			valid: "NoService", ready: metav1.ConditionFalse},
		{name: "ExternalName",
			in:    exportInput{export: testExport(nil), service: testExportService(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeExternalName })},
			valid: "InvalidServiceType", ready: metav1.ConditionFalse},
		{name: "a mirror is not exported again",
			in: exportInput{export: testExport(nil), service: testExportService(func(s *corev1.Service) {
				s.Labels = map[string]string{labels.MirroredService: labels.MirroredServiceValue}
			})},
			valid: reasonMirrorService, ready: metav1.ConditionFalse},
		{name: "no ServiceExport, stamp owned: remove it",
			in:    exportInput{service: testExportService(nil), owned: gw},
			write: true},
		{name: "no ServiceExport, nothing owned: nothing",
			in: exportInput{service: testExportService(func(s *corev1.Service) {
				s.Labels = map[string]string{labels.ServiceExportMode: labels.ModeGateway} // by hand: not ours
			})}},
		{name: "a peer's older export with other ports: conflict",
			in: exportInput{export: testExport(nil), service: testExportService(nil), owned: gw, peers: []mcs.Export{{
				Cluster: "west", Created: exportCreated.Add(-time.Minute),
				Service: testExportService(func(s *corev1.Service) { s.Spec.Ports[0].Port = 8080 }),
			}}},
			stamp: gw, valid: "Valid", validTrue: true, ready: metav1.ConditionTrue, conflict: string(mcsv1alpha1.ServiceExportReasonPortConflict)},
		{name: "a peer headless: type conflict",
			in: exportInput{export: testExport(nil), service: testExportService(nil), owned: gw, peers: []mcs.Export{{
				Cluster: "west", Created: exportCreated.Add(time.Minute),
				Service: testExportService(func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }),
			}}},
			stamp: gw, valid: "Valid", validTrue: true, ready: metav1.ConditionTrue, conflict: string(mcsv1alpha1.ServiceExportReasonTypeConflict)},
		{name: "a peer that agrees",
			in: exportInput{export: testExport(nil), service: testExportService(nil), owned: gw, peers: []mcs.Export{{
				Cluster: "west", Created: exportCreated, Service: testExportService(nil),
			}}},
			stamp: gw, valid: "Valid", validTrue: true, ready: metav1.ConditionTrue, conflict: "NoConflicts"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.in.defaultMode == "" {
				tc.in.defaultMode = labels.ModeGateway
			}
			tc.in.cluster = "east"
			p := planExport(tc.in)
			assert.Equal(t, tc.stamp, p.stamp, "stamp")
			assert.Equal(t, tc.write, p.writeStamp, "writeStamp")
			if tc.valid == "" {
				assert.Nil(t, p.conditions)
				return
			}
			v := condition(t, p, mcsv1alpha1.ServiceExportConditionValid)
			assert.Equal(t, tc.valid, v.Reason)
			assert.Equal(t, tc.validTrue, v.Status == metav1.ConditionTrue)
			assert.Equal(t, tc.ready, condition(t, p, mcsv1alpha1.ServiceExportConditionReady).Status)
			c := meta.FindStatusCondition(p.conditions, string(mcsv1alpha1.ServiceExportConditionConflict))
			if tc.conflict == "" {
				assert.Nil(t, c, "an invalid export has no Conflict condition")
			} else {
				require.NotNil(t, c)
				assert.Equal(t, tc.conflict, c.Reason)
				assert.Equal(t, tc.conflict != "NoConflicts", c.Status == metav1.ConditionTrue)
			}
		})
	}
}

// An export planned again once its stamp is written is Ready, and a second
// plan of that state has nothing to write.
func TestPlanExportAfterStamp(t *testing.T) {
	in := exportInput{cluster: "east", export: testExport(nil), service: testExportService(nil), defaultMode: labels.ModeGateway}
	p := planExport(in)
	require.True(t, p.writeStamp)
	in.owned = p.stamp
	p = planExport(in)
	assert.False(t, p.writeStamp)
	assert.Equal(t, metav1.ConditionTrue, condition(t, p, mcsv1alpha1.ServiceExportConditionReady).Status)
	conds, changed := mcs.Apply(nil, 3, p.conditions...)
	require.True(t, changed)
	_, changed = mcs.Apply(conds, 3, planExport(in).conditions...)
	assert.False(t, changed, "the same state plans the same conditions")
}

func TestPeerExportCreated(t *testing.T) {
	s := testExportService(nil)
	assert.Equal(t, s.CreationTimestamp.Time, peerExport("west", s).Created, "exported by Linkerd's label: the Service's own time")
	s.Annotations = map[string]string{labels.ServiceExportCreated: exportCreated.Format(time.RFC3339)}
	assert.Equal(t, exportCreated, peerExport("west", s).Created.UTC())
	s.Annotations[labels.ServiceExportCreated] = "yesterday"
	assert.Equal(t, s.CreationTimestamp.Time, peerExport("west", s).Created, "an unreadable time is the Service's own")
}

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
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

var exportCreated = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func testExport(annotations map[string]string) *mcsv1beta1.ServiceExport {
	return &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{
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

func condition(t *testing.T, p exportPlan, typ mcsv1beta1.ServiceExportConditionType) metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(p.conditions, string(typ))
	require.NotNil(t, c, "no %s condition in %+v", typ, p.conditions)
	return *c
}

func TestPlanExport(t *testing.T) {
	created := exportCreated.Format(time.RFC3339)
	gw := stamp{mode: labels.ModeGateway, created: created, metadata: "{}"}
	tests := []struct {
		name     string
		in       exportInput
		stamp    stamp
		write    bool
		foreign  stamp
		valid    string // reason of Valid; "" for no conditions
		ready    metav1.ConditionStatus
		conflict string // reason of Conflict; "" for none
	}{
		{name: "export, Service unstamped: stamp it, Ready pending",
			in:    exportInput{export: testExport(nil), service: testExportService(nil)},
			stamp: gw, write: true, valid: "Valid", ready: metav1.ConditionUnknown, conflict: "NoConflicts"},
		{name: "stamped already: nothing to write, Ready",
			in:    exportInput{export: testExport(nil), service: testExportService(nil), owned: gw},
			stamp: gw, valid: "Valid", ready: metav1.ConditionTrue, conflict: "NoConflicts"},
		{name: "flat by annotation",
			in:    exportInput{export: testExport(map[string]string{labels.ModeLabel: "flat"}), service: testExportService(nil), owned: gw},
			stamp: stamp{mode: labels.ModeFlat, created: created, metadata: "{}"}, write: true, valid: "Valid", ready: metav1.ConditionUnknown, conflict: "NoConflicts"},
		{name: "flat by default",
			in:    exportInput{export: testExport(nil), service: testExportService(nil), defaultMode: labels.ModeFlat},
			stamp: stamp{mode: labels.ModeFlat, created: created, metadata: "{}"}, write: true, valid: "Valid", ready: metav1.ConditionUnknown, conflict: "NoConflicts"},
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
		{name: "no ServiceExport, no stamp: nothing",
			in: exportInput{service: testExportService(nil)}},
		{name: "no ServiceExport, stamped by hand: removed, refused",
			in: exportInput{service: testExportService(func(s *corev1.Service) {
				s.Labels = map[string]string{labels.ServiceExportMode: labels.ModeGateway} // by hand: not ours
			})},
			write: true, foreign: stamp{mode: labels.ModeGateway}},
		{name: "no ServiceExport, a time by hand: removed, refused",
			in: exportInput{service: testExportService(func(s *corev1.Service) {
				s.Annotations = map[string]string{labels.ServiceExportCreated: "1970-01-01T00:00:00Z"}
			})},
			write: true, foreign: stamp{created: "1970-01-01T00:00:00Z"}},
		{name: "no ServiceExport, our stamp: removed, not refused",
			in: exportInput{service: testExportService(func(s *corev1.Service) {
				s.Labels = map[string]string{labels.ServiceExportMode: labels.ModeGateway}
				s.Annotations = map[string]string{labels.ServiceExportCreated: created, labels.ServiceExportMetadata: "{}"}
			}), owned: gw},
			write: true},
		{name: "the time changed by hand: set back, refused",
			in: exportInput{export: testExport(nil), service: testExportService(func(s *corev1.Service) {
				s.Labels = map[string]string{labels.ServiceExportMode: labels.ModeGateway}
				s.Annotations = map[string]string{labels.ServiceExportCreated: "1970-01-01T00:00:00Z"}
			}), owned: stamp{mode: labels.ModeGateway}},
			stamp: gw, write: true, foreign: stamp{mode: labels.ModeGateway, created: "1970-01-01T00:00:00Z"},
			valid: "Valid", ready: metav1.ConditionUnknown, conflict: "NoConflicts"},
		{name: "an invalid export stamped by hand: removed, refused",
			in: exportInput{export: testExport(map[string]string{labels.ModeLabel: "mesh"}), service: testExportService(func(s *corev1.Service) {
				s.Labels = map[string]string{labels.ServiceExportMode: labels.ModeFlat}
			})},
			write: true, foreign: stamp{mode: labels.ModeFlat}, valid: reasonInvalidMode, ready: metav1.ConditionFalse},
		{name: "a derived Service is not exported",
			in: exportInput{export: testExport(nil), service: testExportService(func(s *corev1.Service) {
				s.Labels = map[string]string{labels.ServiceImport: "web", labels.ManagedBy: labels.ManagedByValue}
			})},
			valid: reasonDerivedService, ready: metav1.ConditionFalse},
		{name: "a peer's older export with other ports: conflict",
			in: exportInput{export: testExport(nil), service: testExportService(nil), owned: gw, peers: []mcs.Export{{
				Cluster: "west", Created: exportCreated.Add(-time.Minute),
				Service: testExportService(func(s *corev1.Service) { s.Spec.Ports[0].Port = 8080 }),
			}}},
			stamp: gw, valid: "Valid", ready: metav1.ConditionTrue, conflict: string(mcsv1beta1.ServiceExportReasonPortConflict)},
		{name: "a peer headless: type conflict",
			in: exportInput{export: testExport(nil), service: testExportService(nil), owned: gw, peers: []mcs.Export{{
				Cluster: "west", Created: exportCreated.Add(time.Minute),
				Service: testExportService(func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }),
			}}},
			stamp: gw, valid: "Valid", ready: metav1.ConditionTrue, conflict: string(mcsv1beta1.ServiceExportReasonTypeConflict)},
		{name: "a peer that agrees",
			in: exportInput{export: testExport(nil), service: testExportService(nil), owned: gw, peers: []mcs.Export{{
				Cluster: "west", Created: exportCreated, Service: testExportService(nil),
			}}},
			stamp: gw, valid: "Valid", ready: metav1.ConditionTrue, conflict: "NoConflicts"},
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
			assert.Equal(t, tc.foreign, p.foreign, "foreign")
			if tc.valid == "" {
				assert.Nil(t, p.conditions)
				return
			}
			v := condition(t, p, mcsv1beta1.ServiceExportConditionValid)
			assert.Equal(t, tc.valid, v.Reason)
			assert.Equal(t, tc.valid == "Valid", v.Status == metav1.ConditionTrue)
			assert.Equal(t, tc.ready, condition(t, p, mcsv1beta1.ServiceExportConditionReady).Status)
			if tc.conflict == "" {
				assert.Nil(t, meta.FindStatusCondition(p.conditions, string(mcsv1beta1.ServiceExportConditionConflict)), "an invalid export has no Conflict condition")
				return
			}
			c := condition(t, p, mcsv1beta1.ServiceExportConditionConflict)
			assert.Equal(t, tc.conflict, c.Reason)
			assert.Equal(t, tc.conflict != "NoConflicts", c.Status == metav1.ConditionTrue)
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
	assert.Equal(t, metav1.ConditionTrue, condition(t, p, mcsv1beta1.ServiceExportConditionReady).Status)
	conds, changed := mcs.Apply(nil, 3, p.conditions...)
	require.True(t, changed)
	_, changed = mcs.Apply(conds, 3, planExport(in).conditions...)
	assert.False(t, changed, "the same state plans the same conditions")
}

// The time of an export, for the oldest-export precedence, is never one a
// tenant wrote: the stamp's only beside the stamp's label (which only the
// controller writes), and never before the Service's own creation.
func TestPeerExportCreated(t *testing.T) {
	s := testExportService(nil)
	svcCreated := s.CreationTimestamp.Time
	assert.Equal(t, svcCreated, peerExport("west", s).Created, "exported by Linkerd's label: the Service's own time")
	s.Annotations = map[string]string{labels.ServiceExportCreated: "1970-01-01T00:00:00Z"}
	assert.Equal(t, svcCreated, peerExport("west", s).Created, "a time without the stamp's label is not believed")
	s.Labels = map[string]string{labels.ServiceExportMode: labels.ModeGateway}
	assert.Equal(t, svcCreated, peerExport("west", s).Created, "never before the Service's creation")
	s.Annotations[labels.ServiceExportCreated] = exportCreated.Format(time.RFC3339)
	assert.Equal(t, exportCreated, peerExport("west", s).Created.UTC(), "the ServiceExport's time, after the Service's")
	s.Labels[labels.ServiceExportMode] = "yes"
	assert.Equal(t, svcCreated, peerExport("west", s).Created, "a stamp of no mode is none")
	s.Labels[labels.ServiceExportMode] = labels.ModeFlat
	s.Annotations[labels.ServiceExportCreated] = "yesterday"
	assert.Equal(t, svcCreated, peerExport("west", s).Created, "an unreadable time is the Service's own")
}

// A Service created after a ServiceExport's, annotated with an older time
// (by hand, stamped or not), does not win the oldest-export precedence:
// the older export keeps the import's type and ports and comes first, and
// the exporting cluster's Conflict condition says the same.
func TestForgedExportTimeLoses(t *testing.T) {
	genuine := testExportService(nil) // created an hour before exportCreated
	genuine.Annotations = map[string]string{labels.ServiceExportCreated: exportCreated.Format(time.RFC3339)}
	genuine.Labels = map[string]string{labels.ServiceExportMode: labels.ModeGateway}
	for _, forgedLabels := range []map[string]string{
		{labels.ServiceExportMode: labels.ModeGateway},
		{labels.Exported: labels.ExportGateway},
	} {
		forged := testExportService(func(s *corev1.Service) {
			s.CreationTimestamp = metav1.NewTime(exportCreated.Add(24 * time.Hour))
			s.Labels = forgedLabels
			s.Annotations = map[string]string{labels.ServiceExportCreated: "1970-01-01T00:00:00Z"}
			s.Spec.ClusterIP = corev1.ClusterIPNone
			s.Spec.Ports[0].Port = 8080
		})
		var sources []importSource
		for cluster, svc := range map[string]*corev1.Service{"east": genuine, "west": forged} {
			e := peerExport(cluster, svc)
			sources = append(sources, importSource{cluster: cluster, created: e.Created, service: svc})
		}
		p := planImport(importInput{ns: "shop", name: "web", sources: sources})
		assert.Equal(t, mcsv1beta1.ClusterSetIP, p.spec.Type, "%v: the older export's type", forgedLabels)
		assert.Equal(t, []mcsv1beta1.ClusterStatus{{Cluster: "east"}, {Cluster: "west"}}, p.clusters, "%v: the older export first", forgedLabels)
		require.NotEmpty(t, p.spec.Ports)
		assert.Equal(t, int32(80), p.spec.Ports[0].Port, "%v: the older export's port", forgedLabels)

		// East's own ServiceExport: the conflict is west's to lose.
		e := peerExport("west", forged)
		plan := planExport(exportInput{cluster: "east", export: testExport(nil), service: genuine, defaultMode: labels.ModeGateway,
			owned: stamp{mode: labels.ModeGateway, created: exportCreated.Format(time.RFC3339)}, peers: []mcs.Export{e}})
		c := condition(t, plan, mcsv1beta1.ServiceExportConditionConflict)
		assert.Equal(t, string(mcsv1beta1.ServiceExportReasonTypeConflict), c.Reason)
		assert.Contains(t, c.Message, "ClusterSetIP applies, the oldest export's (east)", "%v", forgedLabels)
	}
}

package mcs

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
)

func TestValid(t *testing.T) {
	c := Valid(nil)
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, string(mcsv1alpha1.ServiceExportReasonNoService), c.Reason)

	c = Valid(svc(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeExternalName }))
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, string(mcsv1alpha1.ServiceExportReasonInvalidServiceType), c.Reason)

	for _, typ := range []corev1.ServiceType{"", corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer} {
		c = Valid(svc(func(s *corev1.Service) { s.Spec.Type = typ }))
		assert.Equal(t, metav1.ConditionTrue, c.Status, typ)
		assert.Equal(t, string(mcsv1alpha1.ServiceExportReasonValid), c.Reason, typ)
	}
}

func TestConflictCondition(t *testing.T) {
	c := ConflictCondition(Merge([]Export{{Cluster: "east", Created: t0, Service: svc(nil)}, {Cluster: "west", Created: t0, Service: svc(nil)}}))
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, string(mcsv1alpha1.ServiceExportReasonNoConflicts), c.Reason)

	m := Merge([]Export{
		{Cluster: "east", Created: t0, Service: svc(nil)},
		{Cluster: "west", Created: t0, Service: svc(func(s *corev1.Service) {
			s.Spec.ClusterIP = corev1.ClusterIPNone
			s.Spec.Ports[0].Port = 8080
		})},
	})
	c = ConflictCondition(m)
	assert.Equal(t, metav1.ConditionTrue, c.Status)
	assert.Equal(t, string(mcsv1alpha1.ServiceExportReasonTypeConflict), c.Reason)
	assert.Contains(t, c.Message, "disagree on type")
	assert.Contains(t, c.Message, "disagree on ports")
}

// Applying the same conditions again changes nothing; a new status moves
// the transition time, a new message alone does not.
func TestApply(t *testing.T) {
	valid := Valid(svc(nil))
	conds, changed := Apply(nil, 1, valid, ConflictCondition(Merged{Clusters: []string{"east"}}))
	require.True(t, changed)
	require.Len(t, conds, 2)
	first := meta.FindStatusCondition(conds, string(mcsv1alpha1.ServiceExportConditionValid))
	require.NotNil(t, first)
	assert.Equal(t, int64(1), first.ObservedGeneration)
	assert.False(t, first.LastTransitionTime.IsZero())

	again, changed := Apply(conds, 1, valid, ConflictCondition(Merged{Clusters: []string{"east"}}))
	assert.False(t, changed)
	assert.Equal(t, conds, again)

	// Back-date the transitions, then change only the Conflict message.
	before := metav1.NewTime(time.Now().Add(-time.Hour))
	conds[0].LastTransitionTime, conds[1].LastTransitionTime = before, before
	msg, changed := Apply(conds, 1, ConflictCondition(Merged{Clusters: []string{"east", "west"}}))
	assert.True(t, changed)
	c := meta.FindStatusCondition(msg, string(mcsv1alpha1.ServiceExportConditionConflict))
	assert.Equal(t, "the exports of east, west agree", c.Message)
	assert.Equal(t, before, c.LastTransitionTime)

	gone, changed := Apply(conds, 2, Valid(nil))
	assert.True(t, changed)
	c = meta.FindStatusCondition(gone, string(mcsv1alpha1.ServiceExportConditionValid))
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, int64(2), c.ObservedGeneration)
	assert.True(t, c.LastTransitionTime.After(before.Time))
	assert.Len(t, conds, 2, "the input is not modified")
	assert.Equal(t, metav1.ConditionTrue, conds[0].Status)
}

package mcs

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

func TestValid(t *testing.T) {
	c := Valid(nil)
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, string(mcsv1beta1.ServiceExportReasonNoService), c.Reason)

	c = Valid(svc(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeExternalName }))
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, string(mcsv1beta1.ServiceExportReasonInvalidServiceType), c.Reason)

	for _, typ := range []corev1.ServiceType{"", corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer} {
		c = Valid(svc(func(s *corev1.Service) { s.Spec.Type = typ }))
		assert.Equal(t, metav1.ConditionTrue, c.Status, typ)
		assert.Equal(t, string(mcsv1beta1.ServiceExportReasonValid), c.Reason, typ)
	}
}

func TestConflictCondition(t *testing.T) {
	c := ConflictCondition(Merge([]Export{{Cluster: "east", Created: t0, Service: svc(nil)}, {Cluster: "west", Created: t0, Service: svc(nil)}}))
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, string(mcsv1beta1.ServiceExportReasonNoConflicts), c.Reason)

	m := Merge([]Export{
		{Cluster: "east", Created: t0, Service: svc(nil)},
		{Cluster: "west", Created: t0, Service: svc(func(s *corev1.Service) {
			s.Spec.ClusterIP = corev1.ClusterIPNone
			s.Spec.Ports[0].Port = 8080
		})},
	})
	c = ConflictCondition(m)
	assert.Equal(t, metav1.ConditionTrue, c.Status)
	assert.Equal(t, string(mcsv1beta1.ServiceExportReasonTypeConflict), c.Reason)
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
	first := meta.FindStatusCondition(conds, string(mcsv1beta1.ServiceExportConditionValid))
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
	c := meta.FindStatusCondition(msg, string(mcsv1beta1.ServiceExportConditionConflict))
	assert.Equal(t, "the exports of east, west agree", c.Message)
	assert.Equal(t, before, c.LastTransitionTime)

	gone, changed := Apply(conds, 2, Valid(nil))
	assert.True(t, changed)
	c = meta.FindStatusCondition(gone, string(mcsv1beta1.ServiceExportConditionValid))
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, int64(2), c.ObservedGeneration)
	assert.True(t, c.LastTransitionTime.After(before.Time))
	assert.Len(t, conds, 2, "the input is not modified")
	assert.Equal(t, metav1.ConditionTrue, conds[0].Status)
}

func TestReady(t *testing.T) {
	external := Valid(svc(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeExternalName }))
	for _, tc := range []struct {
		name      string
		valid     metav1.Condition
		published bool
		status    metav1.ConditionStatus
		reason    mcsv1beta1.ServiceExportConditionReason
		// message are substrings of the condition's message.
		message []string
	}{
		{
			name: "published", valid: Valid(svc(nil)), published: true,
			status: metav1.ConditionTrue, reason: mcsv1beta1.ServiceExportReasonReady,
			message: []string{"published", "linked clusters"},
		},
		{
			name: "pending", valid: Valid(svc(nil)), published: false,
			status: metav1.ConditionUnknown, reason: mcsv1beta1.ServiceExportReasonPending,
			message: []string{"waiting for the mcmirror controller", "Events"},
		},
		{
			name: "validity unknown", valid: metav1.Condition{Type: string(mcsv1beta1.ServiceExportConditionValid), Status: metav1.ConditionUnknown}, published: true,
			status: metav1.ConditionUnknown, reason: mcsv1beta1.ServiceExportReasonPending,
		},
		{
			name: "no Service", valid: Valid(nil), published: false,
			status: metav1.ConditionFalse, reason: mcsv1beta1.ServiceExportReasonFailed,
			message: []string{"not exported", Valid(nil).Message, string(mcsv1beta1.ServiceExportReasonNoService)},
		},
		{
			// Still marked from before the Service changed type: not Ready.
			name: "ExternalName, still published", valid: external, published: true,
			status: metav1.ConditionFalse, reason: mcsv1beta1.ServiceExportReasonFailed,
			message: []string{external.Message, string(mcsv1beta1.ServiceExportReasonInvalidServiceType)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Ready(tc.valid, tc.published)
			assert.Equal(t, string(mcsv1beta1.ServiceExportConditionReady), c.Type)
			assert.Equal(t, tc.status, c.Status)
			assert.Equal(t, string(tc.reason), c.Reason)
			assert.NotEmpty(t, c.Message)
			for _, s := range tc.message {
				assert.Contains(t, c.Message, s)
			}
		})
	}
}

// Applying Ready again changes nothing, so a sync that recomputes it needs
// no status write; publishing moves it from Unknown to True.
func TestApplyReady(t *testing.T) {
	valid := Valid(svc(nil))
	conds, changed := Apply(nil, 3, valid, Ready(valid, false))
	require.True(t, changed)
	again, changed := Apply(conds, 3, valid, Ready(valid, false))
	assert.False(t, changed)
	assert.Equal(t, conds, again)

	ready, changed := Apply(conds, 3, valid, Ready(valid, true))
	require.True(t, changed)
	c := meta.FindStatusCondition(ready, string(mcsv1beta1.ServiceExportConditionReady))
	require.NotNil(t, c)
	assert.Equal(t, metav1.ConditionTrue, c.Status)
	assert.Equal(t, int64(3), c.ObservedGeneration)
	again, changed = Apply(ready, 3, valid, Ready(valid, true))
	assert.False(t, changed)
	assert.Equal(t, ready, again)
}

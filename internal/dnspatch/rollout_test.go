package dnspatch

import (
	"testing"

	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestRolloutOf(t *testing.T) {
	// dep is a Deployment of generation 3 wanting replicas (nil: unset).
	dep := func(replicas *int32, st appsv1.DeploymentStatus, conds ...appsv1.DeploymentCondition) *appsv1.Deployment {
		st.Conditions = conds
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Generation: 3},
			Spec:       appsv1.DeploymentSpec{Replicas: replicas, ProgressDeadlineSeconds: ptr.To[int32](600)},
			Status:     st,
		}
	}
	two := ptr.To[int32](2)
	complete := appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}
	deadline := appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: ProgressDeadlineExceeded,
		Message: `ReplicaSet "coredns-5d78c9869d" has timed out progressing.`}
	progressing := appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"}
	paused := dep(two, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 2, AvailableReplicas: 2})
	paused.Spec.Paused = true

	for _, c := range []struct {
		name                  string
		d                     *appsv1.Deployment
		done, serving, failed bool
		message               string
	}{
		{"the controller has not seen the write", dep(two, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2}),
			false, false, false, "waiting for the deployment controller to observe generation 3 (it has observed 2)"},
		{"a stale deadline says nothing of the new generation", dep(two, appsv1.DeploymentStatus{ObservedGeneration: 2}, deadline),
			false, false, false, "waiting for the deployment controller to observe generation 3 (it has observed 2)"},
		{"no new pod yet", dep(two, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 2, AvailableReplicas: 2}),
			false, false, false, "0 of 2 replicas updated"},
		{"one new pod", dep(two, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 3, UpdatedReplicas: 1, AvailableReplicas: 2}),
			false, false, false, "1 of 2 replicas updated"},
		{"an old pod left", dep(two, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 3, UpdatedReplicas: 2, AvailableReplicas: 2}),
			false, false, false, "1 old replica pending termination, 0 of 2 updated replicas Ready"},
		{"two old pods left", dep(two, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 4, UpdatedReplicas: 2, AvailableReplicas: 3}),
			false, false, false, "2 old replicas pending termination, 0 of 2 updated replicas Ready"},
		{"both new pods Ready, both old ones still there", dep(two, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 4, UpdatedReplicas: 2, ReadyReplicas: 4, AvailableReplicas: 2, UnavailableReplicas: 2}),
			false, true, false, "2 old replicas pending termination, 2 of 2 updated replicas Ready"},
		{"one new pod Ready: the Ready count is the old pods' and one", dep(two, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 4, UpdatedReplicas: 2, ReadyReplicas: 3, AvailableReplicas: 2, UnavailableReplicas: 2}),
			false, false, false, "2 old replicas pending termination, 1 of 2 updated replicas Ready"},
		{"a new pod not yet available", dep(two, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 1, UnavailableReplicas: 1}),
			false, true, false, "1 of 2 updated replicas available"},
		{"available, but one counted unavailable", dep(two, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2, UnavailableReplicas: 1}),
			false, false, false, "2 of 2 updated replicas available"},
		{"more new pods than wanted", dep(two, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 3, UpdatedReplicas: 3, AvailableReplicas: 3}),
			false, false, false, "2 replicas wanted: 3 current, 3 updated, 3 available, 0 unavailable"},
		{"complete", dep(two, complete, progressing), true, true, false, "rollout complete: 2 of 2 replicas updated and available"},
		{"replicas unset is one", dep(nil, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1}),
			true, true, false, "rollout complete: 1 of 1 replicas updated and available"},
		{"scaled to zero", dep(ptr.To[int32](0), appsv1.DeploymentStatus{ObservedGeneration: 3}), true, true, false, "rollout complete: 0 of 0 replicas updated and available"},
		{"progress deadline exceeded", dep(two, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 3, UpdatedReplicas: 1, AvailableReplicas: 2, UnavailableReplicas: 1}, deadline),
			false, false, true, `the deployment controller gave up on the rollout (progressDeadlineSeconds 600): ReplicaSet "coredns-5d78c9869d" has timed out progressing; ` +
				"2 replicas wanted: 3 current, 1 updated, 2 available, 1 unavailable"},
		{"a deadline condition that holds is no failure", dep(two, complete, appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: ProgressDeadlineExceeded}),
			true, true, false, "rollout complete: 2 of 2 replicas updated and available"},
		{"paused", paused, false, false, false, "0 of 2 replicas updated; the Deployment is paused (kubectl rollout resume)"},
	} {
		r := RolloutOf(c.d)
		assert.Equal(t, Rollout{Done: c.done, Serving: c.serving, Failed: c.failed, Message: c.message}, r, c.name)
	}
}

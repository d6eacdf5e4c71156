package dnspatch

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// ProgressDeadlineExceeded is the reason of the Progressing condition the
// deployment controller sets when a rollout has made no progress for
// spec.progressDeadlineSeconds (TimedOutReason in its package).
const ProgressDeadlineExceeded = "ProgressDeadlineExceeded"

// Rollout is where the rollout of a Deployment stands.
type Rollout struct {
	// Done: the deployment controller has seen the current spec, and every
	// replica runs the current template and is available.
	Done bool
	// Serving: the controller has seen the current spec, and as many
	// replicas as wanted run the current template and are Ready (they
	// serve); old replicas may still run, until the new ones are
	// available. Done implies Serving.
	Serving bool
	// Failed: the controller gave up on the rollout (the progress deadline
	// passed); it will not complete without a change.
	Failed bool
	// Message says where it stands, for an operator.
	Message string
}

// RolloutOf tells where the rollout of d stands, as `kubectl rollout
// status` does, and stricter: complete means the controller has observed
// the current generation, and the replicas, the updated replicas and the
// available replicas are all spec.replicas, with none unavailable.
// Serving counts the Ready replicas of the current template from the
// Deployment's status alone, as if every old replica were Ready: at least
// ReadyReplicas minus the old replicas. It is never true early; with an
// old replica not Ready it comes late, at the latest when the old ones
// are gone.
func RolloutOf(d *appsv1.Deployment) Rollout {
	want := ptr.Deref(d.Spec.Replicas, 1)
	st := d.Status
	if st.ObservedGeneration < d.Generation {
		return Rollout{Message: fmt.Sprintf("waiting for the deployment controller to observe generation %d (it has observed %d)",
			d.Generation, st.ObservedGeneration)}
	}
	// Only now: a condition of an earlier generation says nothing of this one.
	for _, c := range st.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse && c.Reason == ProgressDeadlineExceeded {
			deadline := ""
			if d.Spec.ProgressDeadlineSeconds != nil {
				deadline = fmt.Sprintf(" (progressDeadlineSeconds %d)", *d.Spec.ProgressDeadlineSeconds)
			}
			return Rollout{Failed: true, Message: fmt.Sprintf("the deployment controller gave up on the rollout%s: %s; %s",
				deadline, strings.TrimSuffix(c.Message, "."), counts(want, st))}
		}
	}
	old := st.Replicas - st.UpdatedReplicas
	newReady := max(st.ReadyReplicas-max(old, 0), 0)
	serving := st.UpdatedReplicas >= want && newReady >= want
	msg := ""
	switch {
	case st.UpdatedReplicas < want:
		msg = fmt.Sprintf("%d of %d replicas updated", st.UpdatedReplicas, want)
	case old > 0:
		msg = fmt.Sprintf("%d old replicas pending termination", old)
		if old == 1 {
			msg = "1 old replica pending termination"
		}
		msg += fmt.Sprintf(", %d of %d updated replicas Ready", min(newReady, want), want)
	case st.AvailableReplicas < want || st.UnavailableReplicas > 0:
		msg = fmt.Sprintf("%d of %d updated replicas available", st.AvailableReplicas, want)
	case st.Replicas != want || st.UpdatedReplicas != want || st.AvailableReplicas != want:
		msg = counts(want, st)
	default:
		return Rollout{Done: true, Serving: true, Message: fmt.Sprintf("rollout complete: %d of %d replicas updated and available", want, want)}
	}
	if d.Spec.Paused {
		msg += "; the Deployment is paused (kubectl rollout resume)"
	}
	return Rollout{Serving: serving, Message: msg}
}

// counts is the replica counts of a status, for a message.
func counts(want int32, st appsv1.DeploymentStatus) string {
	return fmt.Sprintf("%d replicas wanted: %d current, %d updated, %d available, %d unavailable",
		want, st.Replicas, st.UpdatedReplicas, st.AvailableReplicas, st.UnavailableReplicas)
}

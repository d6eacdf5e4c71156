package dnspatch

import (
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
)

// PatchedHistory returns the names of the ReplicaSets, among rss, that
// the Deployment deployment (its UID) made while it was patched, and that
// hold no pod any more: what revert deletes once the original runs again.
// The Deployment controller copies the Deployment's annotations onto each
// ReplicaSet it makes, Annotation among them; kept, such a ReplicaSet is
// rollout history that `kubectl rollout undo` would bring back, a CoreDNS
// whose Corefile's ConfigMap is gone.
func PatchedHistory(rss []appsv1.ReplicaSet, deployment types.UID) []string {
	var out []string
	for _, rs := range rss {
		if _, patched := rs.Annotations[Annotation]; !patched {
			continue
		}
		owned := false
		for _, o := range rs.OwnerReferences {
			owned = owned || (o.UID == deployment && o.Kind == "Deployment")
		}
		empty := rs.Spec.Replicas != nil && *rs.Spec.Replicas == 0 && rs.Status.Replicas == 0
		if owned && empty {
			out = append(out, rs.Name)
		}
	}
	return out
}

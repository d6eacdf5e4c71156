package dnspatch

import (
	"testing"

	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestPatchedHistory picks the ReplicaSets of the patched template that
// hold no pod: not the original's, not one still scaled up or with pods
// left, not another Deployment's.
func TestPatchedHistory(t *testing.T) {
	rs := func(name string, patched bool, owner types.UID, replicas, pods int32) appsv1.ReplicaSet {
		r := appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name,
			OwnerReferences: []metav1.OwnerReference{{Kind: "Deployment", Name: "coredns", UID: owner}}},
			Spec: appsv1.ReplicaSetSpec{Replicas: &replicas}, Status: appsv1.ReplicaSetStatus{Replicas: pods}}
		if patched {
			r.Annotations = map[string]string{Annotation: "{}", "deployment.kubernetes.io/revision": "2"}
		}
		return r
	}
	got := PatchedHistory([]appsv1.ReplicaSet{
		rs("original", false, "d", 2, 2),
		rs("patched", true, "d", 0, 0),
		rs("patched-again", true, "d", 0, 0),
		rs("still-scaled", true, "d", 1, 1),
		rs("pods-left", true, "d", 0, 1),
		rs("other", true, "e", 0, 0),
	}, "d")
	assert.Equal(t, []string{"patched", "patched-again"}, got)
}

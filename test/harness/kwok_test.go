package harness_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcmirror/mcmirror/test/harness"
)

// Pods that KWOK runs at once get one address each. KWOK v0.7.0 made its
// address pool on the first pod that needed one, racily, and a CI run saw
// the two pods of a Parallel StatefulSet, the first of their cluster, both
// get 10.201.0.0; the harness now has the pool made before the tests.
func TestKWOKPodIPsDistinct(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	west := env.Cluster("west")
	const ns = "ipcheck"
	require.NoError(t, west.Apply(ctx, harness.Namespace(ns)+harness.StatefulSet(ns, "ips", "ips", 6, nil)))
	t.Cleanup(func() {
		_ = west.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	var pods []corev1.Pod
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		l, err := west.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		require.NoError(c, err)
		pods = l.Items
		require.Len(c, pods, 6)
		for _, p := range pods {
			assert.NotEmpty(c, p.Status.PodIP, p.Name)
		}
	}, time.Minute, 50*time.Millisecond)
	seen := map[string]string{}
	for _, p := range pods {
		if other, ok := seen[p.Status.PodIP]; ok {
			t.Errorf("%s and %s both have %s", other, p.Name, p.Status.PodIP)
		}
		seen[p.Status.PodIP] = p.Name
	}
}

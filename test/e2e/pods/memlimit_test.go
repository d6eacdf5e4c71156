package pods

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcmirror/mcmirror/test/harness"
)

// The cluster DNS pods that the chart makes of kubeadm's CoreDNS run with
// Go's memory limit at their container's limits.memory, though the
// Deployment they replace sets no GOMEMLIMIT: coredns-mc reads the limit
// from its cgroup. A relist's garbage is then collected as the heap nears
// the limit, rather than the kernel killing the pod at it.
func TestDNSPodsRunWithTheirMemoryLimit(t *testing.T) {
	env.LogOnFailure(t)
	workloads(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	east := env.Cluster("east")
	_, err := dnsRolledOut(ctx, east)
	require.NoError(t, err)
	pods, err := east.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	require.NoError(t, err)
	require.NotEmpty(t, pods.Items, "east's cluster DNS pods")
	for _, p := range pods.Items {
		c := p.Spec.Containers[0]
		limit := c.Resources.Limits.Memory()
		require.False(t, limit.IsZero(), "%s: no memory limit", p.Name)
		for _, e := range c.Env {
			require.NotEqual(t, "GOMEMLIMIT", e.Name, "%s: the Deployment sets GOMEMLIMIT itself", p.Name)
		}
		out, err := inClient(ctx, "timeout 10 wget -qO- http://"+p.Status.PodIP+":9153/metrics")
		require.NoError(t, err, "%s's metrics: %s", p.Name, out)
		got, found, err := harness.MetricIn(out, "go_gc_gomemlimit_bytes", nil)
		require.NoError(t, err, p.Name)
		require.True(t, found, "%s: no go_gc_gomemlimit_bytes", p.Name)
		assert.Equal(t, float64(limit.Value()), got, "%s: go_gc_gomemlimit_bytes against limits.memory %s", p.Name, limit)
	}
}

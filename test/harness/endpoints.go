package harness

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ReadyEndpoints returns hostname → address of the ready endpoints with a
// hostname of Service ns/svc in c: a StatefulSet's pods.
func (c *Cluster) ReadyEndpoints(ctx context.Context, ns, svc string) (map[string]string, error) {
	list, err := c.Client.DiscoveryV1().EndpointSlices(ns).List(ctx,
		metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, s := range list.Items {
		for _, ep := range s.Endpoints {
			if ep.Hostname != nil && ep.Conditions.Ready != nil && *ep.Conditions.Ready {
				out[*ep.Hostname] = ep.Addresses[0]
			}
		}
	}
	return out, nil
}

// WaitEndpoints waits a minute at most until Service ns/svc of c has
// exactly n ReadyEndpoints, and returns them.
func (c *Cluster) WaitEndpoints(t testing.TB, ns, svc string, n int) map[string]string {
	t.Helper()
	var eps map[string]string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var err error
		eps, err = c.ReadyEndpoints(context.Background(), ns, svc)
		require.NoError(ct, err)
		assert.Len(ct, eps, n)
	}, 60*time.Second, 50*time.Millisecond, "%s: %s/%s with %d ready endpoints", c.Name, ns, svc, n)
	return eps
}

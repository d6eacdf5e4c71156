package pods

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestFlatModeOnPods exports a Service of west in flat mode
// (mirror.linkerd.io/exported=remote-discovery). East's cluster DNS pods
// answer its name with the addresses of west's pods; without routes
// between the nodes for each other's pod ranges east's client cannot
// reach them, and with the routes (flat mode's premise) it does, directly:
// no mirror, no gateway on the path.
func TestFlatModeOnPods(t *testing.T) {
	env.LogOnFailure(t)
	workloads(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	west := env.Cluster("west")
	require.NoError(t, west.Apply(ctx, `
apiVersion: v1
kind: Service
metadata: {name: flat-svc, namespace: default, labels: {mirror.linkerd.io/exported: remote-discovery}}
spec:
  selector: {app: nginx}
  ports: [{name: http, port: 80}]
`))
	t.Cleanup(func() { _, _ = west.Kubectl(context.Background(), "delete", "service", "flat-svc") })

	// The answer: the three pods of west, by their own addresses.
	var addrs []netip.Addr
	var out string
	require.NoError(t, wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		out, err = inClient(ctx, "nslookup flat-svc-west.default.svc.cluster.local")
		if err != nil {
			return false, nil
		}
		addrs = addrs[:0]
		for _, line := range strings.Split(out, "\n") {
			if s, ok := strings.CutPrefix(line, "Address: "); ok {
				if a, err := netip.ParseAddr(strings.TrimSpace(s)); err == nil {
					addrs = append(addrs, a)
				}
			}
		}
		return len(addrs) == 3, nil
	}), "flat-svc-west: %q", out)
	for _, a := range addrs {
		require.True(t, west.PodCIDR.Contains(a), "%s answered for flat-svc-west, outside west's pods %s", a, west.PodCIDR)
	}

	// Without the routes, a pod address of west is out of reach.
	pod := "http://" + addrs[0].String() + "/"
	out, err := inClient(ctx, "timeout 10 wget -qO- "+pod+" >/dev/null 2>&1 && echo reached || echo unreachable")
	require.NoError(t, err)
	require.Equal(t, "unreachable", strings.TrimSpace(out), "%s reached with no route between the clusters' pods", pod)

	require.NoError(t, env.RoutePodsBetweenClusters(true))
	t.Cleanup(func() { _ = env.RoutePodsBetweenClusters(false) })
	eventually(t, ctx, "timeout 10 wget -qO- "+pod+" | cut -c1-34", "hello from west/default/nginx-set-")
	eventually(t, ctx, "timeout 10 wget -qO- http://flat-svc-west/ | cut -c1-34", "hello from west/default/nginx-set-")
}

package pods

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestHelmUpgradeRollsOnlyWhatChanged changes one value of east's release
// (the gateway's maxConnections) and upgrades it as deploy/README.md's
// "Upgrading" says, while a client in east keeps fetching a pod of west by
// name through east's gateway: the gateway's pods roll and run with the new
// value, the controller's and the cluster DNS's pods are not touched, and
// no transfer ends short or wrong (refused connections during the roll are
// the client's to see, and counted). An upgrade with nothing changed
// changes nothing: test/e2e/chart checks that object by object.
func TestHelmUpgradeRollsOnlyWhatChanged(t *testing.T) {
	env.LogOnFailure(t)
	workloads(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	east := env.Cluster("east")
	generation := func(ns, name string) int64 {
		d, err := east.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		return d.Generation
	}
	gateway, controller, dns := generation("mcmirror", "mcmirror-gateway"), generation("mcmirror", "mcmirror-controller"), generation("kube-system", "coredns")

	url, want := "http://nginx-set-0.nginx-svc-west/", "hello from west/default/nginx-set-0"
	eventually(t, ctx, "timeout 10 wget -qO- "+url, want)
	stop := startLoop(t, "helm-upgrade", fmt.Sprintf(fetchLoop, "helm-upgrade", url, want))
	// The upgrade of "Upgrading", on east's values file with one value more
	// (gateway: is the file's last block).
	log, err := env.InstallShell(ctx, `printf '  maxConnections: 5000\n' >> east.yaml
helm --kube-context east upgrade mcmirror charts/mcmirror -n mcmirror -f east.yaml --timeout 15m
kubectl --context east -n mcmirror rollout status deployment mcmirror-gateway --timeout=5m`)
	require.NoError(t, err, log)
	// Old gateway pods gone, and the new ones serve.
	require.NoError(t, wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := east.Client.CoreV1().Pods("mcmirror").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=mcmirror-gateway"})
		if err != nil || len(pods.Items) != 2 {
			return false, nil
		}
		for _, p := range pods.Items {
			if !podReady(&p) || !slices.Contains(p.Spec.Containers[0].Args, "--max-connections=5000") {
				return false, nil
			}
		}
		return true, nil
	}), "east's gateway pods never all ran with --max-connections=5000")
	eventually(t, ctx, "timeout 10 wget -qO- "+url, want)
	tl, out := stop()
	t.Logf("fetches during the upgrade: %+v", tl)
	require.Zero(t, tl.bad, "answers that were not %q although the transfer succeeded:\n%s", want, out)
	require.Zero(t, tl.lost, "DNS lookups that failed:\n%s", out)
	require.Positive(t, tl.ok, out)

	require.Equal(t, gateway+1, generation("mcmirror", "mcmirror-gateway"), "the gateway's Deployment: one new generation")
	require.Equal(t, controller, generation("mcmirror", "mcmirror-controller"), "the controller's Deployment changed")
	require.Equal(t, dns, generation("kube-system", "coredns"), "the cluster DNS's Deployment changed (the hook applied the same patch again)")
}

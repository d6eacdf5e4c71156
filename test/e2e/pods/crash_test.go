package pods

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// TestDNSRolloutReadyThenDyingKeepsOldPods rolls east's cluster DNS to
// pods that become Ready and die about 20 s later, again and again: the
// case the patch's minReadySeconds (35 s) guards, a new pod that serves
// for a while and then crashes, as one does when the loop plugin finds a
// forwarding loop after the pod is Ready. The new template's liveness
// probe asks a port nothing serves from 20 s after start, so the kubelet
// kills each new container after it has been Ready; its readiness probe
// runs every second, so Ready comes as soon as the pod serves. With
// maxUnavailable 0 alone such a pod counts as available the moment it is
// Ready and an old pod is scaled down; with minReadySeconds it never
// counts, and both old pods keep serving throughout.
func TestDNSRolloutReadyThenDyingKeepsOldPods(t *testing.T) {
	env.LogOnFailure(t)
	workloads(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	east := env.Cluster("east")
	deployments := east.Client.AppsV1().Deployments("kube-system")
	before, err := deployments.Get(ctx, "coredns", metav1.GetOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 2, before.Status.AvailableReplicas)
	pods, err := east.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	require.NoError(t, err)
	old := map[string]bool{}
	for _, p := range pods.Items {
		old[p.Name] = true
	}
	require.Len(t, old, 2, "east's DNS pods before the rollout")
	w, err := east.Client.CoreV1().Pods("kube-system").Watch(ctx, metav1.ListOptions{
		LabelSelector: "k8s-app=kube-dns", ResourceVersion: pods.ResourceVersion})
	require.NoError(t, err)
	defer w.Stop()

	stop := startLookups(t, ctx, "dns-crash")
	_, err = east.Kubectl(ctx, "-n", "kube-system", "patch", "deployment", "coredns", "--type=json", "-p", `[
	  {"op":"replace","path":"/spec/template/spec/containers/0/livenessProbe","value":
	    {"httpGet":{"path":"/health","port":8099},"initialDelaySeconds":20,"periodSeconds":1,"failureThreshold":1}},
	  {"op":"add","path":"/spec/template/spec/containers/0/readinessProbe/periodSeconds","value":1}]`)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = east.Kubectl(context.Background(), "-n", "kube-system", "rollout", "undo", "deployment/coredns")
		_, _ = east.Kubectl(context.Background(), "-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=5m")
	})

	// Positive evidence first: a new pod was Ready, then its container
	// was killed and restarted, and more than minReadySeconds have passed
	// since it was first Ready. Meanwhile no old pod may go.
	var firstReady time.Time
	restarted := false
	var oldGone []string
	for firstReady.IsZero() || !restarted || time.Since(firstReady) < 45*time.Second {
		select {
		case <-ctx.Done():
			t.Fatalf("a new DNS pod Ready at %v, restarted after: %v; old pods gone: %v", firstReady, restarted, oldGone)
		case <-time.After(time.Second):
		case ev, ok := <-w.ResultChan():
			require.True(t, ok, "the watch of east's DNS pods ended")
			p, isPod := ev.Object.(*corev1.Pod)
			if !isPod {
				continue
			}
			if old[p.Name] {
				if ev.Type == watch.Deleted || p.DeletionTimestamp != nil {
					oldGone = append(oldGone, p.Name)
					old[p.Name] = false
				}
				continue
			}
			if !firstReady.IsZero() && restarts(p) > 0 {
				restarted = true
			}
			if firstReady.IsZero() && podReady(p) {
				firstReady = time.Now()
			}
		}
	}
	require.Empty(t, oldGone, "old DNS pods taken down by a rollout whose new pods die after Ready")
	d, err := deployments.Get(ctx, "coredns", metav1.GetOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 2, d.Status.AvailableReplicas, "available DNS pods during the rollout: %+v", d.Status)
	tl, out := stop()
	requireLookups(t, "a rollout whose new pods die after Ready", tl, out)
}

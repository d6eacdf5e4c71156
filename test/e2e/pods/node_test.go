package pods

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/mcmirror/mcmirror/test/harness"
)

// TestRealNodeRunsPods checks the kubelet's own work on a real node: a pod
// of a local image runs with a Secret volume, the downward API and a
// readiness probe, and kubectl exec and logs reach it.
func TestRealNodeRunsPods(t *testing.T) {
	env.LogOnFailure(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	west := env.Cluster("west")
	imgs, err := harness.LocalImages()
	require.NoError(t, err)
	require.NoError(t, west.Apply(ctx, `
apiVersion: v1
kind: Secret
metadata: {name: node-check, namespace: default}
stringData: {word: sesame}
---
apiVersion: v1
kind: Pod
metadata: {name: node-check, namespace: default}
spec:
  containers:
  - name: main
    image: `+imgs.Busybox+`
    imagePullPolicy: Never
    command: [sh, -c, 'echo started $POD_NAME; mkdir -p /tmp/www; echo ok > /tmp/www/index.html; exec httpd -f -p 8080 -h /tmp/www']
    env:
    - name: POD_NAME
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    readinessProbe:
      httpGet: {path: /index.html, port: 8080}
      periodSeconds: 1
    volumeMounts: [{name: s, mountPath: /secret, readOnly: true}]
    securityContext:
      runAsUser: 65534
      runAsNonRoot: true
      allowPrivilegeEscalation: false
      capabilities: {drop: [ALL]}
  volumes: [{name: s, secret: {secretName: node-check}}]
`))
	t.Cleanup(func() {
		_ = west.Client.CoreV1().Pods("default").Delete(context.Background(), "node-check", metav1.DeleteOptions{})
	})
	var pod *corev1.Pod
	require.NoError(t, wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pod, err = west.Client.CoreV1().Pods("default").Get(ctx, "node-check", metav1.GetOptions{})
		return err == nil && podReady(pod), nil
	}), "pod never Ready: %+v", pod)
	ip, err := netip.ParseAddr(pod.Status.PodIP)
	require.NoError(t, err)
	require.True(t, west.PodCIDR.Contains(ip), "pod IP %s outside %s", ip, west.PodCIDR)

	out, err := west.Kubectl(ctx, "exec", "node-check", "--", "sh", "-c", "cat /secret/word; echo; id -u")
	require.NoError(t, err)
	require.Equal(t, "sesame\n65534\n", out)
	out, err = west.Kubectl(ctx, "logs", "node-check")
	require.NoError(t, err)
	require.Equal(t, "started node-check", strings.TrimSpace(out))
}

package pods

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
)

// TestServiceExportOnPods is the Multi-Cluster Services API on real pods,
// as the chart installs it: a ServiceExport in west makes west's controller
// pod mark the Service and say Ready; east's controller pod imports it; from
// east's client pod the name web.default.svc.clusterset.local, answered by
// east's cluster DNS pods, is the ClusterSetIP, and wget through it reaches
// a pod of west (kube-proxy, then both clusters' gateway pods).
func TestServiceExportOnPods(t *testing.T) {
	env.LogOnFailure(t)
	workloads(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	west := env.Cluster("west")
	require.NoError(t, west.Apply(ctx, `
apiVersion: v1
kind: Service
metadata: {name: mcs-web, namespace: default}
spec:
  selector: {app: nginx}
  ports: [{name: http, port: 80}]
---
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceExport
metadata: {name: mcs-web, namespace: default}
`))
	t.Cleanup(func() {
		_, _ = west.Kubectl(context.Background(), "delete", "serviceexport,service", "mcs-web")
	})
	client, err := mcsclient.NewForConfig(west.Config)
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		se, err := client.MulticlusterV1beta1().ServiceExports("default").Get(ctx, "mcs-web", metav1.GetOptions{})
		require.NoError(c, err)
		ready := meta.FindStatusCondition(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionReady))
		require.NotNil(c, ready, "conditions %v", se.Status.Conditions)
		assert.Equal(c, metav1.ConditionTrue, ready.Status, ready.Message)
	}, 2*time.Minute, time.Second, "west's ServiceExport mcs-web is Ready")

	eventually(t, ctx, "timeout 10 wget -qO- http://mcs-web.default.svc.clusterset.local/ | cut -c1-34", "hello from west/default/nginx-set-")
	eventually(t, ctx, "nslookup -type=TXT dns-version.clusterset.local | grep -o '\"1.0.0\"'", `"1.0.0"`)

	// Forward mode's DNS server, mcmirror-dns, as the chart renders it
	// with east's values and dns.mode=forward, run beside the replaced
	// DNS: its pods (unprivileged, on 1053, read-only root) become ready,
	// and its Service answers the ClusterSetIP of the same name.
	forward := `helm template mcmirror charts/mcmirror -n mcmirror -f east.yaml --set dns.mode=forward --show-only templates/dns-forward.yaml`
	log, err := env.InstallShell(ctx, forward+` | kubectl --context east apply -f -
kubectl --context east -n mcmirror rollout status deployment mcmirror-dns --timeout=3m`)
	require.NoError(t, err, log)
	t.Cleanup(func() {
		_, _ = env.InstallShell(context.Background(), forward+` | kubectl --context east delete --wait -f -`)
	})
	east := env.Cluster("east")
	svc, err := east.Client.CoreV1().Services("mcmirror").Get(ctx, "mcmirror-dns", metav1.GetOptions{})
	require.NoError(t, err)
	si, err := mcsclient.NewForConfig(east.Config)
	require.NoError(t, err)
	imp, err := si.MulticlusterV1beta1().ServiceImports("default").Get(ctx, "mcs-web", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, imp.Spec.IPs)
	eventually(t, ctx, fmt.Sprintf("nslookup mcs-web.default.svc.clusterset.local %s | grep -c '^Address: %s$'", svc.Spec.ClusterIP, imp.Spec.IPs[0]), "1")
}

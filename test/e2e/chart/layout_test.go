package chart_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/mcmirror/mcmirror/test/harness"
)

// TestInstallChecksTheCoreDNSLayout: replace mode reads the cluster's
// CoreDNS Deployment when helm renders the release, and where it is not
// laid out as the values dns.coredns say, `helm install` itself fails,
// before anything is created, with what differs and the value to set; with
// that value set (or on the layouts the defaults fit: kubeadm's, k3s's
// with its second volume and items, the EKS add-on's), it renders (a
// server-side dry run: `lookup` reads the cluster, nothing is written).
// RKE2's chart requires a node of its own per DNS pod: on a cluster with
// no node to spare, where replace mode's rollout (every new pod before an
// old one stops) would wait forever, the install fails too, and says what
// to do.
func TestInstallChecksTheCoreDNSLayout(t *testing.T) {
	env.LogOnFailure(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	east := env.Cluster("east")
	kubeadm := harness.KubeadmCoreDNSDeployment("kube-system", harness.KubeadmCoreDNSImage)
	edit := func(name string, edits ...string) string {
		t.Helper()
		m, err := harness.ReplaceOnce(kubeadm, edits...)
		require.NoError(t, err, name)
		return m
	}
	// k3s's: two keys projected, a second volume for custom files.
	k3s := edit("k3s",
		"items: [{key: Corefile, path: Corefile}]\n", "items: [{key: Corefile, path: Corefile}, {key: NodeHosts, path: NodeHosts}]\n"+
			"      - name: custom-config-volume\n        configMap: {name: coredns-custom, optional: true}\n",
		"{name: config-volume, mountPath: /etc/coredns, readOnly: true}", "{name: config-volume, mountPath: /etc/coredns, readOnly: true}\n        - {name: custom-config-volume, mountPath: /etc/coredns/custom, readOnly: true}")
	// RKE2's as its chart publishes it: a required anti-affinity per node,
	// one replica, on this cluster's one node; and with that anti-affinity
	// preferred, as a HelmChartConfig may make it.
	rke2 := func(affinity string) string {
		t.Helper()
		l, err := harness.RKE2CoreDNS(affinity)
		require.NoError(t, err)
		m, err := l.Manifest()
		require.NoError(t, err)
		return m
	}
	// The config volume, and RKE2's names, otherwise than kubeadm's.
	volume := edit("volume config",
		"- name: config-volume\n        configMap:", "- name: config\n        configMap:",
		"{name: config-volume, mountPath", "{name: config, mountPath")
	rke2Names := edit("rke2", "metadata:\n  name: coredns\n", "metadata:\n  name: rke2-coredns-rke2-coredns\n",
		"name: coredns\n          items:", "name: rke2-coredns-rke2-coredns\n          items:")
	rke2Values := []string{"dns.coredns.deployment=rke2-coredns-rke2-coredns", "dns.coredns.configMap=rke2-coredns-rke2-coredns"}
	for _, c := range []struct {
		name, deployment, manifest string
		set                        []string
		want                       string // empty: renders
	}{
		{"kubeadm", "coredns", kubeadm, nil, ""},
		{"k3s", "coredns", k3s, nil, ""},
		{"volume config", "coredns", volume, nil,
			"kube-system/coredns: container coredns's first volume mount is config at /etc/coredns, not config-volume at /etc/coredns (where mounted at /etc/coredns: dns.coredns.volume=config)"},
		{"volume config, with the value", "coredns", volume, []string{"dns.coredns.volume=config"}, ""},
		{"another container name", "coredns", edit("container", "      - name: coredns\n        image:", "      - name: dns\n        image:"), nil,
			"kube-system/coredns: its first container is named dns, not coredns (dns.coredns.container=dns)"},
		{"another ServiceAccount", "coredns", edit("sa", "serviceAccountName: coredns", "serviceAccountName: kube-dns"), nil,
			"kube-system/coredns runs as ServiceAccount kube-dns, not coredns (dns.coredns.serviceAccount=kube-dns)"},
		{"RKE2's names", "rke2-coredns-rke2-coredns", rke2Names,
			[]string{"dns.coredns.deployment=rke2-coredns-rke2-coredns"},
			"kube-system/rke2-coredns-rke2-coredns: volume config-volume is the ConfigMap rke2-coredns-rke2-coredns, not coredns (dns.coredns.configMap=rke2-coredns-rke2-coredns)"},
		{"RKE2's names, with the values", "rke2-coredns-rke2-coredns", rke2Names, rke2Values, ""},
		{"RKE2's chart, its anti-affinity on one node", "rke2-coredns-rke2-coredns", rke2(""), rke2Values,
			"kube-system/rke2-coredns-rke2-coredns requires a node of its own for each of its pods (a required podAntiAffinity on kubernetes.io/hostname that selects them), and has no node to spare (replicas 1, schedulable nodes 1)"},
		{"RKE2's chart, the anti-affinity preferred", "rke2-coredns-rke2-coredns", rke2(harness.RKE2PreferredAffinity), rke2Values, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			deployments := east.Client.AppsV1().Deployments("kube-system")
			require.NoError(t, east.Apply(ctx, c.manifest))
			t.Cleanup(func() {
				_ = east.Delete(context.Background(), c.manifest)
				_ = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
					_, err := deployments.Get(ctx, c.deployment, metav1.GetOptions{})
					return apierrors.IsNotFound(err), nil
				})
			})
			args := []string{"install", "mcmirror", chartDir(), "-n", "mcmirror-layout", "--set", "cluster=east", "--set", "gateway.allowClusters={west}",
				// A chart that failed to refuse would install and wait for
				// its hook: not for long.
				"--timeout=1m"}
			for _, s := range c.set {
				args = append(args, "--set", s)
			}
			if c.want == "" {
				out, err := helm(t, east.Kubeconfig, append(args, "--dry-run=server")...)
				require.NoError(t, err, out)
				assert.Contains(t, out, "kind: Job")
				return
			}
			out, err := helm(t, east.Kubeconfig, args...)
			require.Error(t, err, out)
			assert.Contains(t, out, "Error: INSTALLATION FAILED: execution error at (mcmirror/templates/dns-patch.yaml")
			assert.Contains(t, out, c.want)
			assert.Contains(t, out, "or install with dns.mode=forward")
			assert.Contains(t, out, "nothing was changed")
			// Nothing was: no release, no object of one.
			list, err := helm(t, east.Kubeconfig, "list", "-A", "-a", "-q")
			require.NoError(t, err, list)
			assert.Empty(t, strings.TrimSpace(list))
			_, err = east.Client.CoreV1().Namespaces().Get(ctx, "mcmirror-links", metav1.GetOptions{})
			assert.True(t, apierrors.IsNotFound(err), "namespace mcmirror-links: %v", err)
		})
	}
}

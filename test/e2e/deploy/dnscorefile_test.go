package deploy_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cf "github.com/mcmirror/mcmirror/internal/corefile"
	"github.com/mcmirror/mcmirror/internal/dnspatch"
)

// rbacRefused matches what coredns-mc dns prints when RBAC refuses it: its
// own "(403)", or client-go's "is forbidden". A bare "403" would also match
// the nanoseconds of the command's timestamp line.
var rbacRefused = regexp.MustCompile(`\(403\)|forbidden`)

// k3sCorefile is the Corefile k3s ships, with its imports of custom files.
const k3sCorefile = `.:53 {
    errors
    health
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
      pods insecure
      fallthrough in-addr.arpa ip6.arpa
    }
    hosts /etc/coredns/NodeHosts {
      ttl 60
      reload 15s
      fallthrough
    }
    prometheus :9153
    forward . /etc/resolv.conf
    cache 30
    loop
    reload
    loadbalance
    import /etc/coredns/custom/*.override
}
import /etc/coredns/custom/*.server
`

// chartDNSHook renders the chart's dns-patch.yaml with defaults for a
// cluster east and returns the rules of its Role and the stanza its
// ConfigMap gives the apply Job.
func chartDNSHook(t *testing.T) (rules []rbacv1.PolicyRule, stanza string) {
	t.Helper()
	out := helmTemplate(t, "--set", "cluster=east", "--set", "gateway.allowClusters={west}",
		"--show-only", "templates/dns-patch.yaml")
	role := object[rbacv1.Role](t, out, "Role", "kube-system", "mcmirror-dns-patch")
	cm := object[corev1.ConfigMap](t, out, "ConfigMap", "mcmirror", "mcmirror-dns-patch")
	require.NotEmpty(t, role.Rules)
	require.NotEmpty(t, cm.Data["mcmirror.stanza"])
	return role.Rules, cm.Data["mcmirror.stanza"]
}

// TestDNSHookKeepsTheClusterCorefile runs `coredns-mc dns apply` with the
// chart's stanza, as the ServiceAccount of a Role with the chart's rules,
// on kubeadm's Deployment whose ConfigMap holds k3s's Corefile and its
// NodeHosts: on a node whose resolver is local it refuses and changes
// nothing; otherwise the Deployment reads coredns-mcmirror, which is the
// cluster's Corefile with the stanza added and every other key; the
// cluster's ConfigMap is never written; revert gives the Deployment back
// as created and, once its rollout is over, deletes coredns-mcmirror.
func TestDNSHookKeepsTheClusterCorefile(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	const ns = "deploy-dns-corefile"
	east := env.Cluster("east")
	env.TempNamespace(t, ns, east)
	rules, stanza := chartDNSHook(t)
	rulesJSON, err := json.Marshal(rules) // JSON is YAML
	require.NoError(t, err)
	require.NoError(t, east.Apply(ctx, accountWithRole(ns, "dns-hook", string(rulesJSON))))
	cms := east.Client.CoreV1().ConfigMaps(ns)
	own, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "coredns"},
		Data: map[string]string{"Corefile": k3sCorefile, "NodeHosts": "10.0.0.5 node-a\n"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	created := recreateCoreDNS(t, east, ns, kubeadmDeployment(ns))
	kubeconfig := accountKubeconfig(t, east, ns, "dns-hook")
	dir := t.TempDir()
	stanzaFile, resolv := filepath.Join(dir, "mcmirror.stanza"), filepath.Join(dir, "resolv.conf")
	require.NoError(t, os.WriteFile(stanzaFile, []byte(stanza), 0o644))
	apply := []string{"apply", "--deployment", ns + "/coredns", "--patch-file", projectPatch, "--wait=false",
		"--corefile-stanza", stanzaFile, "--resolv-conf", resolv}

	// A node whose resolver is local: refused, nothing written.
	require.NoError(t, os.WriteFile(resolv, []byte("nameserver 127.0.0.53\noptions edns0\n"), 0o644))
	code, out := 0, ""
	require.EventuallyWithT(t, func(ct *assert.CollectT) { // the binding takes a moment to count
		code, out = dnsHook(t, kubeconfig, apply...)
		assert.NotRegexp(ct, rbacRefused, out, "RBAC not in force yet")
	}, wait, tick)
	require.Equal(t, 1, code, out)
	assert.Contains(t, out, "would send queries back to the DNS pods themselves: line 15: forward to /etc/resolv.conf, whose nameserver 127.0.0.53")
	assert.Contains(t, out, "Set dns.upstream")
	assert.Contains(t, out, "nothing was changed")
	_, err = cms.Get(ctx, "coredns-mcmirror", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "coredns-mcmirror after the refusal: %v", err)
	assert.Equal(t, created.ResourceVersion, getCoreDNS(t, east, ns).ResourceVersion, "the Deployment after the refusal")

	// A resolver elsewhere: applied.
	require.NoError(t, os.WriteFile(resolv, []byte("nameserver 10.0.0.2\n"), 0o644))
	code, out = dnsHook(t, kubeconfig, apply...)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "ConfigMap coredns-mcmirror: Corefile of ConfigMap "+ns+"/coredns, key Corefile, with mcmirror's block added to the block .:53 (line 1)")
	assert.Contains(t, out, "line 3: health's lameduck (none: 0 s) -> 10s")
	want, err := cf.Add(k3sCorefile, cf.Edit{Zone: "cluster.local", ClusterSet: "clusterset.local", Stanza: stanza})
	require.NoError(t, err)
	got, err := cms.Get(ctx, "coredns-mcmirror", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"Corefile": want.Corefile, "NodeHosts": "10.0.0.5 node-a\n"}, got.Data)
	assert.Contains(t, got.Data["Corefile"], "    mcmirror cluster.local clusterset.local in-addr.arpa ip6.arpa {\n")
	assert.Contains(t, got.Data["Corefile"], "    import /etc/coredns/custom/*.override\n}\nimport /etc/coredns/custom/*.server\n")
	d := getCoreDNS(t, east, ns)
	assert.Equal(t, "coredns-mcmirror", d.Spec.Template.Spec.Volumes[0].ConfigMap.Name)
	assert.Contains(t, d.Annotations, dnspatch.Annotation)
	now, err := cms.Get(ctx, "coredns", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, own.ResourceVersion, now.ResourceVersion, "the cluster's ConfigMap is never written")

	// Again (an upgrade): from the recorded original, the same ConfigMap.
	code, out = dnsHook(t, kubeconfig, apply...)
	require.Equal(t, 0, code, out)
	again, err := cms.Get(ctx, "coredns-mcmirror", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, got.ResourceVersion, again.ResourceVersion, "the same Corefile: not written again")

	// Uninstall: the Deployment as created; coredns-mcmirror goes once
	// the rollout is over (here: the second revert, --wait=false).
	revert := []string{"revert", "--deployment", ns + "/coredns", "--wait=false", "--corefile-configmap", "coredns-mcmirror", "--prune-history"}
	code, out = dnsHook(t, kubeconfig, revert...)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "left while the rollout runs: ConfigMap coredns-mcmirror and the ReplicaSets of the patched template; revert again")
	assert.Equal(t, created.Spec, getCoreDNS(t, east, ns).Spec)
	code, out = dnsHook(t, kubeconfig, revert...)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "deleted ConfigMap coredns-mcmirror, the Corefile dns apply made from ConfigMap "+ns+"/coredns, key Corefile")
	_, err = cms.Get(ctx, "coredns-mcmirror", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "coredns-mcmirror after revert: %v", err)
	// The chart's Role allows the ReplicaSets' list and delete, which
	// --prune-history needs (this cluster runs no Deployment controller:
	// there are none to delete).
	assert.NotRegexp(t, rbacRefused, out)
	now, err = cms.Get(ctx, "coredns", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, own.ResourceVersion, now.ResourceVersion, "the cluster's ConfigMap is as it was")
}

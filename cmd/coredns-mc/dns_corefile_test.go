package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/mcmirror/mcmirror/internal/dnspatch"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"
)

const kubeadmCorefile = ".:53 {\n    errors\n    kubernetes cluster.local in-addr.arpa ip6.arpa {\n       pods insecure\n    }\n    forward . /etc/resolv.conf {\n       max_concurrent 1000\n    }\n    loop\n}\n"

// corefileCmd is dns apply with the Corefile step, on a fake API server
// that holds kubeadm's ConfigMap coredns (and a NodeHosts key, as k3s's).
func corefileCmd(t *testing.T, resolv string, upstream ...string) (*dnsCmd, *fake.Clientset, *unstructured.Unstructured) {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "stanza"), []byte("mcmirror cluster.local clusterset.local {\n    cluster east\n}\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte(resolv), 0o644))
	cs := fake.NewClientset(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: "kube-system"},
		Data:       map[string]string{"Corefile": kubeadmCorefile, "NodeHosts": "10.0.0.5 node-a\n"},
	})
	var out bytes.Buffer
	c := &dnsCmd{action: "apply", ns: "kube-system", name: "coredns", cli: cli{stdout: &out, stderr: &out}, clients: cs,
		corefile: corefileStep{stanzaFile: filepath.Join(dir, "stanza"), configMap: "coredns-mcmirror", zone: "cluster.local",
			upstream: upstream, resolvConf: filepath.Join(dir, "resolv.conf")}}
	require.NoError(t, c.parseCorefileFlags(""))
	b, err := os.ReadFile("../../internal/dnspatch/testdata/kubeadm-coredns.yaml")
	require.NoError(t, err)
	js, err := yaml.YAMLToJSON(b)
	require.NoError(t, err)
	var obj map[string]any
	require.NoError(t, json.Unmarshal(js, &obj))
	return c, cs, &unstructured.Unstructured{Object: obj}
}

// TestDNSCorefileFromTheCluster: apply writes coredns-mcmirror from the
// cluster's own ConfigMap (every key of it, the Corefile with the stanza
// added), never writes the cluster's ConfigMap, and revert deletes only
// what apply wrote.
func TestDNSCorefileFromTheCluster(t *testing.T) {
	ctx := context.Background()
	c, cs, dep := corefileCmd(t, "nameserver 10.0.0.2\n")
	d, err := c.deriveCorefile(ctx, dep)
	require.NoError(t, err)
	require.NoError(t, c.writeCorefile(ctx, d))
	got, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "coredns-mcmirror", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, ".:53 {\n    errors\n    mcmirror cluster.local clusterset.local {\n        cluster east\n    }\n"+kubeadmCorefile[len(".:53 {\n    errors\n"):],
		got.Data["Corefile"])
	assert.Equal(t, "10.0.0.5 node-a\n", got.Data["NodeHosts"])
	assert.Equal(t, "ConfigMap kube-system/coredns, key Corefile", got.Annotations[corefileFrom])
	orig, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, kubeadmCorefile, orig.Data["Corefile"], "the cluster's own Corefile is never written")

	// Again (an upgrade), from the original the annotation recorded,
	// although the Deployment now points at coredns-mcmirror.
	p, err := dnspatch.Apply(dep.Object, []dnspatch.Op{{Op: "replace", Path: "/spec/template/spec/volumes/0/configMap/name", Value: json.RawMessage(`"coredns-mcmirror"`)}})
	require.NoError(t, err)
	patched, err := p.Preview(dep.Object)
	require.NoError(t, err)
	var after map[string]any
	require.NoError(t, json.Unmarshal(patched, &after))
	d, err = c.deriveCorefile(ctx, &unstructured.Unstructured{Object: after})
	require.NoError(t, err)
	require.NoError(t, c.writeCorefile(ctx, d))

	c.action = "revert"
	require.NoError(t, c.deleteCorefile(ctx))
	_, err = cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "coredns-mcmirror", metav1.GetOptions{})
	assert.Error(t, err, "deleted")
	_, err = cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	assert.NoError(t, err, "the cluster's own stays")

	// A coredns-mcmirror apply did not write (an older release's) is
	// neither overwritten nor deleted.
	_, err = cs.CoreV1().ConfigMaps("kube-system").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "coredns-mcmirror", Namespace: "kube-system"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.ErrorContains(t, c.writeCorefile(ctx, d), "exists and was not written by dns apply")
	require.NoError(t, c.deleteCorefile(ctx))
	_, err = cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "coredns-mcmirror", metav1.GetOptions{})
	assert.NoError(t, err)
}

// TestDNSCorefileLoopRefused: on a node whose resolver is local, apply
// refuses before writing anything and says which value to set; with
// --upstream it forwards there.
func TestDNSCorefileLoopRefused(t *testing.T) {
	ctx := context.Background()
	c, _, dep := corefileCmd(t, "nameserver 127.0.0.53\n")
	_, err := c.deriveCorefile(ctx, dep)
	require.ErrorContains(t, err, "would send queries back to the DNS pods themselves: line 6: forward to /etc/resolv.conf, whose nameserver 127.0.0.53")
	assert.ErrorContains(t, err, "Set dns.upstream")
	assert.ErrorContains(t, err, "nothing was changed")

	c, _, dep = corefileCmd(t, "nameserver 127.0.0.53\n", "10.0.0.2")
	d, err := c.deriveCorefile(ctx, dep)
	require.NoError(t, err)
	assert.Contains(t, d.cm.Data["Corefile"], "    forward . 10.0.0.2 {\n")
}

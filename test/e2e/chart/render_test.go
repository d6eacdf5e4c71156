// Package chart_test proves the Helm chart charts/mcmirror with the real
// helm (built from its Go module by test/tools/build.sh): it lints clean,
// renders what each combination of values asks for, refuses bad values
// with a message naming the value, is the source of the plain manifests of
// deploy/, and installs, upgrades and uninstalls on real API servers
// (without nodes: the chart's pods on real nodes are test/e2e/pods's).
package chart_test

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/mcs-api/config/crd"

	"github.com/mcmirror/mcmirror/internal/check"
	"github.com/mcmirror/mcmirror/test/harness"
)

// chartDir is charts/mcmirror.
func chartDir() string { return harness.RepoPath("charts", "mcmirror") }

// helmBin returns the project's helm.
func helmBin(t *testing.T) string {
	t.Helper()
	h, err := harness.Binary("helm")
	require.NoError(t, err)
	return h
}

// helm runs the project's helm with args, with its own cache, config and
// data directories (nothing of the user's), and kubeconfig when not empty.
func helm(t *testing.T, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(helmBin(t), args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	if kubeconfig != "" {
		cmd.Env = append(cmd.Env, "KUBECONFIG="+kubeconfig)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

// eastValues are the values of the example cluster of deploy/.
var eastValues = []string{"-f", filepath.Join(chartDir(), "ci", "east-values.yaml")}

// template renders the chart as release mcmirror in namespace mcmirror with
// the values of args.
func template(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return helm(t, "", append([]string{"template", "mcmirror", chartDir(), "--namespace", "mcmirror"}, args...)...)
}

// rendered is a chart's output, by kind/namespace/name.
type rendered map[string]*unstructured.Unstructured

func key(kind, ns, name string) string { return kind + "/" + ns + "/" + name }

// render renders the chart with args and decodes every object.
func render(t *testing.T, args ...string) rendered {
	t.Helper()
	out, err := template(t, args...)
	require.NoError(t, err, out)
	objs := rendered{}
	for _, u := range decode(t, out) {
		k := key(u.GetKind(), u.GetNamespace(), u.GetName())
		require.NotContains(t, objs, k, "rendered twice")
		objs[k] = u
	}
	return objs
}

// has reports whether r holds the object.
func (r rendered) has(kind, ns, name string) bool { _, ok := r[key(kind, ns, name)]; return ok }

// deployment returns a rendered Deployment, typed.
func (r rendered) deployment(t *testing.T, name string) *appsv1.Deployment {
	t.Helper()
	u, ok := r[key("Deployment", "mcmirror", name)]
	require.True(t, ok, "Deployment mcmirror/%s not rendered", name)
	d := &appsv1.Deployment{}
	require.NoError(t, k8sruntime.DefaultUnstructuredConverter.FromUnstructured(u.Object, d))
	return d
}

// data returns key k of the rendered ConfigMap ns/name.
func (r rendered) data(t *testing.T, ns, name, k string) string {
	t.Helper()
	u, ok := r[key("ConfigMap", ns, name)]
	require.True(t, ok, "ConfigMap %s/%s not rendered: %v", ns, name, r.kinds())
	s, _, _ := unstructured.NestedString(u.Object, "data", k)
	return s
}

// corefile returns the Corefile of the rendered ConfigMap
// (dns.patchDeployment=false).
func (r rendered) corefile(t *testing.T) string {
	t.Helper()
	return r.data(t, "kube-system", "coredns-mcmirror", "Corefile")
}

// stanza returns the mcmirror block the DNS hook Job adds to the
// cluster's Corefile (dns.patchDeployment, the default).
func (r rendered) stanza(t *testing.T) string {
	t.Helper()
	s := r.data(t, "mcmirror", "mcmirror-dns-patch", "mcmirror.stanza")
	require.NotEmpty(t, s, "mcmirror-dns-patch has no key mcmirror.stanza")
	return s
}

// kinds lists what r holds, for messages.
func (r rendered) kinds() []string { return slices.Collect(maps.Keys(r)) }

// The chart lints clean, strictly, with the values of deploy/'s example
// cluster, and its defaults alone fail: cluster is required.
func TestLint(t *testing.T) {
	out, err := helm(t, "", append([]string{"lint", "--strict", chartDir()}, eastValues...)...)
	require.NoError(t, err, out)
	assert.Contains(t, out, "1 chart(s) linted, 0 chart(s) failed")
	out, err = helm(t, "", "lint", "--strict", chartDir())
	require.Error(t, err, "lint with the defaults, which name no cluster:\n%s", out)
	assert.Contains(t, out, "cluster")
}

// deploy/'s plain manifests are the chart's output: generate.sh --check
// renders the chart again and compares every file.
func TestDeployIsGenerated(t *testing.T) {
	cmd := exec.Command(harness.RepoPath("deploy", "generate.sh"), "--check", "--helm", helmBin(t))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "deploy/ is not what the chart renders:\n%s", out)
}

// The chart's crds/ holds the ServiceExport and ServiceImport CRDs of
// sigs.k8s.io/mcs-api exactly as the module embeds them, and nothing else;
// `helm template` leaves them out (so do deploy/'s templates' files) and
// renders both with --include-crds.
func TestCRDsAreMCSAPIs(t *testing.T) {
	want := map[string][]byte{
		"multicluster.x-k8s.io_serviceexports.yaml": crd.ServiceExportCRD,
		"multicluster.x-k8s.io_serviceimports.yaml": crd.ServiceImportCRD,
	}
	files, err := filepath.Glob(filepath.Join(chartDir(), "crds", "*"))
	require.NoError(t, err)
	assert.Len(t, files, len(want), "charts/mcmirror/crds/: %v", files)
	for name, def := range want {
		got, err := os.ReadFile(filepath.Join(chartDir(), "crds", name))
		require.NoError(t, err)
		assert.True(t, bytes.Equal(def, got), "charts/mcmirror/crds/%s is not the module's: run deploy/generate.sh", name)
	}
	args := append([]string{"--set", "namespace.create=false"}, eastValues...)
	for k := range render(t, args...) {
		assert.NotContains(t, k, "CustomResourceDefinition/")
	}
	r := render(t, append(args, "--include-crds")...)
	for _, name := range harness.MCSCRDNames {
		assert.True(t, r.has("CustomResourceDefinition", "", name), "%v", r.kinds())
	}
}

// Gateway mode, the default: every part, each with this cluster's values.
func TestRenderGatewayMode(t *testing.T) {
	r := render(t, "--set", "cluster=paris", "--set", "gateway.allowClusters={east,west}",
		"--set", "gateway.peers.east=198.51.100.7:4143", "--set", "gateway.peers.west=[2001:db8::1]:31443",
		"--set", "image.repository=registry.example.com/mc/coredns-mc", "--set", "image.tag=v9")
	const image = "registry.example.com/mc/coredns-mc:v9"

	c := r.deployment(t, "mcmirror-controller")
	args := c.Spec.Template.Spec.Containers[0].Args
	assert.Contains(t, args, "--cluster=paris")
	assert.Contains(t, args, "--egress-service=mcmirror/mcmirror-gateway-egress")
	assert.Contains(t, args, "--link-secrets=mcmirror-links")
	assert.Equal(t, image, c.Spec.Template.Spec.Containers[0].Image)
	assert.EqualValues(t, 2, *c.Spec.Replicas)

	g := r.deployment(t, "mcmirror-gateway")
	args = g.Spec.Template.Spec.Containers[0].Args
	assert.Contains(t, args, "--cluster=paris")
	// Peers in name order, one flag each; an IPv6 address keeps its brackets.
	assert.Equal(t, []string{"--peer=east=198.51.100.7:4143", "--peer=west=[2001:db8::1]:31443"}, flagsOf(args, "--peer="))
	assert.Equal(t, []string{"--allow-cluster=east", "--allow-cluster=west"}, flagsOf(args, "--allow-cluster="))
	assert.Equal(t, image, g.Spec.Template.Spec.Containers[0].Image)
	assert.Equal(t, "mcmirror-gateway-tls", g.Spec.Template.Spec.Volumes[0].Secret.SecretName)

	cf := r.stanza(t)
	assert.True(t, strings.HasPrefix(cf, "mcmirror cluster.local clusterset.local in-addr.arpa ip6.arpa {\n"), cf)
	assert.Contains(t, cf, "\n    cluster paris\n")
	assert.Contains(t, cf, "link_secrets mcmirror-links")
	// The gateway's /peers by its Service's name, which the plugin looks
	// up through its own server.
	assert.Contains(t, cf, "\n    gateway_health http://mcmirror-gateway-metrics.mcmirror.svc.cluster.local:9155/peers\n")
	// The hook makes the Corefile from the cluster's own: the chart
	// renders none.
	assert.False(t, r.has("ConfigMap", "kube-system", "coredns-mcmirror"))

	for _, k := range []string{
		key("Namespace", "", "mcmirror-links"),
		key("ServiceAccount", "mcmirror", "mcmirror-link"),
		key("Service", "mcmirror", "mcmirror-gateway"),
		key("Service", "mcmirror", "mcmirror-gateway-egress"),
		key("Service", "mcmirror", "mcmirror-gateway-metrics"),
		key("Service", "mcmirror", "mcmirror-controller-metrics"),
		key("PodDisruptionBudget", "mcmirror", "mcmirror-gateway"),
		key("PodDisruptionBudget", "mcmirror", "mcmirror-controller"),
		key("PodDisruptionBudget", "kube-system", "coredns"),
		key("ValidatingAdmissionPolicy", "", "mcmirror-mirror-metadata"),
		key("ValidatingAdmissionPolicyBinding", "", "mcmirror-mirror-metadata"),
		key("Role", "kube-system", "mcmirror-dns-patch"),
		key("ConfigMap", "mcmirror", "mcmirror-dns-patch"),
		key("Job", "mcmirror", "mcmirror-dns-apply"),
		key("Job", "mcmirror", "mcmirror-dns-revert"),
	} {
		assert.Contains(t, r, k, "rendered: %v", r.kinds())
	}
	// The release's namespace is helm's (--create-namespace), not the chart's.
	assert.NotContains(t, r, key("Namespace", "", "mcmirror"))
	// Scrape annotations on both metrics Services.
	for _, name := range []string{"mcmirror-gateway-metrics", "mcmirror-controller-metrics"} {
		assert.Equal(t, "true", r[key("Service", "mcmirror", name)].GetAnnotations()["prometheus.io/scrape"], name)
	}
	// The hooks: apply after install and upgrade, revert before uninstall.
	assert.Equal(t, "post-install,post-upgrade", r[key("Job", "mcmirror", "mcmirror-dns-apply")].GetAnnotations()["helm.sh/hook"])
	assert.Equal(t, "pre-delete", r[key("Job", "mcmirror", "mcmirror-dns-revert")].GetAnnotations()["helm.sh/hook"])
	// The patch the apply Job mounts sets this image.
	patch := r.data(t, "mcmirror", "mcmirror-dns-patch", "coredns.yaml")
	assert.Contains(t, patch, "value: "+image+"\n")
	assert.Contains(t, patch, "{op: test, path: /spec/template/spec/serviceAccountName, value: coredns}")
}

// flagsOf returns the args that start with prefix.
func flagsOf(args []string, prefix string) []string {
	return slices.DeleteFunc(slices.Clone(args), func(a string) bool { return !strings.HasPrefix(a, prefix) })
}

// Flat mode alone: no gateway, and nothing that needs one.
func TestRenderFlatMode(t *testing.T) {
	r := render(t, "--set", "cluster=east", "--set", "gateway.enabled=false")
	assert.False(t, r.has("Deployment", "mcmirror", "mcmirror-gateway"), "%v", r.kinds())
	assert.False(t, r.has("Service", "mcmirror", "mcmirror-gateway"))
	assert.True(t, r.has("Deployment", "mcmirror", "mcmirror-controller"))
	assert.NotContains(t, r.stanza(t), "gateway_health", "flat mode has no gateway to ask")
}

// Forward mode leaves the cluster DNS alone (nothing in kube-system, no
// patch Job) and runs mcmirror-dns, unprivileged, serving clusterset.local
// behind a Service on port 53, at the fixed ClusterIP when one is given.
func TestRenderForwardMode(t *testing.T) {
	r := render(t, "--set", "cluster=east", "--set", "gateway.allowClusters={west}",
		"--set", "dns.mode=forward", "--set", "dns.forward.clusterIP=10.96.0.53")
	for k := range r {
		assert.NotContains(t, k, "kube-system", "%s rendered in forward mode", k)
	}
	assert.False(t, r.has("Job", "mcmirror", "mcmirror-dns-apply"))
	d := r.deployment(t, "mcmirror-dns")
	assert.Equal(t, "mcmirror-dns", d.Spec.Template.Spec.ServiceAccountName)
	assert.True(t, *d.Spec.Template.Spec.SecurityContext.RunAsNonRoot)
	corefile := r.data(t, "mcmirror", "mcmirror-dns", "Corefile")
	assert.Contains(t, corefile, "clusterset.local:1053 {")
	assert.Contains(t, corefile, "clusterset\n")
	svc, ok := r[key("Service", "mcmirror", "mcmirror-dns")]
	require.True(t, ok)
	ip, _, _ := unstructured.NestedString(svc.Object, "spec", "clusterIP")
	assert.Equal(t, "10.96.0.53", ip)
	assert.True(t, r.has("ClusterRoleBinding", "", "mcmirror-dns"))
	assert.True(t, r.has("RoleBinding", "mcmirror-links", "mcmirror-dns-link-secrets"))
}

// A cluster that is only linked to (it mirrors nothing itself): the link
// ServiceAccount and the gateway, no controller, no DNS change, and no
// link namespace.
func TestRenderLinkedToOnly(t *testing.T) {
	r := render(t, "--set", "cluster=west", "--set", "gateway.allowClusters={east}",
		"--set", "controller.enabled=false", "--set", "dns.enabled=false", "--set", "admissionPolicy.enabled=false")
	assert.True(t, r.has("ServiceAccount", "mcmirror", "mcmirror-link"))
	assert.True(t, r.has("Deployment", "mcmirror", "mcmirror-gateway"))
	for k := range r {
		assert.NotContains(t, k, "controller", "%s rendered without the controller", k)
		assert.NotContains(t, k, "kube-system", "%s rendered without the DNS", k)
		assert.NotContains(t, k, "mcmirror-links", "%s rendered without the controller and DNS", k)
	}
}

// The DNS part alone (no controller) makes the link namespace; flat mode
// with the DNS only and no patch Job.
func TestRenderDNSOnly(t *testing.T) {
	r := render(t, "--set", "cluster=east", "--set", "controller.enabled=false", "--set", "admissionPolicy.enabled=false",
		"--set", "gateway.enabled=false", "--set", "dns.patchDeployment=false", "--set", "link.enabled=false")
	assert.True(t, r.has("Namespace", "", "mcmirror-links"), "%v", r.kinds())
	assert.True(t, r.has("ConfigMap", "kube-system", "coredns-mcmirror"))
	assert.False(t, r.has("Job", "mcmirror", "mcmirror-dns-apply"))
}

// The DNS hook Job adds the stanza to the cluster's own Corefile: its
// arguments, the node's resolv.conf (dnsPolicy Default, for the loop
// check) and dns.upstream; its Role reads dns.coredns.configMap and writes only
// coredns-mcmirror. Patched by hand, the chart's Corefile forwards to
// dns.upstream.
func TestRenderDNSCorefile(t *testing.T) {
	r := render(t, "--set", "cluster=east", "--set", "gateway.allowClusters={west}",
		"--set", "dns.upstream={10.0.0.2,[fd00::2]:53}", "--set", "dns.coredns.configMap=dns-config", "--set", "dns.clusterDomain=example.internal")
	u := r[key("Job", "mcmirror", "mcmirror-dns-apply")]
	require.NotNil(t, u)
	var job batchv1.Job
	require.NoError(t, k8sruntime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &job))
	spec := job.Spec.Template.Spec
	assert.Equal(t, corev1.DNSDefault, spec.DNSPolicy)
	assert.Subset(t, spec.Containers[0].Args, []string{"--corefile-stanza=/etc/mcmirror/dns-patch/mcmirror.stanza",
		"--cluster-domain=example.internal", "--upstream=10.0.0.2,[fd00::2]:53", "--corefile-configmap=coredns-mcmirror"})
	assert.True(t, strings.HasPrefix(r.stanza(t), "mcmirror example.internal clusterset.local"))
	role := r[key("Role", "kube-system", "mcmirror-dns-patch")]
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	assert.Contains(t, fmt.Sprint(rules), "resourceNames:[dns-config coredns-mcmirror]")

	r = render(t, "--set", "cluster=east", "--set", "gateway.allowClusters={west}", "--set", "dns.patchDeployment=false",
		"--set", "dns.upstream={10.0.0.2}")
	assert.Contains(t, r.corefile(t), "\n    forward . 10.0.0.2 {\n")
	r = render(t, "--set", "cluster=east", "--set", "gateway.allowClusters={west}", "--set", "dns.patchDeployment=false")
	assert.Contains(t, r.corefile(t), "\n    forward . /etc/resolv.conf {\n")
	assert.True(t, check.ParseCorefile(r.corefile(t)).KubernetesSelectsCopies, "direct mode: no copies to leave out")

	// Import mode: the kubernetes plugin leaves the controller's copies of
	// the linked clusters' endpoints to mcmirror, as check reads it.
	r = render(t, "--set", "cluster=east", "--set", "gateway.allowClusters={west}", "--set", "dns.patchDeployment=false", "--set", "dns.source=import")
	d := check.ParseCorefile(r.corefile(t))
	assert.True(t, d.Import, "source import")
	assert.False(t, d.KubernetesSelectsCopies, "the kubernetes plugin selects the copies:\n%s", r.corefile(t))
}

// A digest wins over the tag, in every part and in the DNS patch; resources,
// replicas, Service type and annotations, extra args and labels come from
// values; the PrometheusRule renders when asked for.
func TestRenderValues(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	r := render(t, append(eastValues,
		"--set", "image.digest="+digest,
		"--set", "gateway.replicas=3", "--set", "controller.replicas=1",
		"--set", "gateway.resources.limits.memory=2Gi",
		"--set", "gateway.service.type=NodePort", "--set", "gateway.service.nodePort=31443",
		"--set-string", "gateway.service.annotations.service\\.beta\\.kubernetes\\.io/aws-load-balancer-internal=true",
		"--set", "gateway.extraArgs={--idle-timeout=2h}",
		"--set", "commonLabels.team=net",
		"--set", "metrics.prometheusRule.enabled=true",
		"--set", "namespace.create=false", "--set", "dns.patchDeployment=true")...)
	image := "ghcr.io/mcmirror/coredns-mc@" + digest
	g := r.deployment(t, "mcmirror-gateway")
	assert.Equal(t, image, g.Spec.Template.Spec.Containers[0].Image)
	assert.Equal(t, image, r.deployment(t, "mcmirror-controller").Spec.Template.Spec.Containers[0].Image)
	patch := r.data(t, "mcmirror", "mcmirror-dns-patch", "coredns.yaml")
	assert.Contains(t, patch, "value: "+image+"\n")
	assert.EqualValues(t, 3, *g.Spec.Replicas)
	assert.EqualValues(t, 1, *r.deployment(t, "mcmirror-controller").Spec.Replicas)
	assert.Equal(t, "2Gi", g.Spec.Template.Spec.Containers[0].Resources.Limits.Memory().String())
	assert.Contains(t, g.Spec.Template.Spec.Containers[0].Args, "--idle-timeout=2h")
	assert.Equal(t, "net", g.Labels["team"])
	assert.Equal(t, "net", g.Spec.Template.Labels["team"])
	svc := r[key("Service", "mcmirror", "mcmirror-gateway")]
	typ, _, _ := unstructured.NestedString(svc.Object, "spec", "type")
	assert.Equal(t, "NodePort", typ)
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	require.Len(t, ports, 1)
	assert.EqualValues(t, 31443, ports[0].(map[string]any)["nodePort"])
	assert.Equal(t, "true", svc.GetAnnotations()["service.beta.kubernetes.io/aws-load-balancer-internal"])
	rule, ok := r[key("PrometheusRule", "mcmirror", "mcmirror")]
	require.True(t, ok, "%v", r.kinds())
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	require.Len(t, groups, 1)
	var exprs []string
	for _, rl := range groups[0].(map[string]any)["rules"].([]any) {
		exprs = append(exprs, rl.(map[string]any)["expr"].(string))
	}
	assert.Contains(t, exprs, "coredns_mcmirror_gateway_certificate_expiry_timestamp_seconds - time() < 336 * 3600")
}

// Bad values fail at install with a message that names the value.
func TestBadValuesRefused(t *testing.T) {
	for _, c := range []struct {
		set  []string
		want string
	}{
		{nil, "cluster"},
		{[]string{"cluster=global"}, "cluster"},
		{[]string{"cluster=East"}, "cluster"},
		{[]string{"cluster=east"}, "gateway.allowClusters"},
		{[]string{"cluster=east", "gateway.allowClusters={east}"}, "this cluster's own name"},
		{[]string{"cluster=east", "gateway.allowClusters={west}", "gateway.peers.east=1.2.3.4:4143"}, "this cluster's own name"},
		{[]string{"cluster=east", "gateway.allowClusters={west}", "gateway.peers.west=1.2.3.4"}, "peers"},
		{[]string{"cluster=east", "gateway.allowClusters={west}", "egressPorts=32000-31000"}, "egressPorts"},
		{[]string{"cluster=east", "gateway.allowClusters={west}", "egressPorts=30000-70000"}, "egressPorts"},
		{[]string{"cluster=east", "gateway.allowClusters={west}", "image.digest=abc"}, "digest"},
		{[]string{"cluster=east", "gateway.allowClusters={west}", "gatewy.enabled=false"}, "gatewy"},
		{[]string{"cluster=east", "gateway.allowClusters={west}", "gateway.service.type=External"}, "type"},
		{[]string{"cluster=east", "gateway.allowClusters={west}", "controller.enabled=false"}, "admissionPolicy.enabled needs controller.enabled"},
		{[]string{"cluster=east", "gateway.allowClusters={west}", "dns.gatewayHealth=ftp://x"}, "gatewayHealth"},
		{[]string{"cluster=east", "gateway.allowClusters={west}", "dns.mode=proxy"}, "dns/mode"},
		{[]string{"cluster=east", "gateway.allowClusters={west}", "dns.forward.clusterIP=dns.example"}, "clusterIP"},
		{[]string{"cluster=east", "gateway.allowClusters={west}", "dns.upstream={resolver.example}"}, "upstream"},
	} {
		var args []string
		for _, s := range c.set {
			args = append(args, "--set", s)
		}
		out, err := template(t, args...)
		if assert.Error(t, err, "%v rendered:\n%s", c.set, out) {
			assert.Contains(t, out, c.want, "%v", c.set)
		}
	}
}

package deploy_test

// The plain manifests as deploy/README.md uses them, against real API
// servers with the real kubectl: `kubectl apply -f deploy/` applies (and
// does not read the patch), and the cluster DNS's JSON patch takes effect
// on a CoreDNS laid out as kubeadm lays it out and fails, changing nothing,
// on one laid out otherwise. Whether the pods then run is for a real node
// to tell; what the chart renders for other values is test/e2e/chart's.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcmirror/mcmirror/test/harness"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// contextsKubeconfig writes into dir a kubeconfig with one context per
// cluster, named after it (east, the current one, and west), as the
// README's --context flags expect, and returns its path.
func contextsKubeconfig(t *testing.T, dir string) string {
	t.Helper()
	merged := clientcmdapi.NewConfig()
	for _, c := range []*harness.Cluster{env.Cluster("east"), env.Cluster("west")} {
		cfg, err := clientcmd.LoadFromFile(c.Kubeconfig)
		require.NoError(t, err)
		ctxt := cfg.Contexts[cfg.CurrentContext]
		merged.Clusters[c.Name] = cfg.Clusters[ctxt.Cluster]
		merged.AuthInfos[c.Name+"-admin"] = cfg.AuthInfos[ctxt.AuthInfo]
		merged.Contexts[c.Name] = &clientcmdapi.Context{Cluster: c.Name, AuthInfo: c.Name + "-admin"}
	}
	merged.CurrentContext = "east"
	path := filepath.Join(dir, "admin.kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*merged, path))
	return path
}

// shell runs script with bash in dir, with kubeconfig as $KUBECONFIG and
// the test's kubectl (built with the control-plane binaries, test/tools)
// first on $PATH, and returns its output and error.
func shell(t *testing.T, dir, kubeconfig, script string) (string, error) {
	t.Helper()
	kubectl, err := harness.Binary("kubectl")
	require.NoError(t, err)
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig,
		"PATH="+filepath.Dir(kubectl)+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// helmTemplate is the chart charts/mcmirror rendered by the project's helm
// as release mcmirror in namespace mcmirror, with args (helm template's
// --set, -f and --show-only).
func helmTemplate(t *testing.T, args ...string) string {
	t.Helper()
	helm, err := harness.Binary("helm")
	require.NoError(t, err)
	cmd := exec.Command(helm, append([]string{"template", "mcmirror", harness.RepoPath("charts", "mcmirror"),
		"--namespace", gatewayNS}, args...)...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "helm template %q\n%s", args, stderr.String())
	return string(out)
}

// chartGatewayDeployment is the gateway's Deployment of the chart rendered
// with the values of args.
func chartGatewayDeployment(t *testing.T, args ...string) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{}
	out := helmTemplate(t, append([]string{"--show-only", "templates/gateway.yaml"}, args...)...)
	object(t, out, "Deployment", gatewayNS, gatewayName, d)
	return d
}

// `kubectl apply -f deploy/`, as the README says, applies every object
// file of deploy/ as it is and does not read the patch in deploy/patches/
// (which is not an object, and would stop the apply).
func TestApplyDeployDirectory(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	east := env.Cluster("east")
	kubeconfig := contextsKubeconfig(t, t.TempDir())
	out, err := shell(t, harness.RepoPath(), kubeconfig, "kubectl --context east apply -f deploy/")
	require.NoError(t, err, "kubectl apply -f deploy/\n%s", out)
	for _, want := range []string{
		"deployment.apps/mcmirror-controller",
		"deployment.apps/mcmirror-gateway",
		"configmap/coredns-mcmirror",
		"service/mcmirror-gateway-metrics",
		"poddisruptionbudget.policy/coredns",
		"serviceaccount/mcmirror-link",
		// mcs-crds.yaml, the chart's crds/.
		"customresourcedefinition.apiextensions.k8s.io/serviceexports.multicluster.x-k8s.io",
		"customresourcedefinition.apiextensions.k8s.io/serviceimports.multicluster.x-k8s.io",
	} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, strings.ToLower(out), "error")
	_, err = east.Client.AppsV1().Deployments("mcmirror").Get(ctx, "mcmirror-gateway", metav1.GetOptions{})
	require.NoError(t, err)
	// The patch is where `apply -f deploy/` (without -R) does not look.
	_, err = os.Stat(filepath.Join(harness.RepoPath("deploy"), "patches", "coredns.yaml"))
	require.NoError(t, err)
	entries, err := os.ReadDir(harness.RepoPath("deploy"))
	require.NoError(t, err)
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".yaml") {
			assert.NotContains(t, e.Name(), "patch", "a patch among the object files")
		}
	}
}

// patchCommands are the README's command that patches the cluster DNS and
// its block that tells which of the patch's tests fails, as written there.
func patchCommands(t *testing.T) (patch, diagnose string) {
	t.Helper()
	var patches, diagnoses []string
	for _, b := range shellBlocks(t) {
		if strings.Contains(b, "patch --local") {
			diagnoses = append(diagnoses, b)
		}
		for _, line := range strings.Split(b, "\n") {
			if strings.HasPrefix(line, "kubectl -n kube-system patch deployment coredns") {
				patches = append(patches, line)
			}
		}
	}
	require.Equal(t, []string{"kubectl -n kube-system patch deployment coredns --type=json --patch-file deploy/patches/coredns.yaml"}, patches,
		"deploy/README.md patches the cluster DNS with one command")
	require.Len(t, diagnoses, 1, "deploy/README.md tells which test fails")
	return patches[0], diagnoses[0]
}

// deploy/patches/coredns.yaml, applied with the README's command (the real
// kubectl, a JSON patch) to a CoreDNS Deployment as kubeadm makes it,
// swaps the image and the Corefile, sets the resources, the
// securityContexts and a rollout that keeps a serving pod, and keeps the
// rest; applied again, it changes nothing. Applied to a Deployment laid out
// otherwise (the config volume under another name, or another container
// first), it fails, and the Deployment is unchanged: no volume added, no
// old Corefile left in use without a word.
func TestCoreDNSPatch(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	applyManifests(t)
	east := env.Cluster("east")
	kubeconfig := contextsKubeconfig(t, t.TempDir())
	command, diagnose := patchCommands(t)

	// As kubeadm makes it: the patch takes effect.
	before := recreateCoreDNS(t, east, "kube-system", kubeadmDeployment("kube-system"))
	out, err := shell(t, harness.RepoPath(), kubeconfig, command)
	require.NoError(t, err, "%s\n%s", command, out)
	d := getCoreDNS(t, east, "kube-system")
	spec := d.Spec.Template.Spec
	require.Len(t, spec.Containers, 1)
	ctr := spec.Containers[0]
	assert.Equal(t, "ghcr.io/mcmirror/coredns-mc:latest", ctr.Image)
	require.Len(t, spec.Volumes, 1, "no volume added")
	require.NotNil(t, spec.Volumes[0].ConfigMap)
	assert.Equal(t, "coredns-mcmirror", spec.Volumes[0].ConfigMap.Name)
	assert.Equal(t, []corev1.KeyToPath{{Key: "Corefile", Path: "Corefile"}}, spec.Volumes[0].ConfigMap.Items)
	assert.Equal(t, ctr.VolumeMounts[0].Name, spec.Volumes[0].Name, "the mounted volume")
	got, err := east.Client.CoreV1().ConfigMaps("kube-system").Get(ctx, "coredns-mcmirror", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, corefile(t), got.Data["Corefile"], "deploy/coredns.yaml's Corefile")
	assert.Equal(t, resource.MustParse("512Mi"), ctr.Resources.Limits[corev1.ResourceMemory])
	assert.Equal(t, resource.MustParse("128Mi"), ctr.Resources.Requests[corev1.ResourceMemory])
	assert.NotContains(t, ctr.Resources.Limits, corev1.ResourceCPU, "no CPU limit")
	assertHardened(t, spec)
	assert.True(t, *ctr.SecurityContext.RunAsNonRoot)
	// The rollout: a new pod must be available (Ready for 35 s) before
	// an old one stops; every new pod starts at once.
	assert.Equal(t, appsv1.RollingUpdateDeploymentStrategyType, d.Spec.Strategy.Type)
	require.NotNil(t, d.Spec.Strategy.RollingUpdate)
	assert.Equal(t, intstr.FromInt32(0), *d.Spec.Strategy.RollingUpdate.MaxUnavailable)
	assert.Equal(t, intstr.FromString("100%"), *d.Spec.Strategy.RollingUpdate.MaxSurge)
	assert.Equal(t, int32(35), d.Spec.MinReadySeconds)
	// Kept: what coredns-mc takes from CoreDNS and the cluster from
	// kubeadm.
	kept := before.Spec.Template.Spec
	assert.Equal(t, kept.ServiceAccountName, spec.ServiceAccountName)
	assert.Equal(t, []string{"-conf", "/etc/coredns/Corefile"}, ctr.Args, "coredns-mc takes CoreDNS's flags")
	assert.Equal(t, kept.Containers[0].Ports, ctr.Ports)
	assert.Equal(t, kept.Containers[0].LivenessProbe, ctr.LivenessProbe)
	// The readiness probe is kubeadm's, probed every second and unready
	// after two failures: a terminating pod stops serving well inside its
	// lameduck.
	readiness := kept.Containers[0].ReadinessProbe.DeepCopy()
	readiness.PeriodSeconds, readiness.FailureThreshold = 1, 2
	assert.Equal(t, readiness, ctr.ReadinessProbe)
	assert.Equal(t, kept.Containers[0].VolumeMounts, ctr.VolumeMounts)
	assert.Equal(t, kept.PriorityClassName, spec.PriorityClassName)
	assert.Equal(t, kept.Tolerations, spec.Tolerations)
	assert.Equal(t, kept.Affinity, spec.Affinity)
	assert.Equal(t, kept.NodeSelector, spec.NodeSelector)
	assert.Equal(t, kept.DNSPolicy, spec.DNSPolicy)
	assert.Equal(t, *before.Spec.Replicas, *d.Spec.Replicas)

	// Again: every test still holds, and nothing changes; the README's
	// diagnosis finds nothing to say.
	out, err = shell(t, harness.RepoPath(), kubeconfig, diagnose)
	require.NoError(t, err, "%s\n%s", diagnose, out)
	assert.Empty(t, out)
	out, err = shell(t, harness.RepoPath(), kubeconfig, command)
	require.NoError(t, err, "the patch a second time\n%s", out)
	assert.Equal(t, d.Generation, getCoreDNS(t, east, "kube-system").Generation, "a second patch changes nothing")

	// Laid out otherwise, kubeadm's Deployment with edits (old, new
	// pairs): the patch fails and changes nothing.
	for _, c := range []struct {
		name, ns string
		edits    []string
		failed   string
	}{
		{"config volume named otherwise", "deploy-dns-volume", []string{
			"- name: config-volume\n        configMap:", "- name: coredns-config\n        configMap:",
			"{name: config-volume, mountPath", "{name: coredns-config, mountPath",
		}, "/spec/template/spec/containers/0/volumeMounts/0/name"},
		{"another container first", "deploy-dns-sidecar", []string{
			"      containers:\n", "      containers:\n      - {name: sidecar, image: registry.k8s.io/pause:3.10}\n",
		}, "/spec/template/spec/containers/0/name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := harness.ReplaceOnce(kubeadmDeployment(c.ns), c.edits...)
			require.NoError(t, err)
			env.TempNamespace(t, c.ns, east)
			before := recreateCoreDNS(t, east, c.ns, m)
			cmd := strings.Replace(command, "-n kube-system ", "-n "+c.ns+" ", 1)
			out, err := shell(t, harness.RepoPath(), kubeconfig, cmd)
			require.Error(t, err, "%s must fail\n%s", cmd, out)
			assert.Contains(t, out, "the server rejected our request due to an error in our request", "as the README says")
			// The README's diagnosis names the test that failed.
			diag := strings.Replace(diagnose, "-n kube-system ", "-n "+c.ns+" ", 1)
			out, err = shell(t, harness.RepoPath(), kubeconfig, diag)
			require.Error(t, err, "%s must fail\n%s", diag, out)
			assert.Contains(t, out, "testing value "+c.failed+" failed")
			after := getCoreDNS(t, east, c.ns)
			assert.Equal(t, before.ResourceVersion, after.ResourceVersion, "the Deployment is unchanged")
			assert.Equal(t, before.Spec, after.Spec, "the Deployment is unchanged")
		})
	}
}

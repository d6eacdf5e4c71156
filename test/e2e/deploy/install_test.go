package deploy_test

// The installation as deploy/README.md writes it, against real API servers
// with the real kubectl: `kubectl apply -f deploy/` applies (and does not
// read the patch), deploy/render.sh writes a cluster's copy that differs
// from deploy/ in that cluster's values only and that the API server
// accepts, and the cluster DNS's JSON patch takes effect on a CoreDNS laid
// out as kubeadm lays it out and fails, changing nothing, on one laid out
// otherwise. Whether the pods then run is for a real node to tell.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/mcmirror/mcmirror/test/harness"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// deployDir is the path of deploy/.
func deployDir(t *testing.T) string {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(self), "..", "..", "..", "deploy")
}

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

// shell runs script with bash in the root of the repository, with
// kubeconfig as $KUBECONFIG and the test's kubectl first on $PATH, and
// returns its output and error.
func shell(t *testing.T, kubeconfig, script string) (string, error) {
	t.Helper()
	kubectl, err := harness.Binary("kubectl")
	require.NoError(t, err)
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = filepath.Dir(deployDir(t))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig,
		"PATH="+filepath.Dir(kubectl)+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// render runs deploy/render.sh with args and an --out of its own, and
// returns that directory.
func render(t *testing.T, args ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "copy")
	cmd := exec.Command(filepath.Join(deployDir(t), "render.sh"), append([]string{"--out", out}, args...)...)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "render.sh %q\n%s", args, b)
	return out
}

// renderedManifest is the text of name in a copy render wrote.
func renderedManifest(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	require.NoError(t, err)
	return string(b)
}

// renderedGatewayDeployment is the gateway's Deployment of a copy render
// wrote.
func renderedGatewayDeployment(t *testing.T, dir string) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{}
	object(t, renderedManifest(t, dir, "gateway.yaml"), "Deployment", gatewayNS, gatewayName, d)
	return d
}

// flagValues returns every value of --name=value in args.
func flagValues(args []string, name string) []string {
	var out []string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			out = append(out, v)
		}
	}
	return out
}

// `kubectl apply -f deploy/`, as the README says, applies every object
// file of deploy/ as it is and does not read the patch in deploy/patches/
// (which is not an object, and would stop the apply).
func TestApplyDeployDirectory(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	east := env.Cluster("east")
	out, err := shell(t, contextsKubeconfig(t, t.TempDir()), "kubectl --context east apply -f deploy/")
	require.NoError(t, err, "kubectl apply -f deploy/\n%s", out)
	for _, want := range []string{
		"deployment.apps/mcmirror-controller",
		"deployment.apps/mcmirror-gateway",
		"configmap/coredns-mcmirror",
		"service/mcmirror-gateway-metrics",
		"poddisruptionbudget.policy/coredns",
		"serviceaccount/mcmirror-link",
	} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, strings.ToLower(out), "error")
	_, err = east.Client.AppsV1().Deployments("mcmirror").Get(ctx, "mcmirror-gateway", metav1.GetOptions{})
	require.NoError(t, err)
	// The patch is where `apply -f deploy/` (without -R) does not look.
	_, err = os.Stat(filepath.Join(deployDir(t), "patches", "coredns.yaml"))
	require.NoError(t, err)
	entries, err := os.ReadDir(deployDir(t))
	require.NoError(t, err)
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".yaml") {
			assert.NotContains(t, e.Name(), "patch", "a patch among the object files")
		}
	}
}

// deploy/render.sh writes a cluster's copy of deploy/: with the files'
// own values it writes deploy/ back byte for byte (so it touches nothing
// but the value lines); with another cluster's, every value line says that
// cluster's, a --peer and an --allow-cluster per cluster, and the API
// server accepts the result. Bad values stop it before it writes.
func TestRenderScript(t *testing.T) {
	env.LogOnFailure(t)
	applyManifests(t)
	files := []string{"controller.yaml", "coredns.yaml", "gateway.yaml", "remote-link.yaml", "patches/coredns.yaml"}
	originals := map[string]string{}
	for _, f := range files {
		originals[f] = manifest(t, f)
	}

	same := render(t, "--cluster", "east", "--peer", "west=203.0.113.10:4143", "--allow-cluster", "west")
	for _, f := range files {
		assert.Equal(t, manifest(t, f), renderedManifest(t, same, f), "%s: the files' own values give the files back", f)
	}

	const image = "registry.example.com/mcmirror/coredns-mc@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	const health = "http://10.96.7.8:9155/peers"
	west := render(t, "--cluster", "west", "--image", image, "--egress-ports", "31000-31999",
		"--peer", "east=198.51.100.7:4143", "--peer=paris=[2001:db8::7]:4143",
		"--allow-cluster", "east", "--allow-cluster=paris", "--gateway-health", health)
	ctrl := &appsv1.Deployment{}
	object(t, renderedManifest(t, west, "controller.yaml"), "Deployment", "mcmirror", "mcmirror-controller", ctrl)
	cargs := ctrl.Spec.Template.Spec.Containers[0].Args
	assert.Equal(t, image, ctrl.Spec.Template.Spec.Containers[0].Image)
	assert.Equal(t, []string{"west"}, flagValues(cargs, "cluster"))
	assert.Equal(t, []string{"31000-31999"}, flagValues(cargs, "egress-ports"))
	gw := renderedGatewayDeployment(t, west)
	gargs := gw.Spec.Template.Spec.Containers[0].Args
	assert.Equal(t, image, gw.Spec.Template.Spec.Containers[0].Image)
	assert.Equal(t, []string{"west"}, flagValues(gargs, "cluster"))
	assert.Equal(t, []string{"east=198.51.100.7:4143", "paris=[2001:db8::7]:4143"}, flagValues(gargs, "peer"))
	assert.Equal(t, []string{"east", "paris"}, flagValues(gargs, "allow-cluster"))
	cm := &corev1.ConfigMap{}
	object(t, renderedManifest(t, west, "coredns.yaml"), "ConfigMap", "kube-system", "coredns-mcmirror", cm)
	assert.Contains(t, cm.Data["Corefile"], "\n        cluster west\n")
	assert.Contains(t, cm.Data["Corefile"], "\n        gateway_health "+health+"\n")
	assert.NotContains(t, cm.Data["Corefile"], "cluster east")
	assert.Contains(t, renderedManifest(t, west, "patches/coredns.yaml"), "\n  value: "+image+"\n")
	for _, f := range files {
		assert.NotContains(t, renderedManifest(t, west, f), "coredns-mc:latest", f)
	}
	// The copy is what the API server takes (east has the namespaces).
	out, err := shell(t, contextsKubeconfig(t, t.TempDir()), "kubectl --context east apply --dry-run=server -f "+west+"/")
	require.NoError(t, err, "%s", out)

	// Without a peer: the gateway has none.
	nopeer := renderedGatewayDeployment(t, render(t, "--cluster", "west", "--allow-cluster", "east"))
	assert.Empty(t, flagValues(nopeer.Spec.Template.Spec.Containers[0].Args, "peer"))

	for _, bad := range [][]string{
		{"--allow-cluster", "east"},                        // no --cluster
		{"--cluster", "west"},                              // no --allow-cluster
		{"--cluster", "global", "--allow-cluster", "east"}, // a reserved name
		{"--cluster", "West", "--allow-cluster", "east"},   // not a DNS label
		{"--cluster", "west", "--allow-cluster", "west"},   // itself
		{"--cluster", "west", "--allow-cluster", "east", "--peer", "east"},
		{"--cluster", "west", "--allow-cluster", "east", "--peer", "west=192.0.2.1:4143"},
		{"--cluster", "west", "--allow-cluster", "east", "--peer", "east=192.0.2.1:4143", "--peer", "east=192.0.2.2:4143"},
		{"--cluster", "west", "--allow-cluster", "east", "--image", "a b"},
		{"--cluster", "west", "--allow-cluster", "east", "--egress-ports", "32767-30000"},
		{"--cluster", "west", "--allow-cluster", "east", "--gateway-health", "10.96.7.8:9155"},
		{"--cluster", "west", "--allow-cluster", "east", "--bogus"},
	} {
		out := filepath.Join(t.TempDir(), "copy")
		cmd := exec.Command(filepath.Join(deployDir(t), "render.sh"), append([]string{"--out", out}, bad...)...)
		b, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if assert.ErrorAs(t, err, &exit, "render.sh %q: %s", bad, b) {
			assert.Equal(t, 2, exit.ExitCode(), "render.sh %q", bad)
		}
		assert.Contains(t, string(b), "render.sh: ", "render.sh %q says why", bad)
		_, err = os.Stat(out)
		assert.True(t, os.IsNotExist(err), "render.sh %q wrote nothing", bad)
	}
	// Never over deploy/ itself.
	b, err := exec.Command(filepath.Join(deployDir(t), "render.sh"), "--out", deployDir(t),
		"--cluster", "west", "--allow-cluster", "east").CombinedOutput()
	assert.Error(t, err, "%s", b)
	for _, f := range files {
		assert.Equal(t, originals[f], manifest(t, f), "%s untouched", f)
	}
}

// kubeadmCoreDNS is kube-system/coredns as kubeadm (v1.32) makes it, in
// namespace ns.
func kubeadmCoreDNS(ns string) string {
	return harness.KubeadmCoreDNSDeployment(ns, harness.KubeadmCoreDNSImage)
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
	deployments := east.Client.AppsV1()

	// fresh makes coredns in ns from manifest, replacing any of an
	// earlier run.
	fresh := func(ns, manifest string) *appsv1.Deployment {
		t.Helper()
		if ns != "kube-system" {
			namespace(t, ns, east)
		}
		err := deployments.Deployments(ns).Delete(ctx, "coredns", metav1.DeleteOptions{})
		if !apierrors.IsNotFound(err) {
			require.NoError(t, err)
		}
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			_, err := deployments.Deployments(ns).Get(ctx, "coredns", metav1.GetOptions{})
			assert.True(c, apierrors.IsNotFound(err), "coredns in %s deleted: %v", ns, err)
		}, wait, tick)
		require.NoError(t, east.Apply(ctx, manifest))
		d, err := deployments.Deployments(ns).Get(ctx, "coredns", metav1.GetOptions{})
		require.NoError(t, err)
		return d
	}

	// As kubeadm makes it: the patch takes effect.
	before := fresh("kube-system", kubeadmCoreDNS("kube-system"))
	out, err := shell(t, kubeconfig, command)
	require.NoError(t, err, "%s\n%s", command, out)
	d, err := deployments.Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	require.NoError(t, err)
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
	require.NotNil(t, spec.SecurityContext)
	assert.True(t, *spec.SecurityContext.RunAsNonRoot)
	require.NotNil(t, ctr.SecurityContext)
	assert.True(t, *ctr.SecurityContext.RunAsNonRoot)
	assert.True(t, *ctr.SecurityContext.ReadOnlyRootFilesystem)
	assert.False(t, *ctr.SecurityContext.AllowPrivilegeEscalation)
	// The rollout: a new pod must be available (Ready for 35 s) before
	// an old one stops.
	assert.Equal(t, appsv1.RollingUpdateDeploymentStrategyType, d.Spec.Strategy.Type)
	require.NotNil(t, d.Spec.Strategy.RollingUpdate)
	assert.Equal(t, intstr.FromInt32(0), *d.Spec.Strategy.RollingUpdate.MaxUnavailable)
	assert.Equal(t, intstr.FromInt32(1), *d.Spec.Strategy.RollingUpdate.MaxSurge)
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
	out, err = shell(t, kubeconfig, diagnose)
	require.NoError(t, err, "%s\n%s", diagnose, out)
	assert.Empty(t, out)
	out, err = shell(t, kubeconfig, command)
	require.NoError(t, err, "the patch a second time\n%s", out)
	again, err := deployments.Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, d.Generation, again.Generation, "a second patch changes nothing")

	// Laid out otherwise: the patch fails and changes nothing.
	for _, c := range []struct{ name, ns, old, new, failed string }{
		{"config volume named otherwise", "deploy-dns-volume",
			"- name: config-volume\n        configMap:", "- name: coredns-config\n        configMap:",
			"/spec/template/spec/containers/0/volumeMounts/0/name"},
		{"another container first", "deploy-dns-sidecar",
			"      containers:\n", "      containers:\n      - {name: sidecar, image: registry.k8s.io/pause:3.10}\n",
			"/spec/template/spec/containers/0/name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := kubeadmCoreDNS(c.ns)
			require.Equal(t, 1, strings.Count(m, c.old))
			m = strings.Replace(m, c.old, c.new, 1)
			if c.name == "config volume named otherwise" {
				m = strings.Replace(m, "{name: config-volume, mountPath", "{name: coredns-config, mountPath", 1)
			}
			before := fresh(c.ns, m)
			cmd := strings.Replace(command, "-n kube-system ", "-n "+c.ns+" ", 1)
			out, err := shell(t, kubeconfig, cmd)
			require.Error(t, err, "%s must fail\n%s", cmd, out)
			assert.Contains(t, out, "the server rejected our request due to an error in our request", "as the README says")
			// The README's diagnosis names the test that failed.
			diag := strings.Replace(diagnose, "-n kube-system ", "-n "+c.ns+" ", 1)
			out, err = shell(t, kubeconfig, diag)
			require.Error(t, err, "%s must fail\n%s", diag, out)
			assert.Contains(t, out, "testing value "+c.failed+" failed")
			after, err := deployments.Deployments(c.ns).Get(ctx, "coredns", metav1.GetOptions{})
			require.NoError(t, err)
			assert.Equal(t, before.ResourceVersion, after.ResourceVersion, "the Deployment is unchanged")
			assert.Equal(t, before.Spec, after.Spec, "the Deployment is unchanged")
		})
	}
}

package deploy_test

// The plain manifests as deploy/README.md uses them, against real API
// servers with the real kubectl: `kubectl apply -f deploy/` applies (and
// does not read the patch), and the cluster DNS's JSON patch takes effect
// on a CoreDNS laid out as kubeadm lays it out and fails, changing nothing,
// on one laid out otherwise; its recipes for the link Secret and the
// gateway's certificates, run as written, make what the components take.
// Whether the pods then run is for a real node to tell; what the chart
// renders for other values is test/e2e/chart's.

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mcmirror/mcmirror/gateway/gatewaytest"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
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

// shellBlocks returns the ```sh blocks of deploy/README.md, unindented.
func shellBlocks(t *testing.T) []string {
	t.Helper()
	var blocks []string
	var cur []string
	in, indent := false, ""
	for _, line := range strings.Split(harness.RepoFile(t, "deploy", "README.md"), "\n") {
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case !in && trimmed == "```sh":
			in, indent, cur = true, line[:len(line)-len(trimmed)], nil
		case in && trimmed == "```":
			in = false
			blocks = append(blocks, strings.Join(cur, "\n")+"\n")
		case in:
			cur = append(cur, strings.TrimPrefix(line, indent))
		}
	}
	return blocks
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
	out := helmTemplate(t, append([]string{"--show-only", "templates/gateway.yaml"}, args...)...)
	return object[appsv1.Deployment](t, out, "Deployment", gatewayNS, gatewayName)
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

// The recipe of deploy/README.md, run as written with kubectl: a
// long-lived token of west's mcmirror-link, a kubeconfig made of it, and
// the link Secret in east. The kubeconfig reads Services of west and
// nothing else, and the Secret is the one the components look for.
func TestREADMELinkRecipe(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	applyManifests(t)
	east, west := env.Cluster("east"), env.Cluster("west")

	// One kubeconfig with a context per cluster, named after it, as the
	// README's --context flags expect.
	dir := t.TempDir()
	kubeconfig := contextsKubeconfig(t, dir)

	var steps []string
	for _, b := range shellBlocks(t) {
		for _, marker := range []string{
			"name: mcmirror-link-token",                      // the token
			"set-cluster west",                               // the kubeconfig
			"create secret generic cluster-credentials-west", // the link Secret
		} {
			if strings.Contains(b, marker) {
				steps = append(steps, b)
			}
		}
	}
	require.Len(t, steps, 3, "the README's recipe")

	// Earlier tests wrote that Secret their own way.
	require.NoError(t, east.Delete(ctx, "apiVersion: v1\nkind: Secret\n"+
		"metadata: {name: cluster-credentials-west, namespace: mcmirror-links}\n"))
	run := func(script string) {
		t.Helper()
		out, err := shell(t, dir, kubeconfig, script)
		require.NoError(t, err, "%s\n%s", script, out)
	}
	// The token controller of west fills the token Secret in.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		run(steps[0])
		s, err := west.Client.CoreV1().Secrets("mcmirror").Get(ctx, "mcmirror-link-token", metav1.GetOptions{})
		require.NoError(c, err)
		assert.NotEmpty(c, s.Data["token"])
	}, wait, tick)
	run(steps[0] + steps[1] + steps[2])

	s, err := east.Client.CoreV1().Secrets("mcmirror-links").Get(ctx, "cluster-credentials-west", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, corev1.SecretType(labels.LinkSecretType), s.Type)
	assert.Equal(t, "west", s.Labels[labels.LinkClusterName])
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data[labels.LinkSecretKey])
	require.NoError(t, err)
	assert.Equal(t, west.Server, cfg.Host, "the kubeconfig names west")
	client, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	_, err = client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	assert.NoError(t, err, "the link reads west's Services")
	_, err = client.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	assert.NoError(t, err, "and EndpointSlices")
	_, err = client.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
	assert.True(t, apierrors.IsForbidden(err), "and not Secrets: %v", err)
}

// The certificates of deploy/README.md (step 3 of "Install, step by
// step"), run as written with the real coredns-mc and kubectl: a root,
// then for east and west an intermediate and the gateway's certificate,
// as the Secret the Deployment mounts. Each Secret has the file names its
// flags give, and its certificate is one the gateway takes for --cluster:
// it loads, names its cluster (east's Deployment, as deploy/ has it, and
// west's, as the chart renders it), and completes a mutual handshake with
// itself. The root's key stays in the working directory: no cluster
// receives it.
func TestREADMEGatewayCertRecipe(t *testing.T) {
	env.LogOnFailure(t)
	mc, err := harness.CorednsMC()
	require.NoError(t, err)
	ctx := context.Background()
	east, west := env.Cluster("east"), env.Cluster("west")
	require.NoError(t, east.Apply(ctx, harness.RepoFile(t, "deploy", "gateway.yaml")))
	// The namespace of the Secret, in west (the Deployment is not
	// applied there: west runs pods).
	require.NoError(t, west.Apply(ctx, "apiVersion: v1\nkind: Namespace\nmetadata: {name: "+gatewayNS+"}\n"))

	steps := slices.DeleteFunc(shellBlocks(t), func(b string) bool { return !strings.Contains(b, "coredns-mc certs") })
	require.Len(t, steps, 1, "the README's certificates: one block")
	require.Contains(t, steps[0], "certs root")

	// A kubeconfig whose contexts "east" and "west" are those clusters,
	// as --context expects; bin/coredns-mc, as `make build` leaves it.
	dir := t.TempDir()
	kubeconfig := contextsKubeconfig(t, dir)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "bin"), 0o755))
	require.NoError(t, os.Symlink(mc, filepath.Join(dir, "bin", "coredns-mc")))

	out, err := shell(t, dir, kubeconfig, "make() { [ \"$*\" = build ]; }\n"+steps[0])
	require.NoError(t, err, "%s\n%s", steps[0], out)

	// No Secret in either cluster holds the root's key.
	for _, c := range []*harness.Cluster{east, west} {
		secrets, err := c.Client.CoreV1().Secrets(gatewayNS).List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		root, err := os.ReadFile(filepath.Join(dir, "fleet-root", "root.key"))
		require.NoError(t, err)
		for _, sec := range secrets.Items {
			for k, v := range sec.Data {
				assert.NotEqual(t, string(root), string(v), "%s: Secret %s key %s is the root's key", c.Name, sec.Name, k)
			}
		}
	}

	for _, c := range []struct {
		cluster *harness.Cluster
		d       *appsv1.Deployment
	}{
		{east, gatewayDeployment(t)},
		{west, chartGatewayDeployment(t, "--set", "cluster=west", "--set", "gateway.allowClusters={east}",
			"--set", "gateway.peers.east=192.0.2.1:4143")},
	} {
		// The Secret is the Deployment's, with the files its flags name.
		ctr := c.d.Spec.Template.Spec.Containers[0]
		secret, err := c.cluster.Client.CoreV1().Secrets(c.d.Namespace).Get(ctx, c.d.Spec.Template.Spec.Volumes[0].Secret.SecretName, metav1.GetOptions{})
		require.NoError(t, err, "%s: the Secret the Deployment mounts", c.cluster.Name)
		mounted := t.TempDir()
		var files gatewaytest.Files
		for flag, dst := range map[string]*string{"tls-cert": &files.Cert, "tls-key": &files.Key, "tls-ca": &files.CA} {
			key := path.Base(flagValue(t, ctr.Args, flag))
			require.Contains(t, secret.Data, key, "%s: --%s", c.cluster.Name, flag)
			*dst = filepath.Join(mounted, key)
			require.NoError(t, os.WriteFile(*dst, secret.Data[key], 0o600))
		}
		certs := loadCerts(t, files)
		assert.Equal(t, c.cluster.Name, flagValue(t, ctr.Args, "cluster"))
		assert.Equal(t, flagValue(t, ctr.Args, "cluster"), certs.Cluster(), "the certificate names --cluster")

		// Server and client at once, as ingress and egress use it.
		a, b := net.Pipe()
		errc := make(chan error, 1)
		go func() { errc <- tls.Server(a, certs.ServerConfig()).Handshake() }()
		assert.NoError(t, tls.Client(b, certs.ClientConfig(c.cluster.Name, nil)).Handshake(), "%s: client side", c.cluster.Name)
		assert.NoError(t, <-errc, "%s: server side", c.cluster.Name)
		a.Close()
		b.Close()
	}
}

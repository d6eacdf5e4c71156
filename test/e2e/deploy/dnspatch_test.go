package deploy_test

// The Helm chart's hooks: `coredns-mc dns apply` (post-install,
// post-upgrade) and `coredns-mc dns revert` (pre-delete), run as the real
// processes a hook Job runs, with the token of a ServiceAccount bound to
// hookRules only, against real API servers. In east (no controllers, so the
// processes run with --wait=false): apply makes of kubeadm's CoreDNS
// Deployment what `kubectl patch --type=json --patch-file
// deploy/patches/coredns.yaml` makes of it, with the original recorded;
// again, it changes nothing; an upgrade's patch goes onto the original;
// revert gives the Deployment back exactly as it was created. A CoreDNS laid
// out otherwise, or patched by hand already, is refused and left as it was,
// and RBAC refusals name the verb. In west, the real deployment controller
// rolls pods that KWOK runs: apply's wait ends when every new pod is Ready,
// revert's when the rollout completes; both fail when the controller gives
// up, and at --timeout. Pods whose
// containers run and probes answer are for a real-node test.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/dnspatch"
	"github.com/mcmirror/mcmirror/test/harness"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// serviceAccount is the manifest of ServiceAccount ns/name.
func serviceAccount(ns, name string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: %s, namespace: %s}\n", name, ns)
}

// accountWithRole is ServiceAccount ns/name bound to a Role of the same
// name whose rules are rules (a YAML sequence).
func accountWithRole(ns, name, rules string) string {
	return serviceAccount(ns, name) + fmt.Sprintf(`---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: %[2]s, namespace: %[1]s}
rules: %[3]s
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: %[2]s, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: %[2]s}
subjects: [{kind: ServiceAccount, name: %[2]s, namespace: %[1]s}]
`, ns, name, rules)
}

// hookRules are what the hook Jobs run as: the rules of the Role the chart
// gives their ServiceAccount, get and patch of the Deployment coredns and
// nothing else.
const hookRules = "[{apiGroups: [apps], resources: [deployments], resourceNames: [coredns], " +
	"verbs: [get, patch]}]"

const hookAccount = "mcmirror-dns-hook"

// hookKubeconfig gives namespace ns of cluster c the hook's ServiceAccount
// and Role, checks that it may do exactly what the Role says beyond what a
// fresh ServiceAccount may (waiting until the binding counts), and returns
// a kubeconfig of it.
func hookKubeconfig(t *testing.T, c *harness.Cluster, ns string) string {
	t.Helper()
	require.NoError(t, c.Apply(context.Background(), accountWithRole(ns, hookAccount, hookRules)))
	client := saClient(t, c, ns, hookAccount)
	baseline := freshAccount(t, c, ns, "mcmirror-dns-hook-baseline")
	waitExtraRules(t, client, baseline, ns,
		[]string{"get apps/deployments/coredns", "patch apps/deployments/coredns"})
	waitExtraRules(t, client, baseline, "default", nil)
	return accountKubeconfig(t, c, ns, hookAccount)
}

// accountKubeconfig writes a kubeconfig of ServiceAccount ns/name of
// cluster c and returns its path.
func accountKubeconfig(t *testing.T, c *harness.Cluster, ns, name string) string {
	t.Helper()
	path, err := c.ServiceAccountKubeconfigFile(context.Background(), t.TempDir(), ns, name)
	require.NoError(t, err)
	return path
}

// recreateCoreDNS makes coredns in namespace ns of cluster c from
// manifest, in place of any of an earlier test or run, and returns it as
// created.
func recreateCoreDNS(t *testing.T, c *harness.Cluster, ns, manifest string) *appsv1.Deployment {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, c.Delete(ctx, "apiVersion: apps/v1\nkind: Deployment\n"+
		"metadata: {name: coredns, namespace: "+ns+"}\n"))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, err := c.Client.AppsV1().Deployments(ns).Get(ctx, "coredns", metav1.GetOptions{})
		assert.True(ct, apierrors.IsNotFound(err), "coredns in %s/%s deleted: %v", c.Name, ns, err)
		if !c.Workloads {
			return
		}
		// And, where a garbage collector runs, its ReplicaSets and pods:
		// the next one's would take their names.
		sel := metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"}
		rs, err := c.Client.AppsV1().ReplicaSets(ns).List(ctx, sel)
		require.NoError(ct, err)
		assert.Empty(ct, rs.Items, "ReplicaSets of coredns in %s/%s", c.Name, ns)
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, sel)
		require.NoError(ct, err)
		assert.Empty(ct, pods.Items, "pods of coredns in %s/%s", c.Name, ns)
	}, wait, tick)
	require.NoError(t, c.Apply(ctx, manifest))
	return getCoreDNS(t, c, ns)
}

func getCoreDNS(t *testing.T, c *harness.Cluster, ns string) *appsv1.Deployment {
	t.Helper()
	d, err := c.Client.AppsV1().Deployments(ns).Get(context.Background(), "coredns", metav1.GetOptions{})
	require.NoError(t, err)
	return d
}

// kubectlPatch patches coredns in east's namespace ns with patchFile as
// deploy/README.md does it by hand: `kubectl patch --type=json
// --patch-file`, the real kubectl, as the cluster's admin.
func kubectlPatch(t *testing.T, ns, patchFile string) {
	t.Helper()
	out, err := env.Cluster("east").Kubectl(context.Background(),
		"-n", ns, "patch", "deployment", "coredns", "--type=json", "--patch-file", patchFile)
	require.NoError(t, err, "kubectl patch\n%s", out)
}

// kubeadmDeployment is kube-system/coredns as kubeadm makes it, in
// namespace ns.
func kubeadmDeployment(ns string) string {
	return harness.KubeadmCoreDNSDeployment(ns, harness.KubeadmCoreDNSImage)
}

// dnsHook runs `coredns-mc dns args... --kubeconfig kubeconfig` to its
// end, as a hook Job runs it, and returns its exit code and its output.
func dnsHook(t *testing.T, kubeconfig string, args ...string) (int, string) {
	t.Helper()
	bin, err := harness.CorednsMC()
	require.NoError(t, err)
	argv := append([]string{bin, "dns"}, args...)
	argv = append(argv, "--kubeconfig="+kubeconfig)
	p := env.StartProcess(t, "coredns-mc-dns-"+args[0], nil, argv...)
	select {
	case <-p.Done():
	case <-time.After(2 * wait):
		t.Fatalf("coredns-mc dns %q still running after %s:\n%s", args, 2*wait, p.Tail(20))
	}
	code := 0
	if _, err := p.Exited(); err != nil {
		var exit *exec.ExitError
		require.True(t, errors.As(err, &exit), "coredns-mc dns %q: %v", args, err)
		code = exit.ExitCode()
	}
	out := p.Log(t)
	t.Logf("coredns-mc dns %q: exit %d\n%s", args, code, out)
	return code, out
}

// projectPatch is the absolute path of deploy/patches/coredns.yaml.
var projectPatch = harness.RepoPath("deploy", "patches", "coredns.yaml")

// editedPatch writes deploy/patches/coredns.yaml with each old replaced by
// its new (pairs, as harness.ReplaceOnce takes them) into a file of its own.
func editedPatch(t *testing.T, pairs ...string) string {
	t.Helper()
	text, err := harness.ReplaceOnce(harness.RepoFile(t, "deploy", "patches", "coredns.yaml"), pairs...)
	require.NoError(t, err)
	return harness.TempFile(t, "coredns.yaml", []byte(text))
}

// recorded is the value of the annotation dns apply writes.
type recorded struct {
	Template        *corev1.PodTemplateSpec    `json:"template"`
	Strategy        *appsv1.DeploymentStrategy `json:"strategy"`
	MinReadySeconds *int32                     `json:"minReadySeconds"`
}

// The hooks' life on kube-system/coredns as kubeadm makes it: install,
// a rerun, an upgrade, uninstall.
func TestDNSHook(t *testing.T) {
	env.LogOnFailure(t)
	const ref = "deploy-dns-hook-kubectl"
	east := env.Cluster("east")
	env.TempNamespace(t, ref, east)
	kubeconfig := hookKubeconfig(t, east, "kube-system")
	hookArgs := func(action string, more ...string) []string {
		// East has no deployment controller: no rollout to wait for.
		return append([]string{action, "--deployment", "kube-system/coredns", "--wait=false"}, more...)
	}

	// What kubectl patch makes of kubeadm's CoreDNS.
	recreateCoreDNS(t, east, ref, kubeadmDeployment(ref))
	kubectlPatch(t, ref, projectPatch)
	want := getCoreDNS(t, east, ref)

	// Install: the patch, and the original recorded, in one write.
	created := recreateCoreDNS(t, east, "kube-system", kubeadmDeployment("kube-system"))
	require.Empty(t, created.Annotations, "a Deployment without annotations: the annotations map is added")
	code, out := dnsHook(t, kubeconfig, hookArgs("apply", "--patch-file", projectPatch)...)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "kube-system/coredns: first apply: recording the pod template, strategy and minReadySeconds in annotation "+dnspatch.Annotation)
	assert.Contains(t, out, fmt.Sprintf("every test of it held: generation %d -> %d", created.Generation, created.Generation+1))
	assert.Contains(t, out, "kube-system/coredns: not waiting for the rollout (--wait=false)")
	applied := getCoreDNS(t, east, "kube-system")
	assert.Equal(t, want.Spec, applied.Spec, "what kubectl patch makes of it")
	require.Equal(t, []string{dnspatch.Annotation}, slices.Collect(maps.Keys(applied.Annotations)))
	var orig recorded
	require.NoError(t, json.Unmarshal([]byte(applied.Annotations[dnspatch.Annotation]), &orig))
	assert.Equal(t, &created.Spec.Template, orig.Template, "the original template, recorded")
	assert.Equal(t, &created.Spec.Strategy, orig.Strategy, "the original strategy, recorded")
	assert.Nil(t, orig.MinReadySeconds, "kubeadm's has none")

	// Again (a hook rerun): nothing changes.
	code, out = dnsHook(t, kubeconfig, hookArgs("apply", "--patch-file", projectPatch)...)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "annotation "+dnspatch.Annotation+" present (applied before)")
	assert.Contains(t, out, fmt.Sprintf("the spec was that already (generation %d): no new rollout", applied.Generation))
	again := getCoreDNS(t, east, "kube-system")
	assert.Equal(t, applied.Generation, again.Generation, "no new generation")
	assert.Equal(t, applied.Spec, again.Spec)
	assert.Equal(t, applied.Annotations, again.Annotations)

	// An upgrade whose patch differs: it goes onto the original, as kubectl
	// patch would on kubeadm's CoreDNS, and the original stays recorded.
	// The patch of a next version: another image, and kubeadm's readiness
	// failure threshold left alone.
	next := editedPatch(t, "value: ghcr.io/mcmirror/coredns-mc:latest", "value: ghcr.io/mcmirror/coredns-mc:v2",
		"- {op: add, path: /spec/template/spec/containers/0/readinessProbe/failureThreshold, value: 2}\n", "")
	recreateCoreDNS(t, east, ref, kubeadmDeployment(ref))
	kubectlPatch(t, ref, next)
	wantNext := getCoreDNS(t, east, ref)
	code, out = dnsHook(t, kubeconfig, hookArgs("apply", "--patch-file", next)...)
	require.Equal(t, 0, code, out)
	upgraded := getCoreDNS(t, east, "kube-system")
	assert.Equal(t, wantNext.Spec, upgraded.Spec, "what kubectl patch makes of the original with the next patch")
	assert.Equal(t, "ghcr.io/mcmirror/coredns-mc:v2", upgraded.Spec.Template.Spec.Containers[0].Image)
	assert.Equal(t, created.Spec.Template.Spec.Containers[0].ReadinessProbe.FailureThreshold,
		upgraded.Spec.Template.Spec.Containers[0].ReadinessProbe.FailureThreshold, "what the next patch leaves alone is the original's")
	assert.Equal(t, applied.Annotations, upgraded.Annotations, "the original kept")
	assert.Equal(t, applied.Generation+1, upgraded.Generation)

	// Uninstall: the Deployment as it was created, defaults and all, and
	// no annotation.
	code, out = dnsHook(t, kubeconfig, hookArgs("revert")...)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "kube-system/coredns: restored the pod template, strategy and minReadySeconds recorded in annotation "+dnspatch.Annotation+" and removed it")
	reverted := getCoreDNS(t, east, "kube-system")
	assert.Equal(t, created.Spec, reverted.Spec, "the spec as created")
	assert.Empty(t, reverted.Annotations)
	assert.Equal(t, created.Labels, reverted.Labels)

	// Again: nothing to do, nothing written.
	code, out = dnsHook(t, kubeconfig, hookArgs("revert")...)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "kube-system/coredns: no annotation "+dnspatch.Annotation+": dns apply never patched it, or it was reverted already; nothing to do")
	assert.Equal(t, reverted.ResourceVersion, getCoreDNS(t, east, "kube-system").ResourceVersion)

	// The Role lets the hook read and patch that one Deployment, and the
	// API server refuses it the rest.
	client := saClient(t, east, "kube-system", hookAccount)
	ctx := context.Background()
	for what, do := range map[string]func() error{
		"delete coredns": func() error {
			return client.AppsV1().Deployments("kube-system").Delete(ctx, "coredns", metav1.DeleteOptions{})
		},
		"list Deployments": func() error {
			return errOf(client.AppsV1().Deployments("kube-system").List(ctx, metav1.ListOptions{}))
		},
		"watch coredns": func() error {
			w, err := client.AppsV1().Deployments("kube-system").Watch(ctx, metav1.SingleObject(metav1.ObjectMeta{Name: "coredns"}))
			if err == nil {
				w.Stop()
			}
			return err
		},
		"patch coredns elsewhere": func() error {
			return errOf(client.AppsV1().Deployments(ref).Patch(ctx, "coredns", types.JSONPatchType, []byte(`[]`), metav1.PatchOptions{}))
		},
		"update coredns": func() error {
			return errOf(client.AppsV1().Deployments("kube-system").Update(ctx, reverted, metav1.UpdateOptions{}))
		},
		"patch coredns's scale": func() error {
			return errOf(client.AppsV1().Deployments("kube-system").Patch(ctx, "coredns", types.JSONPatchType, []byte(`[]`), metav1.PatchOptions{}, "scale"))
		},
	} {
		assert.True(t, apierrors.IsForbidden(do()), "the hook may not %s", what)
	}
}

// Refused, with the reason, and nothing changed: a CoreDNS laid out
// otherwise than kubeadm's, one patched by hand already, and RBAC that
// does not allow get, or patch.
func TestDNSHookRefuses(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	const ns = "deploy-dns-hook"
	east := env.Cluster("east")
	env.TempNamespace(t, ns, east)
	kubeconfig := hookKubeconfig(t, east, ns)
	apply := []string{"apply", "--deployment", ns + "/coredns", "--patch-file", projectPatch, "--wait=false"}
	unchanged := func(before *appsv1.Deployment) {
		t.Helper()
		after := getCoreDNS(t, east, ns)
		assert.Equal(t, before.ResourceVersion, after.ResourceVersion, "nothing written")
		assert.Equal(t, before.Spec, after.Spec)
		assert.NotContains(t, after.Annotations, dnspatch.Annotation)
	}

	// The config volume under another name (as in TestCoreDNSPatch).
	m, err := harness.ReplaceOnce(kubeadmDeployment(ns),
		"- name: config-volume\n        configMap:", "- name: coredns-config\n        configMap:",
		"{name: config-volume, mountPath", "{name: coredns-config, mountPath")
	require.NoError(t, err)
	before := recreateCoreDNS(t, east, ns, m)
	code, out := dnsHook(t, kubeconfig, apply...)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "coredns-mc dns apply: "+ns+"/coredns is not laid out as kubeadm lays out its CoreDNS, which "+projectPatch+" expects: "+
		`operation 4 of the patch: /spec/template/spec/containers/0/volumeMounts/0/name is "coredns-config", where the patch tests for "config-volume". `+
		"The patch changed nothing")
	unchanged(before)

	// Patched by hand with the README's kubectl command: recorded as the
	// original, it would be what uninstall puts back.
	recreateCoreDNS(t, east, ns, kubeadmDeployment(ns))
	kubectlPatch(t, ns, projectPatch)
	before = getCoreDNS(t, east, ns)
	code, out = dnsHook(t, kubeconfig, apply...)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, ns+"/coredns already is what "+projectPatch+" makes of it, but has no annotation "+dnspatch.Annotation+" (patched by hand")
	assert.Contains(t, out, "kubectl -n "+ns+" rollout undo deployment coredns")
	unchanged(before)

	// No Role: get is refused. A Role with get only: patch is.
	before = recreateCoreDNS(t, east, ns, kubeadmDeployment(ns))
	const nobody, reader = "mcmirror-dns-nobody", "mcmirror-dns-reader"
	require.NoError(t, east.Apply(ctx, serviceAccount(ns, nobody)+"---\n"+
		accountWithRole(ns, reader, "[{apiGroups: [apps], resources: [deployments], resourceNames: [coredns], verbs: [get]}]")))
	get := access{"get", "apps", "deployments", ns, "coredns"}
	patch := access{"patch", "apps", "deployments", ns, "coredns"}
	checkAccess(t, ns, nobody, nil, []access{get, patch})
	checkAccess(t, ns, reader, []access{get}, []access{patch})
	for _, c := range []struct {
		account, action, verb string
	}{
		{nobody, "apply", "get"},
		{nobody, "revert", "get"},
		{reader, "apply", "patch"},
	} {
		args := slices.Clone(apply)
		if c.action == "revert" {
			args = []string{"revert", "--deployment", ns + "/coredns", "--wait=false"}
		}
		code, out := dnsHook(t, accountKubeconfig(t, east, ns, c.account), args...)
		assert.Equal(t, 1, code, out)
		assert.Contains(t, out, fmt.Sprintf("coredns-mc dns %s: %s/coredns: RBAC refuses to %s it (403): "+
			"the ServiceAccount needs a Role with the verbs get and patch on deployments (group apps) named coredns in %s", c.action, ns, c.verb, ns))
		assert.Contains(t, out, fmt.Sprintf(`User "system:serviceaccount:%s:%s" cannot %s resource "deployments"`, ns, c.account, c.verb))
	}
	unchanged(before)
}

// The wait for the rollout, on west's deployment controller, with pods
// that KWOK runs (Ready once bound to its node: no image, no probe): apply
// returns once every pod of the new template is Ready, before they are
// available, with the old pods still there; the Deployment takes those down
// once the new ones have been Ready for minReadySeconds. Revert returns once
// its rollout completes. A rollout the controller gives up on fails apply
// with the controller's reason; one still going at --timeout fails it with
// where it stands.
func TestDNSHookRollout(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	const ns = "deploy-dns-rollout"
	west := env.Cluster("west")
	env.TempNamespace(t, ns, west)
	kubeconfig := hookKubeconfig(t, west, ns)
	// The pods' ServiceAccount: the ReplicaSet controller creates no pod
	// of an account that does not exist.
	require.NoError(t, west.Apply(ctx, serviceAccount(ns, "coredns")))

	// kubeadm returns kubeadm's Deployment in ns with each old replaced by
	// its new, in pairs.
	kubeadm := func(pairs ...string) string {
		m, err := harness.ReplaceOnce(kubeadmDeployment(ns), pairs...)
		require.NoError(t, err)
		return m
	}
	// There is no scheduler: pods are bound to KWOK's node by name, or
	// stay Pending.
	onNode := []string{"      serviceAccountName: coredns\n", "      serviceAccountName: coredns\n      nodeName: " + harness.NodeName + "\n"}
	// The project's patch with a minReadySeconds of 1: the old pods go
	// within the test's wait.
	quick := editedPatch(t, "{op: add, path: /spec/minReadySeconds, value: 35}",
		"{op: add, path: /spec/minReadySeconds, value: 1}")
	hook := func(action string, more ...string) (int, string) {
		return dnsHook(t, kubeconfig, append([]string{action, "--deployment", ns + "/coredns"}, more...)...)
	}
	counts := func(d *appsv1.Deployment) []int32 {
		return []int32{d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.AvailableReplicas, d.Status.UnavailableReplicas}
	}
	kubeadmAvailable := func() {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			d, err := west.Client.AppsV1().Deployments(ns).Get(ctx, "coredns", metav1.GetOptions{})
			require.NoError(c, err)
			assert.Equal(c, int32(2), d.Status.AvailableReplicas, "kubeadm's pods available")
		}, wait, tick)
	}

	// Serving: with the project's patch (minReadySeconds 35), apply
	// returns once both new pods (rolled together) are Ready, while none is
	// available yet and both old ones are still there.
	created := recreateCoreDNS(t, west, ns, kubeadm(onNode...))
	kubeadmAvailable()
	code, out := hook("apply", "--patch-file", projectPatch)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, ns+"/coredns: 2 old replicas pending termination, 2 of 2 updated replicas Ready")
	assert.Contains(t, out, ns+"/coredns: every pod of the new template is Ready and serves; the old pods stay until the new ones are available")
	d := getCoreDNS(t, west, ns)
	assert.Equal(t, d.Generation, d.Status.ObservedGeneration)
	assert.Equal(t, []int32{4, 2, 2, 2}, counts(d), "replicas, updated, available (the old pods), unavailable (the new ones, Ready for less than minReadySeconds)")
	assert.EqualValues(t, 4, d.Status.ReadyReplicas)
	assert.Contains(t, d.Annotations, "deployment.kubernetes.io/revision", "the controller's annotation, beside ours")
	assert.Contains(t, d.Annotations, dnspatch.Annotation)
	// Revert, with the new pods not yet available: complete, the spec as
	// created, kubeadm's pods the ones left.
	code, out = hook("revert")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, ns+"/coredns: rollout complete: 2 of 2 replicas updated and available")
	d = getCoreDNS(t, west, ns)
	assert.Equal(t, created.Spec, d.Spec, "the spec as created")
	assert.NotContains(t, d.Annotations, dnspatch.Annotation)
	assert.Equal(t, []int32{2, 2, 2, 0}, counts(d))

	// Complete: with a minReadySeconds of 1 the Deployment takes the old
	// pods down after apply has returned; revert again waits until the
	// rollout completes.
	created = recreateCoreDNS(t, west, ns, kubeadm(onNode...))
	kubeadmAvailable()
	code, out = hook("apply", "--patch-file", quick)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "every pod of the new template is Ready and serves")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		d, err := west.Client.AppsV1().Deployments(ns).Get(ctx, "coredns", metav1.GetOptions{})
		require.NoError(c, err)
		assert.Equal(c, []int32{2, 2, 2, 0}, counts(d), "the new pods alone, available")
	}, wait, tick)
	code, out = hook("revert")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, ns+"/coredns: rollout complete: 2 of 2 replicas updated and available")
	d = getCoreDNS(t, west, ns)
	assert.Equal(t, created.Spec, d.Spec, "the spec as created")
	assert.Equal(t, []int32{2, 2, 2, 0}, counts(d))

	// Given up: pods that are never bound, and a progress deadline of 3 s
	// (which must exceed minReadySeconds: the quick patch's).
	recreateCoreDNS(t, west, ns, kubeadm("  replicas: 2\n", "  replicas: 2\n  progressDeadlineSeconds: 3\n"))
	code, out = hook("apply", "--patch-file", quick)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "coredns-mc dns apply: "+ns+"/coredns: the rollout failed: the deployment controller gave up on the rollout (progressDeadlineSeconds 3): ")
	assert.Contains(t, out, "has timed out progressing")

	// Still going at --timeout: pods that are never bound, kubeadm's
	// deadline (600 s).
	recreateCoreDNS(t, west, ns, kubeadm())
	code, out = hook("apply", "--patch-file", projectPatch, "--timeout=10s")
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "coredns-mc dns apply: "+ns+"/coredns: timed out: --timeout 10s passed before the rollout completed: ")
}

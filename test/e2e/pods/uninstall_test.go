package pods

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/mcmirror/mcmirror/test/harness"
)

// TestHelmUninstallLeavesNothing runs deploy/README.md's "Uninstalling" on
// both clusters, last of the package (go test runs the files in name
// order; this one sorts last of those with tests): unlink, wait for the
// mirrors to go, `helm uninstall`, delete the namespace. Then nothing of
// mcmirror is left in either cluster: no object labelled part-of
// mcmirror, no mirror, no link Secret, neither namespace, and
// kube-system/coredns is kubeadm's again (its image, and no annotation of
// ours), with its pods serving. The only CRDs are the two MCS CRDs of the
// chart's crds/, which Helm never deletes (the README says so, and how to
// delete them); the test then deletes them with the README's command.
func TestHelmUninstallLeavesNothing(t *testing.T) {
	env.LogOnFailure(t)
	installed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	// The image kubeadm's CoreDNS ran, as the hook recorded it.
	original := map[string]string{}
	for _, c := range env.Clusters() {
		original[c.Name] = recordedImage(t, ctx, c)
	}
	blocks, err := harness.READMEBlocks("## Uninstalling")
	require.NoError(t, err)
	log, err := env.InstallShell(ctx, strings.Join(blocks, "\n"))
	require.NoError(t, err, log)

	for _, c := range env.Clusters() {
		for _, ns := range []string{"mcmirror", "mcmirror-links"} {
			_, err := c.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			assert.True(t, apierrors.IsNotFound(err), "%s: namespace %s: %v", c.Name, ns, err)
		}
		sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/part-of=mcmirror"}
		for what, list := range map[string]func() (int, error){
			"Services": func() (int, error) {
				l, err := c.Client.CoreV1().Services("").List(ctx, sel)
				return len(l.Items), err
			},
			"mirror Services": func() (int, error) {
				l, err := c.Client.CoreV1().Services("").List(ctx, metav1.ListOptions{LabelSelector: "mcmirror.dev/managed-by=controller"})
				return len(l.Items), err
			},
			"ConfigMaps": func() (int, error) {
				l, err := c.Client.CoreV1().ConfigMaps("").List(ctx, sel)
				return len(l.Items), err
			},
			"PodDisruptionBudgets": func() (int, error) {
				l, err := c.Client.PolicyV1().PodDisruptionBudgets("").List(ctx, sel)
				return len(l.Items), err
			},
			"ClusterRoles": func() (int, error) {
				l, err := c.Client.RbacV1().ClusterRoles().List(ctx, sel)
				return len(l.Items), err
			},
			"ClusterRoleBindings": func() (int, error) {
				l, err := c.Client.RbacV1().ClusterRoleBindings().List(ctx, sel)
				return len(l.Items), err
			},
			"Roles": func() (int, error) {
				l, err := c.Client.RbacV1().Roles("").List(ctx, sel)
				return len(l.Items), err
			},
			"Jobs": func() (int, error) {
				l, err := c.Client.BatchV1().Jobs("").List(ctx, sel)
				return len(l.Items), err
			},
			"ValidatingAdmissionPolicies": func() (int, error) {
				l, err := c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, sel)
				return len(l.Items), err
			},
		} {
			n, err := list()
			require.NoError(t, err, "%s: %s", c.Name, what)
			assert.Zero(t, n, "%s: %s of mcmirror left", c.Name, what)
		}
		// The link ServiceAccount's ClusterRole (unlabelled, as
		// `coredns-mc link` makes it) is gone too.
		_, err := c.Client.RbacV1().ClusterRoles().Get(ctx, "mcmirror-link", metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "%s: ClusterRole mcmirror-link: %v", c.Name, err)

		d, err := c.Client.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
		require.NoError(t, err)
		assert.NotContains(t, d.Annotations, "mcmirror.dev/dns-original", c.Name)
		assert.Equal(t, original[c.Name], d.Spec.Template.Spec.Containers[0].Image, "%s: the DNS runs kubeadm's image again", c.Name)
		assert.EqualValues(t, 2, d.Status.AvailableReplicas, "%s: DNS pods serving after the revert", c.Name)

		// Helm leaves the CRDs its crds/ installed (deleting one would
		// delete every object of its kind, another MCS implementation's
		// too): exactly those two are left, and go with the README's
		// command.
		assert.ElementsMatch(t, harness.MCSCRDNames, crdNames(t, ctx, c), "%s: CRDs left after uninstall", c.Name)
		out, err := c.Kubectl(ctx, append([]string{"delete", "crd"}, harness.MCSCRDNames...)...)
		require.NoError(t, err, out)
		assert.Empty(t, crdNames(t, ctx, c), "%s: CRDs left after kubectl delete crd", c.Name)
	}
}

// recordedImage returns the image of the pod template the chart's DNS hook
// recorded in kube-system/coredns's annotation mcmirror.dev/dns-original
// before it patched the Deployment: kubeadm's.
func recordedImage(t *testing.T, ctx context.Context, c *harness.Cluster) string {
	t.Helper()
	d, err := c.Client.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	require.NoError(t, err)
	raw, ok := d.Annotations["mcmirror.dev/dns-original"]
	require.True(t, ok, "%s: kube-system/coredns has no mcmirror.dev/dns-original: the hook did not record it", c.Name)
	var orig struct {
		Template corev1.PodTemplateSpec `json:"template"`
	}
	require.NoError(t, json.Unmarshal([]byte(raw), &orig), raw)
	require.NotEmpty(t, orig.Template.Spec.Containers, raw)
	img := orig.Template.Spec.Containers[0].Image
	require.NotEqual(t, d.Spec.Template.Spec.Containers[0].Image, img, "%s: the recorded image is the patched one", c.Name)
	return img
}

// crdNames returns the names of the CRDs c holds.
func crdNames(t *testing.T, ctx context.Context, c *harness.Cluster) []string {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.Config)
	require.NoError(t, err)
	l, err := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}).
		List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	var names []string
	for _, u := range l.Items {
		names = append(names, u.GetName())
	}
	return names
}

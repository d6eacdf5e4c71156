package pods

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"

	corev1 "k8s.io/api/core/v1"

	"github.com/mcmirror/mcmirror/test/harness"
)

// TestHelmUninstallLeavesNothing runs the uninstall block of README.md as
// written (between its markers; deploy/README.md's "Uninstalling" has the
// same commands) on both clusters, last of the package (go test runs the
// files in name order; this one sorts last of those with tests), after an
// export of each kind that leaves objects behind when the controller goes
// too early: a mirror (gateway mode, web-west in east) and a ServiceExport
// (the ServiceImports and derived Services in both clusters, the stamp on
// west's Service). Then every object of every resource the API servers
// serve is listed, in both clusters: none has mcmirror in its name, or in
// a key or value of its labels or annotations; kube-system/coredns's pod
// template and its ConfigMap are exactly what they were before the install.
// The only things left are the two MCS CRDs of the chart's crds/, which
// Helm never deletes (the README says so, and how to delete them); the
// test then deletes them with the README's command.
func TestHelmUninstallLeavesNothing(t *testing.T) {
	env.LogOnFailure(t)
	installed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	east, west := env.Cluster("east"), env.Cluster("west")

	block, err := harness.RootREADMEBlock("uninstall")
	require.NoError(t, err)
	deployBlocks, err := harness.READMEBlocks("## Uninstalling")
	require.NoError(t, err)
	require.Equal(t, []string{block}, deployBlocks, "README.md and deploy/README.md uninstall alike")

	// Something of each kind to clean: west's Service web (step 8 of the
	// install) exported by a ServiceExport too, seen imported in east.
	require.NoError(t, west.Apply(ctx, `
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceExport
metadata: {name: web, namespace: default}
`))
	for _, c := range []*harness.Cluster{east, west} {
		require.NoError(t, wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
			l, err := c.Client.CoreV1().Services("default").List(ctx, metav1.ListOptions{LabelSelector: "mcmirror.dev/service-import"})
			return err == nil && len(l.Items) > 0, nil
		}), "%s: no derived Service of the ServiceExport web", c.Name)
	}
	_, err = east.Client.CoreV1().Services("default").Get(ctx, "web-west", metav1.GetOptions{})
	require.NoError(t, err, "east's mirror of west's web")

	uninstallLeavesNothing(t, ctx, "install")

	// README.md's Install block, as written, on the clusters as they are
	// now (kubeadm's DNS, the MCS CRDs and west's exports left from
	// before), in a directory of its own; meanwhile east's client pod asks
	// the cluster DNS for west's web until it answers: the time from the
	// first helm install to the first cross-cluster answer.
	imgs, err := harness.LocalImages()
	require.NoError(t, err)
	require.NoError(t, east.Apply(ctx, harness.BusyboxClient(imgs.Busybox)))
	_, err = east.Kubectl(ctx, "wait", "--for=condition=Ready", "pod/client", "--timeout=3m")
	require.NoError(t, err)
	const name = "web-west.default.svc.cluster.local"
	out, _ := inClient(ctx, "nslookup "+name)
	require.NotContains(t, out, "Name:", "%s answered before the install", name)
	first := make(chan time.Duration, 1)
	askCtx, stopAsking := context.WithCancel(ctx)
	defer stopAsking()
	start := time.Now()
	go func() {
		for askCtx.Err() == nil {
			if out, err := inClient(askCtx, "timeout 3 nslookup "+name); err == nil && strings.Contains(out, "Name:") {
				first <- time.Since(start)
				return
			}
			select {
			case <-askCtx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	// And when each cluster's DNS rollout completes: the install returns
	// once the new DNS pods serve, and the old ones, which do not know
	// west's names, answer beside them until then.
	type rolledOut struct {
		cluster string
		at      time.Time
		err     error
	}
	rolled := make(chan rolledOut, len(env.Clusters()))
	for _, c := range env.Clusters() {
		go func() {
			at, err := dnsRolledOut(askCtx, c)
			rolled <- rolledOut{c.Name, at, err}
		}()
	}
	// The machine is shared: its load says how far these times are the
	// install's own.
	loadBefore := loadAverage()
	log, printed, err := env.InstallFromRootREADME(ctx, "install-readme")
	require.NoError(t, err, log)
	t.Logf("README.md's install: %s (load average before: %s, after: %s); what it printed, and when:\n%s",
		time.Since(start).Round(time.Second), loadBefore, loadAverage(), stamped(printed))
	select {
	case d := <-first:
		t.Logf("from the first helm install to east's first answer for west's %s: %s (README.md's target: 60 s)", name, d.Round(100*time.Millisecond))
	case <-time.After(2 * time.Minute):
		t.Fatalf("east's cluster DNS never answered %s after README.md's install:\n%s", name, log)
	}
	for range env.Clusters() {
		r := <-rolled
		require.NoError(t, r.err)
		t.Logf("%s's DNS rollout complete (the old pods gone) %s after the first helm install", r.cluster, r.at.Sub(start).Round(100*time.Millisecond))
	}
	stopAsking()

	uninstallLeavesNothing(t, ctx, "install-readme")
	for _, c := range env.Clusters() {
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

// uninstallLeavesNothing runs README.md's uninstall block in the
// directory dir of InstallShellIn, and then finds nothing of mcmirror in
// either cluster but the MCS CRDs, and each cluster's DNS as it was before
// the first install.
func uninstallLeavesNothing(t *testing.T, ctx context.Context, dir string) {
	t.Helper()
	block, err := harness.RootREADMEBlock("uninstall")
	require.NoError(t, err)
	// The image kubeadm's CoreDNS ran, as the hook recorded it.
	original := map[string]string{}
	for _, c := range env.Clusters() {
		original[c.Name] = recordedImage(t, ctx, c)
	}
	start := time.Now()
	log, err := env.InstallShellIn(ctx, dir, block)
	require.NoError(t, err, log)
	t.Logf("README.md's uninstall: %s", time.Since(start).Round(time.Second))

	for _, c := range env.Clusters() {
		left := mcmirrorObjects(t, ctx, c)
		assert.Empty(t, left, "%s: objects of mcmirror left after README.md's uninstall", c.Name)

		now, err := dnsNow(ctx, c)
		require.NoError(t, err)
		assert.Equal(t, dnsBefore[c.Name].data, now.data, "%s: the cluster's own Corefile ConfigMap", c.Name)
		assert.True(t, apiequality.Semantic.DeepEqual(dnsBefore[c.Name].template, now.template),
			"%s: kube-system/coredns's pod template is not what it was before the install:\nbefore %s\nnow    %s",
			c.Name, mustJSON(t, dnsBefore[c.Name].template), mustJSON(t, now.template))
		_, err = c.Client.CoreV1().ConfigMaps("kube-system").Get(ctx, "coredns-mcmirror", metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "%s: ConfigMap coredns-mcmirror: %v", c.Name, err)

		d, err := c.Client.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
		require.NoError(t, err)
		assert.NotContains(t, d.Annotations, "mcmirror.dev/dns-original", c.Name)
		assert.Equal(t, original[c.Name], d.Spec.Template.Spec.Containers[0].Image, "%s: the DNS runs kubeadm's image again", c.Name)
		assert.EqualValues(t, 2, d.Status.AvailableReplicas, "%s: DNS pods serving after the revert", c.Name)
	}
}

// mcmirrorObjects lists every object of every resource c serves (but
// Events, which expire on their own, ComponentStatuses, which are no
// objects, and the MCS CRDs, which the README deletes separately) and returns those with mcmirror in their name, or in
// a key or value of their labels or annotations, as "resource ns/name".
func mcmirrorObjects(t *testing.T, ctx context.Context, c *harness.Cluster) []string {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	require.NoError(t, err)
	lists, err := dc.ServerPreferredResources()
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(c.Config)
	require.NoError(t, err)
	var left []string
	listed := 0
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		require.NoError(t, err)
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || r.Name == "events" || r.Name == "componentstatuses" || !slices.Contains(r.Verbs, "list") {
				continue
			}
			items, err := dyn.Resource(gv.WithResource(r.Name)).List(ctx, metav1.ListOptions{})
			require.NoError(t, err, "%s: list %s", c.Name, r.Name)
			listed++
			for _, u := range items.Items {
				if r.Name == "customresourcedefinitions" && slices.Contains(harness.MCSCRDNames, u.GetName()) {
					continue
				}
				if mentions(u.GetName(), u.GetLabels(), u.GetAnnotations()) {
					left = append(left, fmt.Sprintf("%s %s/%s", r.Name, u.GetNamespace(), u.GetName()))
				}
			}
		}
	}
	require.Greater(t, listed, 20, "%s: resources listed", c.Name)
	return left
}

func mentions(name string, maps ...map[string]string) bool {
	if strings.Contains(name, "mcmirror") {
		return true
	}
	for _, m := range maps {
		for k, v := range m {
			if strings.Contains(k, "mcmirror") || strings.Contains(v, "mcmirror") {
				return true
			}
		}
	}
	return false
}

// loadAverage is the machine's load over the last minute, 5 and 15
// minutes, as /proc/loadavg says.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return fmt.Sprintf("unknown (%v)", err)
	}
	if f := strings.Fields(string(b)); len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return fmt.Sprintf("unknown (/proc/loadavg: %q)", b)
}

// stamped gives each line the time it was printed at.
func stamped(lines []harness.OutputLine) string {
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "%6.1fs  %s\n", l.At.Seconds(), l.Text)
	}
	return b.String()
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
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

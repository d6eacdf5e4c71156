package chart_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/mcmirror/mcmirror/test/harness"
)

// One cluster with a kube-controller-manager (namespace deletion, the
// Deployments' ReplicaSets) and KWOK's simulated node, so that what helm
// installs behaves as objects of a cluster do; its pods run nothing.
var env = harness.New(harness.Options{Clusters: []harness.ClusterOptions{{Name: "east", Workloads: true}}})

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// state is what the API server holds of each object of a release: its
// resourceVersion, and a Deployment's generation.
type state map[string]string

// releaseObjects returns the objects of the release's manifest
// (`helm get manifest`), as the API server holds them; those not found
// are absent from the map and listed in missing.
func releaseObjects(t *testing.T, ctx context.Context, c *harness.Cluster, manifest string) (found map[string]*unstructured.Unstructured, missing []string) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.Config)
	require.NoError(t, err)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.Client.Discovery()))
	found = map[string]*unstructured.Unstructured{}
	for _, u := range decode(t, manifest) {
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		require.NoError(t, err, "%s", gvk)
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = dyn.Resource(m.Resource).Namespace(u.GetNamespace())
		}
		k := key(u.GetKind(), u.GetNamespace(), u.GetName())
		got, err := ri.Get(ctx, u.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			missing = append(missing, k)
			continue
		}
		require.NoError(t, err, k)
		found[k] = got
	}
	return found, missing
}

// snapshot returns the state of the release's objects.
func snapshot(t *testing.T, ctx context.Context, c *harness.Cluster, manifest string) state {
	t.Helper()
	found, missing := releaseObjects(t, ctx, c, manifest)
	require.Empty(t, missing, "objects of the release not in the cluster")
	s := state{}
	for k, u := range found {
		s[k] = u.GetResourceVersion()
		if u.GetKind() == "Deployment" {
			s[k+" generation"] = strconv.FormatInt(u.GetGeneration(), 10)
		}
	}
	return s
}

// decode returns the objects of a multi-document manifest.
func decode(t *testing.T, manifest string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, doc := range strings.Split(manifest, "\n---") {
		u := &unstructured.Unstructured{}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &u.Object), doc)
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
	return out
}

// crdResource is the resource of CustomResourceDefinitions.
var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// crds returns the CRDs the cluster holds: name to resourceVersion.
func crds(t *testing.T, ctx context.Context, c *harness.Cluster) map[string]string {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.Config)
	require.NoError(t, err)
	l, err := dyn.Resource(crdResource).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	out := map[string]string{}
	for _, u := range l.Items {
		out[u.GetName()] = u.GetResourceVersion()
	}
	return out
}

// The chart's life on a real API server, as the README's commands run it:
// install (the CRDs of crds/ first), an upgrade with the same values
// changes no object, an upgrade with a changed value changes the objects
// that carry it and no other, and uninstall leaves no object of the
// release behind, the link namespace included, and only the two MCS CRDs,
// which Helm never deletes. (dns.patchDeployment is off: there is no
// CoreDNS Deployment here, and no node to roll it on; test/e2e/pods runs
// the hook Jobs on real nodes.)
func TestInstallUpgradeUninstall(t *testing.T) {
	env.LogOnFailure(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	east := env.Cluster("east")
	values := []string{"-f", filepath.Join(chartDir(), "ci", "east-values.yaml"),
		"--set", "namespace.create=false", "--set", "dns.patchDeployment=false"}
	run := func(args ...string) string {
		t.Helper()
		out, err := helm(t, east.Kubeconfig, args...)
		require.NoError(t, err, "helm %v\n%s", args, out)
		return out
	}
	run(append([]string{"install", "mcmirror", chartDir(), "-n", "mcmirror", "--create-namespace"}, values...)...)
	manifest := run("get", "manifest", "mcmirror", "-n", "mcmirror")
	before := snapshot(t, ctx, east, manifest)
	require.Contains(t, before, key("Deployment", "mcmirror", "mcmirror-gateway"))
	require.Contains(t, before, key("Namespace", "", "mcmirror-links"))
	// Helm installed the chart's crds/, which `helm get manifest` does not
	// list; the cluster had no CRD before.
	crdsBefore := crds(t, ctx, east)
	require.ElementsMatch(t, harness.MCSCRDNames, slices.Collect(maps.Keys(crdsBefore)), "the CRDs after install")

	// The same values again: nothing changes.
	run(append([]string{"upgrade", "mcmirror", chartDir(), "-n", "mcmirror"}, values...)...)
	assert.Equal(t, before, snapshot(t, ctx, east, manifest), "an upgrade with the same values changed objects")
	assert.Equal(t, crdsBefore, crds(t, ctx, east), "an upgrade changed the CRDs")

	// A new peer: the gateway's Deployment (a new generation: its pods
	// roll), and nothing else.
	run(append(append([]string{"upgrade", "mcmirror", chartDir(), "-n", "mcmirror"}, values...),
		"--set", "gateway.peers.paris=192.0.2.9:4143")...)
	after := snapshot(t, ctx, east, manifest)
	var changed []string
	for k, v := range before {
		if after[k] != v {
			changed = append(changed, k)
		}
	}
	assert.ElementsMatch(t, []string{key("Deployment", "mcmirror", "mcmirror-gateway"),
		key("Deployment", "mcmirror", "mcmirror-gateway") + " generation"}, changed)

	// Uninstall: every object of the release goes, the namespaced ones with
	// their namespace's deletion finished.
	run("uninstall", "mcmirror", "-n", "mcmirror", "--wait", "--timeout", "3m")
	require.NoError(t, wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		found, _ := releaseObjects(t, ctx, east, manifest)
		return len(found) == 0, nil
	}), "objects of the release left after uninstall")
	_, err := east.Client.CoreV1().Namespaces().Get(ctx, "mcmirror-links", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "namespace mcmirror-links: %v", err)
	// The CRDs stay, untouched: Helm never deletes what crds/ installed
	// (deleting a CRD deletes every object of its kind, which another MCS
	// implementation may own), as the chart's README says. Nothing else is
	// left; then the test deletes them, as the README says to.
	assert.Equal(t, crdsBefore, crds(t, ctx, east), "the CRDs after uninstall")
	out, err := east.Kubectl(ctx, append([]string{"delete", "crd"}, harness.MCSCRDNames...)...)
	require.NoError(t, err, "%s", out)
	require.NoError(t, wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		return len(crds(t, ctx, east)) == 0, nil
	}), "CRDs left after kubectl delete crd")
}

// What the chart renders for a cluster other than deploy/'s example, with
// every value that differs between clusters set (image by digest, two
// peers, one of them IPv6, two allowed clusters, another port range, the
// alerts off: no prometheus-operator here), is what a real API server
// accepts (a server-side dry run: admission and validation, nothing
// written).
func TestServerAcceptsRendering(t *testing.T) {
	env.LogOnFailure(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	east := env.Cluster("east")
	// Namespaces of their own, so that nothing here meets the release of
	// TestInstallUpgradeUninstall.
	for _, ns := range []string{"accept", "accept-links"} {
		_, err := east.Kubectl(ctx, "create", "namespace", ns)
		require.NoError(t, err)
	}
	out, err := helm(t, "", "template", "mcmirror", chartDir(), "--namespace", "accept",
		"--set", "cluster=west", "--set", "linkNamespace=accept-links",
		"--set", "image.repository=registry.example.com/mcmirror/coredns-mc",
		"--set", "image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		"--set", "egressPorts=31000-31999",
		"--set", "gateway.peers.east=198.51.100.7:4143", "--set", "gateway.peers.paris=[2001:db8::7]:4143",
		"--set", "gateway.allowClusters={east,paris}")
	require.NoError(t, err, out)
	f := filepath.Join(t.TempDir(), "west.yaml")
	require.NoError(t, os.WriteFile(f, []byte(out), 0o644))
	applied, err := east.Kubectl(ctx, "apply", "--dry-run=server", "-f", f)
	require.NoError(t, err, "%s", applied)
	for _, want := range []string{"deployment.apps/mcmirror-gateway", "deployment.apps/mcmirror-controller",
		"job.batch/mcmirror-dns-apply", "validatingadmissionpolicy.admissionregistration.k8s.io/mcmirror-mirror-metadata"} {
		assert.Contains(t, applied, want+" created (server dry run)")
	}

	// Forward mode: its own DNS Deployment and Service.
	out, err = helm(t, "", "template", "mcmirror", chartDir(), "--namespace", "accept",
		"--set", "cluster=west", "--set", "linkNamespace=accept-links", "--set", "gateway.allowClusters={east}",
		"--set", "dns.mode=forward")
	require.NoError(t, err, out)
	require.NoError(t, os.WriteFile(f, []byte(out), 0o644))
	applied, err = east.Kubectl(ctx, "apply", "--dry-run=server", "-f", f)
	require.NoError(t, err, "%s", applied)
	for _, want := range []string{"deployment.apps/mcmirror-dns", "service/mcmirror-dns", "configmap/mcmirror-dns"} {
		assert.Contains(t, applied, want+" created (server dry run)")
	}
	assert.NotContains(t, applied, "mcmirror-dns-apply")
}

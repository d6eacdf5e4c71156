package controller_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/mcmirror/mcmirror/test/harness"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// The controller reads and writes the MCS API's v1beta1, its storage
// version: with v1alpha1 no longer served (as the API will be), a
// ServiceExport in west is exported, and east imports it.
func TestMCSOnlyV1beta1Served(t *testing.T) {
	const ns = "e2e-mcs-v1beta1"
	ctx := setUp(t, ns, "east", "west")
	serveV1alpha1(t, "east", false)
	serveV1alpha1(t, "west", false)
	require.NoError(t, env.Cluster("west").Apply(ctx, harness.ClusterIPService(ns, "api", 80, map[string]string{"team": "a"})))
	startExporter(t, "west", "paris")
	startController(t, "controller")

	createServiceExport(t, "west", ns, "api")
	requireConditions(t, "west", ns, "api", map[string]string{"Valid": "True/Valid", "Ready": "True/Ready"})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		im := requireImport(c, ns, "api", "east's ServiceImport")
		assert.Equal(c, mcsv1beta1.ClusterSetIP, im.si.Spec.Type)
		assert.NotEmpty(c, im.si.Spec.IPs)
		assert.Equal(c, []mcsv1beta1.ClusterStatus{{Cluster: "west"}}, im.si.Status.Clusters)
	}, wait, tick)
}

// serveV1alpha1 serves the MCS API's v1alpha1 in cluster or not (v1beta1
// stores either way), until the test ends.
func serveV1alpha1(t *testing.T, cluster string, served bool) {
	t.Helper()
	client, err := dynamic.NewForConfig(env.Cluster(cluster).Config)
	require.NoError(t, err)
	crds := client.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	set := func(served bool) error {
		for _, r := range []string{"serviceexports", "serviceimports"} {
			patch := fmt.Sprintf(`[{"op": "test", "path": "/spec/versions/0/name", "value": "v1alpha1"},
				{"op": "replace", "path": "/spec/versions/0/served", "value": %t}]`, served)
			if _, err := crds.Patch(context.Background(), r+"."+mcsv1beta1.GroupName, types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				return err
			}
		}
		return nil
	}
	require.NoError(t, set(served))
	t.Cleanup(func() { require.NoError(t, set(!served)) })
	// Discovery follows the CRDs.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := env.Cluster(cluster).Client.Discovery().ServerResourcesForGroupVersion(mcsv1beta1.GroupName + "/v1alpha1")
		assert.Equal(c, !served, err != nil, "v1alpha1 served: %v", err)
	}, wait, tick)
}

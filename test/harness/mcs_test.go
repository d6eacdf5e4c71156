package harness_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/mcmirror/mcmirror/test/harness"
)

// InstallMCSCRDs (east, twice: it is idempotent) and ClusterOptions.MCS
// (paris) establish the CRDs of sigs.k8s.io/mcs-api: a ServiceExport and a
// ServiceImport written with the module's typed clientset read back as
// written, in v1alpha1 and in v1beta1 (the version stored). A cluster
// started without MCS (west) serves neither.
func TestMCSCRDs(t *testing.T) {
	env.LogOnFailure(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	east := env.Cluster("east")
	require.NoError(t, east.InstallMCSCRDs(ctx))
	require.NoError(t, east.InstallMCSCRDs(ctx), "a second time")
	for _, c := range []*harness.Cluster{east, env.Cluster("paris")} {
		mcs, err := mcsclient.NewForConfig(c.Config)
		require.NoError(t, err)
		exports := mcs.MulticlusterV1beta1().ServiceExports("default")
		se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}}
		_, err = exports.Create(ctx, se, metav1.CreateOptions{})
		require.NoError(t, err, c.Name)
		t.Cleanup(func() { _ = exports.Delete(context.Background(), se.Name, metav1.DeleteOptions{}) })
		got, err := exports.Get(ctx, "web", metav1.GetOptions{})
		require.NoError(t, err, c.Name)
		assert.Equal(t, "web", got.Name, c.Name)
		beta, err := mcs.MulticlusterV1beta1().ServiceExports("default").Get(ctx, "web", metav1.GetOptions{})
		require.NoError(t, err, c.Name)
		assert.Equal(t, got.UID, beta.UID, c.Name)

		imports := mcs.MulticlusterV1beta1().ServiceImports("default")
		si := &mcsv1beta1.ServiceImport{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
			Spec: mcsv1beta1.ServiceImportSpec{
				Type:  mcsv1beta1.ClusterSetIP,
				Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: "TCP", Port: 80}},
			},
		}
		_, err = imports.Create(ctx, si, metav1.CreateOptions{})
		require.NoError(t, err, c.Name)
		t.Cleanup(func() { _ = imports.Delete(context.Background(), si.Name, metav1.DeleteOptions{}) })
		gotSI, err := imports.Get(ctx, "web", metav1.GetOptions{})
		require.NoError(t, err, c.Name)
		assert.Equal(t, si.Spec.Type, gotSI.Spec.Type, c.Name)
		assert.Equal(t, si.Spec.Ports, gotSI.Spec.Ports, c.Name)
	}
	mcs, err := mcsclient.NewForConfig(env.Cluster("west").Config)
	require.NoError(t, err)
	_, err = mcs.MulticlusterV1beta1().ServiceExports("default").List(ctx, metav1.ListOptions{})
	assert.True(t, apierrors.IsNotFound(err), "west, started without MCS, serves ServiceExports: %v", err)
}

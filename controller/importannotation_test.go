package controller

import (
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// A ServiceImport names its derived Service in the annotation Gateway API
// implementations read to route a ServiceImport backendRef; one written
// without it (by an older controller, or edited away) gets it back.
func TestServiceImportNamesDerivedService(t *testing.T) {
	f := newMCSFixture(t, []runtime.Object{namespace("shop")}, nil, west(
		exported("shop", "web", labels.ExportGateway, false, tcp("http", 80)), endpoints("shop", "web", ""),
	))
	f.converge("west/shop/web")
	f.convergeMCS("shop/web")
	imports := f.mcs.MulticlusterV1beta1().ServiceImports("shop")
	si, err := imports.Get(f.ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	derived := f.service("shop", DerivedName("shop", "web"))
	require.NotNil(t, derived)
	assert.Equal(t, derived.Name, si.Annotations[DerivedServiceAnnotation])

	delete(si.Annotations, DerivedServiceAnnotation)
	_, err = imports.Update(f.ctx, si, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		obj, ok, _ := f.c.mcs.imports.GetStore().GetByKey("shop/web")
		return ok && obj.(*mcsv1beta1.ServiceImport).Annotations[DerivedServiceAnnotation] == ""
	}, 10*time.Second, time.Millisecond, "the controller sees the ServiceImport without it")
	f.convergeMCS("shop/web")
	si, err = imports.Get(f.ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, derived.Name, si.Annotations[DerivedServiceAnnotation])
}

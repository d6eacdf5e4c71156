package harness

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/mcs-api/config/crd"
	"sigs.k8s.io/yaml"
)

// MCSCRDNames are the names of the CRDs of sigs.k8s.io/mcs-api that
// InstallMCSCRDs installs and the chart's crds/ holds: ServiceExport's and
// ServiceImport's.
var MCSCRDNames = []string{"serviceexports.multicluster.x-k8s.io", "serviceimports.multicluster.x-k8s.io"}

// crdResource is the resource of CustomResourceDefinitions, read through the
// dynamic client: the module has no apiextensions clientset.
var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// clusterPropertyCRD is a minimal CRD of the About API's ClusterProperty
// (about.k8s.io/v1alpha1, KEP-2149), for tests: sigs.k8s.io/about-api is
// not a dependency, and mcmirror reads only spec.value.
const clusterPropertyCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: clusterproperties.about.k8s.io
  annotations: {api-approved.kubernetes.io: "https://github.com/kubernetes/enhancements/pull/3084"}
spec:
  group: about.k8s.io
  scope: Cluster
  names: {kind: ClusterProperty, listKind: ClusterPropertyList, plural: clusterproperties, singular: clusterproperty}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [value]
            properties:
              value: {type: string, minLength: 1, maxLength: 128000}
`

// SetClusterProperty installs the ClusterProperty CRD if need be and sets
// the property name to value.
func (c *Cluster) SetClusterProperty(ctx context.Context, name, value string) error {
	if err := c.Apply(ctx, clusterPropertyCRD); err != nil {
		return err
	}
	if err := c.waitEstablished(ctx, "clusterproperties.about.k8s.io"); err != nil {
		return err
	}
	return c.Apply(ctx, fmt.Sprintf("apiVersion: about.k8s.io/v1alpha1\nkind: ClusterProperty\nmetadata: {name: %s}\nspec: {value: %q}\n", name, value))
}

// InstallMCSCRDs applies the ServiceExport and ServiceImport CRDs as the
// mcs-api module embeds them (the bytes of the chart's crds/) and waits
// until the API server has established both, so that their objects can be
// written as soon as it returns.
func (c *Cluster) InstallMCSCRDs(ctx context.Context) error {
	for _, def := range [][]byte{crd.ServiceExportCRD, crd.ServiceImportCRD} {
		var obj struct {
			Metadata struct{ Name string } `json:"metadata"`
		}
		if err := yaml.Unmarshal(def, &obj); err != nil {
			return fmt.Errorf("%s: mcs-api CRD: %w", c.Name, err)
		}
		if err := c.Apply(ctx, string(def)); err != nil {
			return err
		}
		if err := c.waitEstablished(ctx, obj.Metadata.Name); err != nil {
			return err
		}
	}
	return nil
}

// waitEstablished waits until the API server has established the CRD
// name, which was just applied.
func (c *Cluster) waitEstablished(ctx context.Context, name string) error {
	return c.env.poll(ctx, fmt.Sprintf("%s: CRD %s Established", c.Name, name), func(ctx context.Context) (bool, error) {
		u, err := c.dynamic.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err // just applied: even NotFound is an error
		}
		return established(u), nil
	})
}

// established reports whether a CRD's condition Established is True.
func established(u *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, v := range conds {
		if m, ok := v.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

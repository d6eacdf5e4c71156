package mcs

import (
	"context"
	"errors"
	"fmt"

	"github.com/mcmirror/mcmirror/internal/labels"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// ClusterPropertyResource is the About API's ClusterProperty (KEP-2149),
// read through the dynamic client because sigs.k8s.io/about-api is not a
// dependency. ClusterProperties are cluster-scoped.
var ClusterPropertyResource = schema.GroupVersionResource{Group: "about.k8s.io", Version: "v1alpha1", Resource: "clusterproperties"}

// ClusterIDProperty is the name of the ClusterProperty whose spec.value is
// the cluster's ID in its clusterset.
const ClusterIDProperty = "cluster.clusterset.k8s.io"

// ErrClusterID is wrapped by the errors of ClusterID that a change of
// configuration fixes (an invalid or a conflicting ID), not a retry; a
// command exits 2 for them, as for a flag mistake.
var ErrClusterID = errors.New("unusable cluster ID")

// ClusterID returns the cluster's ID: the value of its ClusterProperty
// cluster.clusterset.k8s.io, or configured when there is no such property
// or the About API is not installed. A property whose value is not a valid
// cluster name (labels.ValidateClusterName), or differs from a non-empty
// configured, is an error wrapping ErrClusterID; any other failure to read
// it (forbidden, unreachable) is returned wrapped, and may be retried.
func ClusterID(ctx context.Context, client dynamic.Interface, configured string) (string, error) {
	obj, err := client.Resource(ClusterPropertyResource).Get(ctx, ClusterIDProperty, metav1.GetOptions{})
	switch {
	case notServed(err):
		return configured, nil
	case err != nil:
		return "", fmt.Errorf("reading ClusterProperty %s: %w", ClusterIDProperty, err)
	}
	value, _, err := unstructured.NestedString(obj.Object, "spec", "value")
	if err != nil {
		return "", fmt.Errorf("%w: ClusterProperty %s: %w", ErrClusterID, ClusterIDProperty, err)
	}
	if err := labels.ValidateClusterName(value); err != nil {
		return "", fmt.Errorf("%w: ClusterProperty %s: %w", ErrClusterID, ClusterIDProperty, err)
	}
	if configured != "" && value != configured {
		return "", fmt.Errorf("%w: ClusterProperty %s has the value %q but the configured cluster name is %q; make them equal",
			ErrClusterID, ClusterIDProperty, value, configured)
	}
	return value, nil
}

// notServed reports whether err says the ClusterProperty does not exist:
// the object is absent, or the resource is not served (the CRD is not
// installed), which the API server answers with a 404 and a RESTMapper
// with a NoMatch error.
func notServed(err error) bool {
	return apierrors.IsNotFound(err) || meta.IsNoMatchError(err)
}

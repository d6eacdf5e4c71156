package mcs

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
)

func clusterProperty(name string, value any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": ClusterPropertyResource.GroupVersion().String(),
		"kind":       "ClusterProperty",
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{"value": value},
	}}
}

// failGet makes every GET of a ClusterProperty fail with err.
func failGet(err error) func(*fake.FakeDynamicClient) {
	return func(c *fake.FakeDynamicClient) {
		c.PrependReactor("get", ClusterPropertyResource.Resource, func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, err
		})
	}
}

func TestClusterID(t *testing.T) {
	gr := ClusterPropertyResource.GroupResource()
	// id is the objects of a cluster whose cluster.clusterset.k8s.io
	// property has value.
	id := func(value any) []runtime.Object { return []runtime.Object{clusterProperty(ClusterIDProperty, value)} }
	for _, tc := range []struct {
		name       string
		objects    []runtime.Object
		react      func(*fake.FakeDynamicClient)
		configured string
		want       string
		// wantErr are substrings of the error; none means no error.
		wantErr []string
		// config says the error wraps ErrClusterID (exit 2).
		config bool
	}{
		{name: "absent", configured: "east", want: "east"},
		{name: "absent, not configured", configured: "", want: ""},
		{name: "other properties only", objects: []runtime.Object{clusterProperty("id.k8s.io", "8f3c0b4e")},
			configured: "east", want: "east"},
		{name: "equal", objects: id("east"), configured: "east", want: "east"},
		{name: "not configured", objects: id("east"), configured: "", want: "east"},
		{name: "different", objects: id("west"), configured: "east",
			wantErr: []string{ClusterIDProperty, `"west"`, `"east"`}, config: true},
		{name: "invalid", objects: id("East_1"), configured: "east",
			wantErr: []string{ClusterIDProperty, `"East_1"`}, config: true},
		{name: "reserved", objects: id("global"), configured: "",
			wantErr: []string{`"global"`, "reserved"}, config: true},
		{name: "empty value", objects: id(""), configured: "east",
			wantErr: []string{ClusterIDProperty, `""`}, config: true},
		{name: "value not a string", objects: id(int64(7)), configured: "east",
			wantErr: []string{ClusterIDProperty, "spec.value"}, config: true},
		{
			// The API server's answer for a resource it does not serve.
			name:       "not served",
			react:      failGet(apierrors.NewGenericServerResponse(http.StatusNotFound, "get", gr, ClusterIDProperty, "", 0, true)),
			configured: "east", want: "east",
		},
		{
			name:       "no match",
			react:      failGet(&meta.NoResourceMatchError{PartialResource: ClusterPropertyResource}),
			configured: "east", want: "east",
		},
		{
			name:       "forbidden",
			react:      failGet(apierrors.NewForbidden(gr, ClusterIDProperty, errors.New("RBAC: access denied"))),
			configured: "east",
			wantErr:    []string{"reading ClusterProperty " + ClusterIDProperty, "forbidden"},
		},
		{
			name:       "unreachable",
			react:      failGet(errors.New("dial tcp 10.0.0.1:443: connect: connection refused")),
			configured: "east",
			wantErr:    []string{"reading ClusterProperty " + ClusterIDProperty, "connection refused"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
				map[schema.GroupVersionResource]string{ClusterPropertyResource: "ClusterPropertyList"}, tc.objects...)
			if tc.react != nil {
				tc.react(client)
			}
			got, err := ClusterID(context.Background(), client, tc.configured)
			if len(tc.wantErr) == 0 {
				require.NoError(t, err)
				assert.Equal(t, tc.want, got)
				return
			}
			require.Error(t, err)
			assert.Empty(t, got)
			for _, s := range tc.wantErr {
				assert.Contains(t, err.Error(), s)
			}
			assert.Equal(t, tc.config, errors.Is(err, ErrClusterID), "errors.Is(err, ErrClusterID)")
		})
	}
}

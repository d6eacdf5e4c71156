package link

import (
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes/fake"
)

func TestNewNamespaces(t *testing.T) {
	n, err := NewNamespaces([]string{"shop", "billing"}, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"billing", "shop"}, n.Allow, "sorted")
	assert.True(t, n.Allows("shop"))
	assert.False(t, n.Allows("kube-system"))
	assert.Equal(t, "only billing,shop", n.String())

	n, err = NewNamespaces(nil, []string{"tenant-b", "kube-system"})
	require.NoError(t, err)
	assert.True(t, n.Allows("shop"))
	assert.False(t, n.Allows("tenant-b"))
	assert.Equal(t, "all but kube-system,tenant-b", n.String())

	assert.True(t, Namespaces{}.All())
	assert.True(t, Namespaces{}.Allows("anything"))
	assert.Equal(t, "all", Namespaces{}.String())

	for _, tc := range []struct {
		allow, deny []string
		err         string
	}{
		{[]string{"Shop"}, nil, `allowed namespaces: "Shop" is not a namespace name`},
		{nil, []string{"a/b"}, `denied namespaces: "a/b" is not a namespace name`},
		{[]string{"a", "a"}, nil, `allowed namespaces: "a" given twice`},
		{[]string{"a"}, []string{"a"}, `namespace "a" is both allowed and denied`},
	} {
		_, err := NewNamespaces(tc.allow, tc.deny)
		assert.ErrorContains(t, err, tc.err, "%v %v", tc.allow, tc.deny)
	}
}

func TestSplitNamespaces(t *testing.T) {
	l, err := SplitNamespaces(" a, b ,c")
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b", "c"}, l)
	_, err = SplitNamespaces(" ")
	assert.ErrorContains(t, err, "empty list of namespaces")
	_, err = SplitNamespaces("a,,b")
	assert.ErrorContains(t, err, "an empty namespace name")
}

// A link Secret's annotations narrow its link; a change of them restarts
// the link as a new kubeconfig does, and a bad value is refused as
// invalid, the running link kept on what it had.
func TestSecretWatcherNamespaces(t *testing.T) {
	kc := kubeconfig(t, "https://west.example")
	s := secret("cluster-credentials-west", nil, kc)
	s.Annotations = map[string]string{labels.LinkDeniedNamespaces: "tenant-b, kube-system"}
	client := fake.NewClientset(s)
	rec, lg, _ := startWatcher(t, client, SecretWatcherOptions{})
	rec.waitCalls(t, "+west https://west.example (all but kube-system,tenant-b)")

	s = secret("cluster-credentials-west", nil, kc)
	s.Annotations = map[string]string{labels.LinkAllowedNamespaces: "shop"}
	update(t, client, s)
	rec.waitCalls(t, "+west https://west.example (all but kube-system,tenant-b)", "+west https://west.example (only shop)")

	s = secret("cluster-credentials-west", nil, kc)
	s.Annotations = map[string]string{labels.LinkAllowedNamespaces: "shop", labels.LinkDeniedNamespaces: "Shop"}
	update(t, client, s)
	lg.waitLog(t, `annotation`)
	assert.Eventually(t, func() bool {
		return lg.contains(`denied namespaces: "Shop" is not a namespace name`) && lg.contains("keeping the running link")
	}, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, []string{"linkerd-multicluster/cluster-credentials-west invalid"}, lg.refusals())

	// Leaving the annotations out is every namespace again.
	update(t, client, secret("cluster-credentials-west", nil, kc))
	rec.waitCalls(t, "+west https://west.example (all but kube-system,tenant-b)", "+west https://west.example (only shop)", "+west https://west.example")
}

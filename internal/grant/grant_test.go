package grant

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// docs decodes a YAML stream into JSON-shaped maps.
func docs(t *testing.T, stream []byte) []map[string]any {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(stream), 4096)
	var out []map[string]any
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		if m != nil {
			out = append(out, m)
		}
	}
}

// jsonShape returns obj as Clean makes it, in the shape JSON decodes to.
func jsonShape(t *testing.T, obj k8sruntime.Object) map[string]any {
	t.Helper()
	u, err := Clean(obj)
	require.NoError(t, err)
	b, err := json.Marshal(u)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}

// What `coredns-mc link` grants is what deploy/remote-link.yaml grants,
// object for object: an operator may use either, and unlink removes either.
func TestTargetObjectsAreRemoteLinkYAML(t *testing.T) {
	_, self, _, _ := runtime.Caller(0)
	manifest, err := os.ReadFile(filepath.Join(filepath.Dir(self), "..", "..", "deploy", "remote-link.yaml"))
	require.NoError(t, err)
	want := docs(t, manifest)

	tg := TargetObjects(Options{Cluster: "west"})
	var got []map[string]any
	for _, obj := range []k8sruntime.Object{tg.Namespace, tg.ServiceAccount, tg.ClusterRole, tg.ClusterRoleBinding} {
		got = append(got, jsonShape(t, obj))
	}
	assert.Equal(t, want, got)
}

func TestRulesAreReadOnly(t *testing.T) {
	for _, r := range Rules() {
		assert.ElementsMatch(t, []string{"list", "watch"}, r.Verbs, "%v", r.Resources)
		assert.NotContains(t, r.Resources, "secrets")
		assert.NotContains(t, r.Resources, "*")
	}
}

func TestTargetObjects(t *testing.T) {
	tg := TargetObjects(Options{Cluster: "west", Source: "east", Namespace: "links-in"})
	assert.Equal(t, "links-in", tg.Namespace.Name)
	assert.Equal(t, "links-in", tg.ServiceAccount.Namespace)
	assert.Equal(t, "links-in", tg.ClusterRoleBinding.Subjects[0].Namespace)
	assert.Equal(t, "mcmirror-link-token-east", tg.Token.Name)
	assert.Equal(t, "links-in", tg.Token.Namespace)
	assert.Equal(t, corev1.SecretTypeServiceAccountToken, tg.Token.Type)
	assert.Equal(t, ServiceAccount, tg.Token.Annotations[corev1.ServiceAccountNameKey])

	assert.Equal(t, "mcmirror-link-token", TargetObjects(Options{Cluster: "west"}).Token.Name)
	assert.Equal(t, "mcmirror", TargetObjects(Options{Cluster: "west"}).Token.Namespace)
}

func TestValidate(t *testing.T) {
	for _, o := range []Options{
		{Cluster: "west"},
		{Cluster: "west", Source: "east", Namespace: "mcmirror", LinkNamespace: "mcmirror-links"},
	} {
		assert.NoError(t, o.Validate(), "%+v", o)
	}
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{}, "no cluster name"},
		{Options{Cluster: "West"}, `invalid cluster name "West"`},
		{Options{Cluster: "global"}, "reserved"},
		{Options{Cluster: "a.b"}, `invalid cluster name "a.b"`},
		{Options{Cluster: "west", Source: "west"}, "source cluster's own name"},
		{Options{Cluster: "west", Source: "East"}, `source: invalid cluster name "East"`},
		{Options{Cluster: "west", Namespace: "a/b"}, `invalid namespace "a/b"`},
		{Options{Cluster: "west", LinkNamespace: "Links"}, `invalid namespace "Links"`},
	} {
		assert.ErrorContains(t, c.o.Validate(), c.want, "%+v", c.o)
	}
}

func TestToken(t *testing.T) {
	s := TargetObjects(Options{Cluster: "west"}).Token
	_, ok := Token(s)
	assert.False(t, ok, "not filled in yet")
	s.Data = map[string][]byte{"token": []byte("abc")}
	tok, ok := Token(s)
	assert.True(t, ok)
	assert.Equal(t, "abc", string(tok))
}

func TestOtherTokens(t *testing.T) {
	tok := func(name, sa string) corev1.Secret {
		return corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{corev1.ServiceAccountNameKey: sa}},
			Type:       corev1.SecretTypeServiceAccountToken,
		}
	}
	deleting := tok("mcmirror-link-token-gone", ServiceAccount)
	deleting.DeletionTimestamp = &metav1.Time{}
	opaque := tok("mcmirror-link-opaque", ServiceAccount)
	opaque.Type = corev1.SecretTypeOpaque
	secrets := []corev1.Secret{
		tok("mcmirror-link-token-paris", ServiceAccount),
		tok("mcmirror-link-token-east", ServiceAccount),
		tok("mcmirror-link-token", ServiceAccount),
		tok("other-token", "someone-else"),
		deleting, opaque,
	}
	assert.Equal(t, []string{"mcmirror-link-token", "mcmirror-link-token-paris"},
		OtherTokens(Options{Cluster: "west", Source: "east"}, secrets))
	assert.Equal(t, []string{"mcmirror-link-token-east", "mcmirror-link-token-paris"},
		OtherTokens(Options{Cluster: "west"}, secrets))
	assert.Empty(t, OtherTokens(Options{Cluster: "west"}, secrets[2:4]))
}

package link

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// kubeconfig returns a kubeconfig with one context per server, named
// ctx-<i>; the first is current.
func kubeconfig(t *testing.T, servers ...string) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	for i, s := range servers {
		n := "ctx-" + string(rune('a'+i))
		cfg.Clusters[n] = &clientcmdapi.Cluster{Server: s}
		cfg.AuthInfos[n] = &clientcmdapi.AuthInfo{Token: "token-" + n}
		cfg.Contexts[n] = &clientcmdapi.Context{Cluster: n, AuthInfo: n}
		if i == 0 {
			cfg.CurrentContext = n
		}
	}
	b, err := clientcmd.Write(*cfg)
	require.NoError(t, err)
	return b
}

func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, data, 0o600))
	return p
}

func TestLoadKubeconfig(t *testing.T) {
	good := writeFile(t, "good", kubeconfig(t, "https://west.example:6443", "https://paris.example:6443"))
	garbage := writeFile(t, "garbage", []byte("this: is: not: yaml: ["))
	empty := writeFile(t, "empty", []byte(""))

	tests := []struct {
		path, context string
		wantHost      string
		wantErr       string
	}{
		{good, "", "https://west.example:6443", ""},
		{good, "ctx-b", "https://paris.example:6443", ""},
		{good, "nope", "", `no context "nope" (it has "ctx-a", "ctx-b")`},
		{filepath.Join(t.TempDir(), "missing"), "", "", "no such file"},
		{garbage, "", "", "kubeconfig " + garbage},
		{empty, "", "", "kubeconfig " + empty},
		{"", "", "", "no kubeconfig file given"},
	}
	for _, tc := range tests {
		cfg, err := LoadKubeconfig(tc.path, tc.context)
		if tc.wantErr != "" {
			assert.ErrorContains(t, err, tc.wantErr, "LoadKubeconfig(%q, %q)", tc.path, tc.context)
		} else if assert.NoError(t, err, "LoadKubeconfig(%q, %q)", tc.path, tc.context) {
			assert.Equal(t, tc.wantHost, cfg.Host, "LoadKubeconfig(%q, %q)", tc.path, tc.context)
		}
	}
}

// A static link's kubeconfig is the operator's: its files are read, and a
// relative path is relative to the kubeconfig file.
func TestLoadKubeconfigRelativePaths(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "token"), []byte("from-file"), 0o600))
	cfg := hostile(func(u *clientcmdapi.AuthInfo, _ *clientcmdapi.Cluster) { u.Token, u.TokenFile = "", "token" })
	path := filepath.Join(dir, "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*cfg, path))
	rc, err := LoadKubeconfig(path, "")
	require.NoError(t, err)
	assert.Equal(t, "from-file", rc.BearerToken)
	assert.Equal(t, filepath.Join(dir, "token"), rc.BearerTokenFile)
}

func TestStaticConfigNamesTheLink(t *testing.T) {
	_, err := Static{Name: "west", Kubeconfig: filepath.Join(t.TempDir(), "missing")}.Config()
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "link west: "), "err = %v, want one naming the link", err)
}

func secret(name string, lbls map[string]string, kc []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "linkerd-multicluster", Labels: lbls},
		Type:       labels.LinkSecretType,
		Data:       map[string][]byte{labels.LinkSecretKey: kc},
	}
}

func TestFromSecret(t *testing.T) {
	kc := kubeconfig(t, "https://west.example:6443")
	wrongType := secret("cluster-credentials-west", nil, kc)
	wrongType.Type = corev1.SecretTypeOpaque
	noKey := secret("cluster-credentials-west", nil, nil)
	delete(noKey.Data, labels.LinkSecretKey)

	tests := []struct {
		name     string
		s        *corev1.Secret
		want     string
		wantHost string
		wantErr  string
	}{
		{"linkerd link name", secret("cluster-credentials-west", nil, kc), "west", "https://west.example:6443", ""},
		{"label wins over name", secret("cluster-credentials-west", map[string]string{labels.LinkClusterName: "paris"}, kc), "paris", "https://west.example:6443", ""},
		{"label only", secret("anything", map[string]string{labels.LinkClusterName: "west"}, kc), "west", "https://west.example:6443", ""},
		{"names no cluster", secret("anything", nil, kc), "", "", "names no cluster"},
		{"bad cluster name", secret("cluster-credentials-West", nil, kc), "", "", "invalid cluster name"},
		{"global is reserved", secret("cluster-credentials-global", nil, kc), "", "", "reserved"},
		{"wrong type", wrongType, "", "", "type is"},
		{"no kubeconfig key", noKey, "", "", `no "kubeconfig" key`},
		{"bad kubeconfig", secret("cluster-credentials-west", nil, []byte("{{{")), "", "", "bad kubeconfig"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name, cfg, err := FromSecret(tc.s, Allow{})
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, name)
			assert.Equal(t, tc.wantHost, cfg.Host)
		})
	}
}

func TestHandlerFuncs(t *testing.T) {
	var added, removed string
	h := HandlerFuncs{
		AddFunc:    func(n string, _ *rest.Config, _ Namespaces) { added = n },
		RemoveFunc: func(n string) { removed = n },
	}
	h.Add("west", nil, Namespaces{})
	h.Remove("paris")
	assert.Equal(t, []string{"west", "paris"}, []string{added, removed}, "added, removed")
	HandlerFuncs{}.Add("x", nil, Namespaces{}) // nil funcs are no-ops
	HandlerFuncs{}.Remove("x")
}

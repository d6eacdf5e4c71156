package grant

import (
	"strings"
	"testing"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/link"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"
)

var ca = []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")

func TestCheckServer(t *testing.T) {
	assert.NoError(t, CheckServer("https://10.0.0.1:6443"))
	assert.NoError(t, CheckServer("https://api.west.example"))
	for _, bad := range []string{"http://10.0.0.1:6443", "10.0.0.1:6443", "https://", "", "https://a b/%zz"} {
		assert.Error(t, CheckServer(bad), bad)
	}
}

// The Secret is what internal/link reads, as the plugin and the controller
// do: the same cluster name, server, CA and token.
func TestLinkSecretIsReadByLink(t *testing.T) {
	o := Options{Cluster: "west", Source: "east"}
	ep := Endpoint{Server: "https://10.0.0.1:6443", CAData: ca, TLSServerName: "api.west"}
	kc, err := Kubeconfig(o, ep, []byte("the-token"))
	require.NoError(t, err)
	s := LinkSecret(o, kc)

	assert.Equal(t, "cluster-credentials-west", s.Name)
	assert.Equal(t, "mcmirror-links", s.Namespace)
	// With nothing allowed beyond inline credentials over verified https:
	// the default of the plugin and the controller.
	name, cfg, err := link.FromSecret(s, link.Allow{})
	require.NoError(t, err)
	assert.Equal(t, "west", name)
	assert.Equal(t, "https://10.0.0.1:6443", cfg.Host)
	assert.Equal(t, "the-token", cfg.BearerToken)
	assert.Equal(t, ca, cfg.CAData)
	assert.Equal(t, "api.west", cfg.ServerName)
	assert.False(t, cfg.Insecure)
	assert.Nil(t, cfg.ExecProvider)
	assert.Nil(t, cfg.AuthProvider)

	// Everything is inline: no file the source's pods would lack.
	raw, err := clientcmd.Load(kc)
	require.NoError(t, err)
	require.NoError(t, link.Check(raw, link.Allow{}))
	for _, c := range raw.Clusters {
		assert.Empty(t, c.CertificateAuthority)
	}
	for _, a := range raw.AuthInfos {
		assert.Empty(t, a.TokenFile)
		assert.Empty(t, a.ClientCertificate)
		assert.Empty(t, a.ClientKey)
	}

	_, err = Kubeconfig(o, Endpoint{Server: "http://10.0.0.1:8080"}, []byte("t"))
	assert.ErrorContains(t, err, "want https")
	_, err = Kubeconfig(o, ep, nil)
	assert.ErrorContains(t, err, "no token")
}

// The printed YAML is the Secret, nothing more and nothing less, in a form
// kubectl takes.
func TestYAML(t *testing.T) {
	o := Options{Cluster: "west", LinkNamespace: "links"}
	kc, err := Kubeconfig(o, Endpoint{Server: "https://10.0.0.1:6443", CAData: ca}, []byte("tok"))
	require.NoError(t, err)
	want := LinkSecret(o, kc)
	out, err := YAML(want, LinkSecretRef(o))
	require.NoError(t, err)
	assert.NotContains(t, string(out), "creationTimestamp")
	assert.Contains(t, string(out), "type: "+labels.LinkSecretType)

	docs := strings.Split(string(out), "---\n")
	require.Len(t, docs, 2)
	var got corev1.Secret
	require.NoError(t, utilyaml.Unmarshal([]byte(docs[0]), &got))
	assert.Equal(t, *want, got)
	var ref corev1.Secret
	require.NoError(t, utilyaml.Unmarshal([]byte(docs[1]), &ref))
	assert.Equal(t, "cluster-credentials-west", ref.Name)
	assert.Equal(t, "links", ref.Namespace)
	assert.Empty(t, ref.Data)
}

func linkSecret(name, cluster, server string) corev1.Secret {
	s := corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "mcmirror-links"},
		Type:       corev1.SecretType(labels.LinkSecretType),
	}
	if cluster != "" {
		s.Labels = map[string]string{labels.LinkClusterName: cluster}
	}
	if server != "" {
		kc, _ := Kubeconfig(Options{Cluster: "x"}, Endpoint{Server: server}, []byte("t"))
		s.Data = map[string][]byte{labels.LinkSecretKey: kc}
	}
	return s
}

func TestSecretsOf(t *testing.T) {
	opaque := linkSecret("cluster-credentials-west", "", "")
	opaque.Type = corev1.SecretTypeOpaque
	secrets := []corev1.Secret{
		linkSecret("cluster-credentials-west", "", ""),   // by its name
		linkSecret("west-by-hand", "west", ""),           // by its label
		linkSecret("cluster-credentials-west2", "", ""),  // another cluster
		linkSecret("cluster-credentials-paris", "", ""),  // another cluster
		linkSecret("cluster-credentials-x", "paris", ""), // the label wins
		opaque,
	}
	assert.Equal(t, []string{"cluster-credentials-west", "west-by-hand"}, SecretsOf("west", secrets))
	assert.Equal(t, []string{"cluster-credentials-paris", "cluster-credentials-x"}, SecretsOf("paris", secrets))
	assert.Empty(t, SecretsOf("tokyo", secrets))
}

func TestCheckSource(t *testing.T) {
	const server = "https://10.0.0.1:6443"
	o := Options{Cluster: "west"}
	want := LinkSecret(o, nil)

	assert.NoError(t, CheckSource(want, server, nil))
	assert.NoError(t, CheckSource(want, server, []corev1.Secret{
		linkSecret("cluster-credentials-west", "west", server), // re-link: renew the token
		linkSecret("cluster-credentials-paris", "paris", "https://10.9.9.9"),
	}))
	assert.NoError(t, CheckSource(want, server, []corev1.Secret{linkSecret("cluster-credentials-west", "", "")}))

	err := CheckSource(want, server, []corev1.Secret{linkSecret("by-hand", "west", server)})
	assert.ErrorContains(t, err, `cluster "west" is already linked by Secret mcmirror-links/by-hand`)
	err = CheckSource(want, server, []corev1.Secret{linkSecret("cluster-credentials-west", "west", "https://10.9.9.9")})
	assert.ErrorContains(t, err, `links "west" to https://10.9.9.9, not https://10.0.0.1:6443`)
}

package grant

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"slices"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/link"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Endpoint is where, and as whom, the source cluster reaches the target's
// API server.
type Endpoint struct {
	// Server is the https URL of the target's API server, as the source
	// cluster's pods reach it.
	Server string
	// CAData is the PEM of the CA that signs the API server's certificate;
	// empty when a CA the system trusts signs it.
	CAData []byte
	// TLSServerName, when set, is the name checked in the API server's
	// certificate instead of the host of Server.
	TLSServerName string
}

// CheckServer returns an error unless server is an https URL with a host:
// a link's credentials never travel in the clear.
func CheckServer(server string) error {
	u, err := url.Parse(server)
	if err != nil {
		return fmt.Errorf("API server URL %q: %v", server, err)
	}
	if u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("API server URL %q: want https://HOST[:PORT]", server)
	}
	return nil
}

// Kubeconfig returns the kubeconfig of the link: the target's endpoint and
// the token, inline, with no file reference, no exec plugin and no
// insecure-skip-tls-verify, so that the link Secret holds all of it.
func Kubeconfig(o Options, ep Endpoint, token []byte) ([]byte, error) {
	if err := CheckServer(ep.Server); err != nil {
		return nil, err
	}
	if len(token) == 0 {
		return nil, errors.New("no token")
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[o.Cluster] = &clientcmdapi.Cluster{
		Server:                   ep.Server,
		CertificateAuthorityData: ep.CAData,
		TLSServerName:            ep.TLSServerName,
	}
	cfg.AuthInfos[ServiceAccount] = &clientcmdapi.AuthInfo{Token: string(token)}
	cfg.Contexts[o.Cluster] = &clientcmdapi.Context{Cluster: o.Cluster, AuthInfo: ServiceAccount}
	cfg.CurrentContext = o.Cluster
	return clientcmd.Write(*cfg)
}

// LinkSecret returns the link Secret for the source cluster, in the format
// `linkerd multicluster link` writes and internal/link reads: type
// mirror.linkerd.io/remote-kubeconfig, the cluster name in the label
// multicluster.linkerd.io/cluster-name and in the Secret's name, the
// kubeconfig under the key "kubeconfig".
func LinkSecret(o Options, kubeconfig []byte) *corev1.Secret {
	s := LinkSecretRef(o)
	s.Labels = map[string]string{labels.LinkClusterName: o.Cluster}
	s.Type = corev1.SecretType(labels.LinkSecretType)
	s.Data = map[string][]byte{labels.LinkSecretKey: kubeconfig}
	return s
}

// LinkSecretRef returns the link Secret with its identity alone: what
// `kubectl delete -f -` needs to unlink.
func LinkSecretRef(o Options) *corev1.Secret {
	o = o.WithDefaults()
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: o.LinkSecretName(), Namespace: o.LinkNamespace},
	}
}

// SecretsOf returns, sorted, the names of the link Secrets among secrets
// that link cluster, however they name it (label or name): every one must
// go to unlink it, or the source adopts the next.
func SecretsOf(cluster string, secrets []corev1.Secret) []string {
	var out []string
	for _, s := range linking(cluster, secrets) {
		out = append(out, s.Name)
	}
	slices.Sort(out)
	return out
}

// linking returns the link Secrets among secrets that link cluster.
func linking(cluster string, secrets []corev1.Secret) []*corev1.Secret {
	var out []*corev1.Secret
	for i := range secrets {
		s := &secrets[i]
		if name, ok := link.ClusterNameOf(s); ok && name == cluster && s.Type == corev1.SecretType(labels.LinkSecretType) {
			out = append(out, s)
		}
	}
	return out
}

// CheckSource returns an error when the source cluster, whose link Secrets
// are existing, cannot take want: another Secret links a cluster of the
// same name (the source would keep the first), or the Secret of that name
// links the name to another API server. Re-linking the same server (to
// renew the token, say) is fine.
func CheckSource(want *corev1.Secret, server string, existing []corev1.Secret) error {
	cluster := want.Labels[labels.LinkClusterName]
	for _, s := range linking(cluster, existing) {
		if s.Name != want.Name {
			return fmt.Errorf("cluster %q is already linked by Secret %s/%s: unlink it first, or choose another name", cluster, s.Namespace, s.Name)
		}
		if old := ServerOf(s.Data[labels.LinkSecretKey]); old != "" && old != server {
			return fmt.Errorf("link Secret %s/%s links %q to %s, not %s: unlink it first, or choose another name", s.Namespace, s.Name, cluster, old, server)
		}
	}
	return nil
}

// ServerOf returns the server of the current context of a kubeconfig, only
// parsing it, or "" when there is none.
func ServerOf(kubeconfig []byte) string {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return ""
	}
	if ctx := cfg.Contexts[cfg.CurrentContext]; ctx != nil {
		if c := cfg.Clusters[ctx.Cluster]; c != nil {
			return c.Server
		}
	}
	return ""
}

// YAML renders objects as one YAML stream for `kubectl apply -f -`; see
// Clean.
func YAML(objects ...runtime.Object) ([]byte, error) {
	enc := json.NewSerializerWithOptions(json.DefaultMetaFactory, nil, nil, json.SerializerOptions{Yaml: true})
	var buf bytes.Buffer
	for i, obj := range objects {
		u, err := Clean(obj)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			buf.WriteString("---\n")
		}
		if err := enc.Encode(u, &buf); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

// Clean returns obj without the fields the API types always carry and
// nobody set: a null creationTimestamp, an empty spec or status. It is what
// a server-side apply of obj sends, and what YAML prints.
func Clean(obj runtime.Object) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	unstructured.RemoveNestedField(m, "metadata", "creationTimestamp")
	for _, k := range []string{"spec", "status"} {
		if v, ok := m[k].(map[string]any); ok && len(v) == 0 {
			delete(m, k)
		}
	}
	return &unstructured.Unstructured{Object: m}, nil
}

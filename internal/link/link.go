// Package link describes the links from one cluster to the remote clusters it
// discovers Services in. A link is a cluster name and a *rest.Config; it
// comes from a kubeconfig file (a static link) or from a kubeconfig Secret in
// the local cluster, in the format `linkerd multicluster link` writes (a
// dynamic link, added, restarted and removed while the process runs).
//
// Both the DNS plugin and the mirror controller use this package. A
// kubeconfig from a Secret is data: FromSecret refuses exec plugins,
// auth-providers, file paths, plain http and unverified TLS unless allowed
// (policy.go), before any client is built.
package link

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/mcmirror/mcmirror/internal/labels"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Handler is told about links as they come and go: each through cfg,
// narrowed to the namespaces ns. Add is called again, without a Remove,
// when the kubeconfig or the namespaces of a running link change: the
// handler replaces the link, ideally without a gap in what it serves.
// Calls are made from one goroutine at a time.
type Handler interface {
	Add(name string, cfg *rest.Config, ns Namespaces)
	Remove(name string)
}

// HandlerFuncs adapts two functions to a Handler.
type HandlerFuncs struct {
	AddFunc    func(name string, cfg *rest.Config, ns Namespaces)
	RemoveFunc func(name string)
}

// Add calls AddFunc when it is set.
func (h HandlerFuncs) Add(name string, cfg *rest.Config, ns Namespaces) {
	if h.AddFunc != nil {
		h.AddFunc(name, cfg, ns)
	}
}

// Remove calls RemoveFunc when it is set.
func (h HandlerFuncs) Remove(name string) {
	if h.RemoveFunc != nil {
		h.RemoveFunc(name)
	}
}

// Static is a link given in configuration: NAME KUBECONFIG [CONTEXT],
// and the namespaces it is narrowed to.
type Static struct {
	Name       string
	Kubeconfig string
	Context    string // empty: the kubeconfig's current context
	Namespaces Namespaces
}

// Config loads the link's kubeconfig; see LoadKubeconfig.
func (s Static) Config() (*rest.Config, error) {
	cfg, err := LoadKubeconfig(s.Kubeconfig, s.Context)
	if err != nil {
		return nil, fmt.Errorf("link %s: %w", s.Name, err)
	}
	return cfg, nil
}

// LoadKubeconfig returns the REST config of context (the current context when
// empty) in the kubeconfig file path. The errors say which of the three
// usual mistakes it is: the file is missing, it is not a usable kubeconfig,
// or it has no such context. The file is the operator's configuration, not
// Secret data: it is not checked (see Check), and may use exec plugins and
// files, relative paths being relative to the file.
func LoadKubeconfig(path, context string) (*rest.Config, error) {
	if path == "" {
		return nil, errors.New("no kubeconfig file given")
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	raw, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	// Relative file paths in it are relative to the file, as kubectl has
	// them, not to our working directory.
	if err := clientcmd.ResolveLocalPaths(raw); err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	if context != "" {
		if _, ok := raw.Contexts[context]; !ok {
			return nil, fmt.Errorf("kubeconfig %s: no context %q (it has %s)", path, context, contextNames(raw.Contexts))
		}
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: context}
	cfg, err := clientcmd.NewNonInteractiveClientConfig(*raw, context, overrides, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return cfg, nil
}

func contextNames[V any](m map[string]V) string {
	if len(m) == 0 {
		return "no contexts"
	}
	names := slices.Sorted(maps.Keys(m))
	for i, n := range names {
		names[i] = strconv.Quote(n)
	}
	return strings.Join(names, ", ")
}

// ClusterNameOf returns the name of the cluster a link Secret links to: the
// value of its multicluster.linkerd.io/cluster-name label, or else its name
// with the cluster-credentials- prefix that `linkerd multicluster link`
// gives it removed. It returns false when the Secret names no cluster.
func ClusterNameOf(s *corev1.Secret) (string, bool) {
	if name := s.Labels[labels.LinkClusterName]; name != "" {
		return name, true
	}
	if name, ok := strings.CutPrefix(s.Name, labels.LinkSecretNamePrefix); ok && name != "" {
		return name, true
	}
	return "", false
}

// FromSecret returns the cluster name and the REST config of a link Secret:
// a Secret of type mirror.linkerd.io/remote-kubeconfig whose "kubeconfig"
// key holds a kubeconfig. Only its current context is used, and what that
// context's user and cluster may use is checked against allow (see Check)
// before any client configuration is built: a refused kubeconfig runs
// nothing, reads no file and sends nothing. ReasonOf tells why an error
// refused the Secret.
func FromSecret(s *corev1.Secret, allow Allow) (string, *rest.Config, error) {
	name, cfg, err := fromSecret(s, allow)
	if err != nil {
		return "", nil, fmt.Errorf("secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return name, cfg, nil
}

// fromSecret is FromSecret with errors that do not name the Secret.
func fromSecret(s *corev1.Secret, allow Allow) (string, *rest.Config, error) {
	if s.Type != labels.LinkSecretType {
		return "", nil, fmt.Errorf("type is %q, not %q", s.Type, labels.LinkSecretType)
	}
	name, ok := ClusterNameOf(s)
	if !ok {
		return "", nil, fmt.Errorf("names no cluster: no %s label and no %s prefix", labels.LinkClusterName, labels.LinkSecretNamePrefix)
	}
	if err := labels.ValidateClusterName(name); err != nil {
		return "", nil, err
	}
	data, ok := s.Data[labels.LinkSecretKey]
	if !ok || len(data) == 0 {
		return "", nil, fmt.Errorf("no %q key", labels.LinkSecretKey)
	}
	// Load only decodes: unlike LoadFromFile it resolves no relative
	// path, and nothing is read, run or dialled before the check.
	raw, err := clientcmd.Load(data)
	if err != nil {
		return "", nil, fmt.Errorf("bad kubeconfig: %w", err)
	}
	if raw.CurrentContext == "" {
		return "", nil, errors.New("bad kubeconfig: no current-context")
	}
	if c, ok := raw.Contexts[raw.CurrentContext]; !ok || c == nil || c.Cluster == "" {
		return "", nil, fmt.Errorf("bad kubeconfig: current-context %q does not exist or names no cluster", raw.CurrentContext)
	}
	// Only the current context's user and cluster are checked, and only
	// they are kept, so that nothing unchecked can be used.
	if err := clientcmdapi.MinifyConfig(raw); err != nil {
		return "", nil, fmt.Errorf("bad kubeconfig: %w", err)
	}
	if err := Check(raw, allow); err != nil {
		return "", nil, err
	}
	cfg, err := clientcmd.NewDefaultClientConfig(*raw, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return "", nil, fmt.Errorf("bad kubeconfig: %w", err)
	}
	return name, cfg, nil
}

// ReasonOf returns the reason an error of FromSecret refused a Secret for:
// the kubeconfig feature that is not allowed, or ReasonInvalid.
func ReasonOf(err error) Reason {
	var r *RefusedError
	if errors.As(err, &r) {
		return r.Reason
	}
	return ReasonInvalid
}

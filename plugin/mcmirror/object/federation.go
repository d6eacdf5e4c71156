package object

import (
	"slices"
	"strings"

	"github.com/mcmirror/mcmirror/internal/labels"

	corev1 "k8s.io/api/core/v1"
)

// Federation is what a federated Service's annotations say of its members.
type Federation struct {
	// Remote are the members in linked clusters, at most one per cluster
	// (the first listed), in the annotation's order.
	Remote []FedMember
	// Local is the name of the local member; "" for none.
	Local string
}

// FedMember is a member in a linked cluster: Service Service of the
// federated Service's namespace in cluster Cluster.
type FedMember struct{ Service, Cluster string }

// federation reads the members of s when it is a federated Service: a
// mirror without a cluster name, named <svc>-federated, with either
// annotation. Malformed entries (not <svc>@<cluster>, not DNS labels) are
// left out, and so is a second entry of a cluster.
func federation(s *corev1.Service) *Federation {
	base, ok := strings.CutSuffix(s.Name, "-"+labels.FederatedSuffix)
	if !ok || base == "" || s.Labels[labels.ClusterName] != "" {
		return nil
	}
	remote, hasRemote := s.Annotations[labels.RemoteDiscoveryAnnotation]
	local, hasLocal := s.Annotations[labels.LocalDiscoveryAnnotation]
	if !hasRemote && !hasLocal {
		return nil
	}
	f := &Federation{}
	for e := range strings.SplitSeq(remote, ",") {
		svc, cluster, ok := strings.Cut(strings.TrimSpace(e), "@")
		if !ok || !ValidLabel(svc) || !ValidLabel(cluster) ||
			slices.ContainsFunc(f.Remote, func(m FedMember) bool { return m.Cluster == cluster }) {
			continue
		}
		f.Remote = append(f.Remote, FedMember{Service: svc, Cluster: cluster})
	}
	if local = strings.TrimSpace(local); ValidLabel(local) {
		f.Local = local
	}
	return f
}

// MemberNames returns the names of the members of f, each once: the
// Services whose changes rebuild its group.
func (f *Federation) MemberNames() []string {
	var out []string
	if f.Local != "" {
		out = append(out, f.Local)
	}
	for _, m := range f.Remote {
		if !slices.Contains(out, m.Service) {
			out = append(out, m.Service)
		}
	}
	return out
}

// ValidLabel reports whether s, a name a cluster sent (a namespace, a
// hostname, a Service name), is one DNS label as Kubernetes allows it
// (RFC 1123): it cannot add a label or escape into another name.
func ValidLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

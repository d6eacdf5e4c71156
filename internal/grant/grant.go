// Package grant computes what a cluster grants to a cluster that links to
// it, and the link that results:
//
//   - in the target cluster (the one linked to): a ServiceAccount allowed to
//     list and watch Services and EndpointSlices and nothing else, the
//     ClusterRole and ClusterRoleBinding that allow it, and a long-lived
//     token Secret of that ServiceAccount;
//   - in the source cluster (the one that links): the link Secret, in the
//     format `linkerd multicluster link` writes, holding a kubeconfig with
//     that token.
//
// It is pure computation: `coredns-mc link` applies what it returns and
// `coredns-mc unlink` deletes it. The target objects are those of
// deploy/remote-link.yaml, token aside; a test keeps the two equal.
package grant

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/mcmirror/mcmirror/internal/labels"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

const (
	// DefaultNamespace holds the ServiceAccount and its tokens in the
	// target cluster.
	DefaultNamespace = "mcmirror"

	// DefaultLinkNamespace holds the link Secrets in the source cluster:
	// the namespace deploy/controller.yaml makes and watches.
	DefaultLinkNamespace = "mcmirror-links"

	// ServiceAccount is the name of the ServiceAccount that linked
	// clusters read the target as.
	ServiceAccount = "mcmirror-link"

	// Role is the name of the ClusterRole and of the ClusterRoleBinding
	// that grant the ServiceAccount its access.
	Role = "mcmirror-link"

	// TokenPrefix names the token Secrets: TokenPrefix alone for a source
	// cluster that is not named, TokenPrefix-<source> for one that is.
	TokenPrefix = "mcmirror-link-token"

	// TokenKey is the data key of the token in a ServiceAccount token
	// Secret, which kube-controller-manager's token controller fills.
	TokenKey = corev1.ServiceAccountTokenKey
)

// Options names one link: which cluster links which, and where the objects
// of each side live.
type Options struct {
	// Cluster is the name the source cluster gives the target: the link's
	// name, the suffix of its mirrors (<svc>-<cluster>).
	Cluster string
	// Source is the source cluster's own name, when known. It names the
	// token, so that each source's access is revoked on its own, and it
	// must differ from Cluster.
	Source string
	// Namespace holds the ServiceAccount and its token in the target
	// (default DefaultNamespace).
	Namespace string
	// LinkNamespace holds the link Secret in the source (default
	// DefaultLinkNamespace).
	LinkNamespace string
}

// WithDefaults returns o with its empty namespaces set to the defaults.
func (o Options) WithDefaults() Options {
	o.Namespace = cmp.Or(o.Namespace, DefaultNamespace)
	o.LinkNamespace = cmp.Or(o.LinkNamespace, DefaultLinkNamespace)
	return o
}

// Validate returns an error that says what is wrong with o, if anything.
func (o Options) Validate() error {
	if o.Cluster == "" {
		return fmt.Errorf("no cluster name")
	}
	if err := labels.ValidateClusterName(o.Cluster); err != nil {
		return err
	}
	if o.Source != "" {
		if err := labels.ValidateClusterName(o.Source); err != nil {
			return fmt.Errorf("source: %w", err)
		}
		if o.Source == o.Cluster {
			return fmt.Errorf("cluster name %q is the source cluster's own name: a link needs a name of its own", o.Cluster)
		}
	}
	for _, ns := range []string{o.Namespace, o.LinkNamespace} {
		if errs := validation.IsDNS1123Label(ns); ns != "" && len(errs) > 0 {
			return fmt.Errorf("invalid namespace %q: %s", ns, errs[0])
		}
	}
	return nil
}

// TokenName returns the name of the token Secret of the link.
func (o Options) TokenName() string {
	if o.Source == "" {
		return TokenPrefix
	}
	return TokenPrefix + "-" + o.Source
}

// LinkSecretName returns the name of the link Secret in the source:
// cluster-credentials-<cluster>, as `linkerd multicluster link` names it.
func (o Options) LinkSecretName() string { return labels.LinkSecretNamePrefix + o.Cluster }

// Rules are the whole access of a linked cluster's credentials: what the
// DNS plugin's and the controller's informers read from a remote cluster
// (plugin/mcmirror/controller.go, controller/controller.go). Both list and
// then watch; neither gets one object by name, nor writes. The gateway never
// reads another cluster's API server.
func Rules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
	}
}

// Target is what the target cluster grants, in the order it is applied.
type Target struct {
	Namespace          *corev1.Namespace
	ServiceAccount     *corev1.ServiceAccount
	ClusterRole        *rbacv1.ClusterRole
	ClusterRoleBinding *rbacv1.ClusterRoleBinding
	// Token is the ServiceAccount token Secret of this link; the token
	// controller writes the token into it.
	Token *corev1.Secret
}

// TargetObjects returns the objects to apply in the target cluster.
func TargetObjects(o Options) Target {
	o = o.WithDefaults()
	return Target{
		Namespace: &corev1.Namespace{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
			ObjectMeta: metav1.ObjectMeta{Name: o.Namespace},
		},
		ServiceAccount: &corev1.ServiceAccount{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
			ObjectMeta: metav1.ObjectMeta{Name: ServiceAccount, Namespace: o.Namespace},
		},
		ClusterRole: &rbacv1.ClusterRole{
			TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRole"},
			ObjectMeta: metav1.ObjectMeta{Name: Role},
			Rules:      Rules(),
		},
		ClusterRoleBinding: &rbacv1.ClusterRoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: Role},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: Role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: ServiceAccount, Namespace: o.Namespace}},
		},
		Token: &corev1.Secret{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{
				Name:        o.TokenName(),
				Namespace:   o.Namespace,
				Annotations: map[string]string{corev1.ServiceAccountNameKey: ServiceAccount},
			},
			Type: corev1.SecretTypeServiceAccountToken,
		},
	}
}

// Token returns the token that the token controller wrote into s, and
// false while it has not.
func Token(s *corev1.Secret) ([]byte, bool) {
	t := s.Data[TokenKey]
	return t, len(t) > 0
}

// OtherTokens returns, sorted, the names of the token Secrets of the
// ServiceAccount among secrets (the Secrets of its namespace) other than
// the link's own: the other clusters that still link with it, or tokens an
// operator made by hand. While there is one, unlink keeps the ServiceAccount
// and its role.
func OtherTokens(o Options, secrets []corev1.Secret) []string {
	var out []string
	for _, s := range secrets {
		if s.Type == corev1.SecretTypeServiceAccountToken && s.Annotations[corev1.ServiceAccountNameKey] == ServiceAccount &&
			s.Name != o.TokenName() && s.DeletionTimestamp == nil {
			out = append(out, s.Name)
		}
	}
	slices.Sort(out)
	return out
}

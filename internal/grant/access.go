package grant

import (
	"errors"
	"fmt"
	"net/url"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Access is one thing the caller of link or unlink must be allowed to do:
// checked before anything changes, so that a refusal names all that is
// missing and leaves nothing half done.
type Access struct{ Verb, Group, Resource, Namespace string }

// String reads as a permission: "create clusterroles.rbac.authorization.k8s.io",
// "get secrets in mcmirror".
func (a Access) String() string {
	r := a.Resource
	if a.Group != "" {
		r += "." + a.Group
	}
	if a.Namespace != "" {
		return fmt.Sprintf("%s %s in %s", a.Verb, r, a.Namespace)
	}
	return a.Verb + " " + r
}

// GrantAccess is what link does in the target: a server-side apply (create
// and patch) of every kind it writes, and a get of the token.
func GrantAccess(o Options) []Access {
	o = o.WithDefaults()
	var out []Access
	for _, v := range []string{"create", "patch"} {
		out = append(out, Access{v, "", "namespaces", ""},
			Access{v, "", "serviceaccounts", o.Namespace}, Access{v, "", "secrets", o.Namespace},
			Access{v, rbacv1.GroupName, "clusterroles", ""}, Access{v, rbacv1.GroupName, "clusterrolebindings", ""})
	}
	return append(out, Access{"get", "", "secrets", o.Namespace})
}

// RevokeAccess is what unlink does in the target: list the tokens, and
// delete what link wrote but the namespace.
func RevokeAccess(o Options) []Access {
	o = o.WithDefaults()
	return []Access{
		{"list", "", "secrets", o.Namespace}, {"delete", "", "secrets", o.Namespace},
		{"delete", "", "serviceaccounts", o.Namespace},
		{"delete", rbacv1.GroupName, "clusterroles", ""}, {"delete", rbacv1.GroupName, "clusterrolebindings", ""},
	}
}

// SourceAccess is verbs on the link Secrets of the source: list, create and
// patch to link; list and delete to unlink.
func SourceAccess(o Options, verbs ...string) []Access {
	o = o.WithDefaults()
	out := make([]Access, len(verbs))
	for i, v := range verbs {
		out[i] = Access{v, "", "secrets", o.LinkNamespace}
	}
	return out
}

// Describe says what an error of a call to an API server means, on one
// line: credentials refused, forbidden (with the server's message), another
// answer of the server, or the server unreachable (with the network error,
// not the URL it wraps).
func Describe(err error) string {
	var status apierrors.APIStatus
	switch {
	case apierrors.IsUnauthorized(err):
		return "the credentials are refused (401 Unauthorized)"
	case apierrors.IsForbidden(err):
		return "forbidden: " + err.Error()
	case errors.As(err, &status):
		return err.Error()
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return "unreachable: " + err.Error()
}

package grant

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestAccess(t *testing.T) {
	o := Options{Cluster: "west"}
	strs := func(as []Access) []string {
		var out []string
		for _, a := range as {
			out = append(out, a.String())
		}
		return out
	}
	assert.Equal(t, []string{
		"create namespaces", "create serviceaccounts in mcmirror", "create secrets in mcmirror",
		"create clusterroles.rbac.authorization.k8s.io", "create clusterrolebindings.rbac.authorization.k8s.io",
		"patch namespaces", "patch serviceaccounts in mcmirror", "patch secrets in mcmirror",
		"patch clusterroles.rbac.authorization.k8s.io", "patch clusterrolebindings.rbac.authorization.k8s.io",
		"get secrets in mcmirror",
	}, strs(GrantAccess(o)))
	assert.Equal(t, []string{
		"list secrets in links-in", "delete secrets in links-in", "delete serviceaccounts in links-in",
		"delete clusterroles.rbac.authorization.k8s.io", "delete clusterrolebindings.rbac.authorization.k8s.io",
	}, strs(RevokeAccess(Options{Cluster: "west", Namespace: "links-in"})))
	assert.Equal(t, []Access{{"list", "", "secrets", "mcmirror-links"}, {"delete", "", "secrets", "mcmirror-links"}},
		SourceAccess(o, "list", "delete"))
}

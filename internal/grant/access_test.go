package grant

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestAccess(t *testing.T) {
	o := Options{Cluster: "west"}
	var got []string
	for _, a := range GrantAccess(o) {
		got = append(got, a.String())
	}
	assert.Equal(t, []string{
		"create namespaces", "create serviceaccounts in mcmirror", "create secrets in mcmirror",
		"create clusterroles.rbac.authorization.k8s.io", "create clusterrolebindings.rbac.authorization.k8s.io",
		"patch namespaces", "patch serviceaccounts in mcmirror", "patch secrets in mcmirror",
		"patch clusterroles.rbac.authorization.k8s.io", "patch clusterrolebindings.rbac.authorization.k8s.io",
		"get secrets in mcmirror",
	}, got)
	got = nil
	for _, a := range RevokeAccess(Options{Cluster: "west", Namespace: "links-in"}) {
		got = append(got, a.String())
	}
	assert.Equal(t, []string{
		"list secrets in links-in", "delete secrets in links-in", "delete serviceaccounts in links-in",
		"delete clusterroles.rbac.authorization.k8s.io", "delete clusterrolebindings.rbac.authorization.k8s.io",
	}, got)
	assert.Equal(t, []Access{{"list", "", "secrets", "mcmirror-links"}, {"delete", "", "secrets", "mcmirror-links"}},
		SourceAccess(o, "list", "delete"))
}

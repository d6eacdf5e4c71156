package mcmirror

import (
	"testing"

	"github.com/mcmirror/mcmirror/internal/link"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// allowed_namespaces and denied_namespaces narrow a static link; every
// mistake stops start-up with one error naming the line.
func TestParseLinkNamespaces(t *testing.T) {
	const head = "mcmirror {\ncluster east\nlink west /w.kubeconfig\nlink paris /p.kubeconfig\n"
	c := controller(head + "denied_namespaces west tenant-b kube-system\nallowed_namespaces paris shop\n}")
	cfg, err := parse(c)
	require.NoError(t, err)
	assert.Equal(t, link.Namespaces{Deny: []string{"kube-system", "tenant-b"}}, cfg.links[0].Namespaces)
	assert.Equal(t, link.Namespaces{Allow: []string{"shop"}}, cfg.links[1].Namespaces)

	for i, tc := range []struct {
		input     string
		shouldErr string
	}{
		{"denied_namespaces west\n}", "Wrong argument count"},
		{"denied_namespaces west Shop\n}", `Testfile:5 - Error during parsing: denied_namespaces west: denied namespaces: "Shop" is not a namespace name`},
		{"denied_namespaces west a\ndenied_namespaces west b\n}", `Testfile:6 - Error during parsing: denied_namespaces for "west" given twice`},
		{"allowed_namespaces west a\ndenied_namespaces west a\n}", `Testfile:6 - Error during parsing: denied_namespaces west: namespace "a" is both allowed and denied`},
		{"allowed_namespaces west a a\n}", `allowed namespaces: "a" given twice`},
		{"allowed_namespaces tokyo a\n}", `Testfile:5 - Error during parsing: allowed_namespaces and denied_namespaces: no link named "tokyo" (those of a link Secret are its annotations mcmirror.dev/allowed-namespaces and mcmirror.dev/denied-namespaces)`},
		{"allowed_namespaces West_1 a\n}", "allowed_namespaces: invalid cluster name"},
	} {
		parsed(t, i, head+tc.input, tc.shouldErr)
	}
}

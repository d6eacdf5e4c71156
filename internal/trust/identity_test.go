package trust

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ClusterOf reads the cluster from the one spiffe URI SAN.
func TestClusterOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		uris []string
		want string // empty: an error
	}{
		{"identity", []string{"spiffe://mcmirror.dev/cluster/west"}, "west"},
		{"other URIs ignored", []string{"https://example.org/x", "spiffe://mcmirror.dev/cluster/west"}, "west"},
		{"none", nil, ""},
		{"two identities", []string{"spiffe://mcmirror.dev/cluster/west", "spiffe://mcmirror.dev/cluster/east"}, ""},
		{"other trust domain", []string{"spiffe://example.org/cluster/west"}, ""},
		{"not a cluster", []string{"spiffe://mcmirror.dev/ns/default/sa/gateway"}, ""},
		{"nested path", []string{"spiffe://mcmirror.dev/cluster/west/extra"}, ""},
		{"empty name", []string{"spiffe://mcmirror.dev/cluster/"}, ""},
		{"not a DNS label", []string{"spiffe://mcmirror.dev/cluster/West_1"}, ""},
		{"reserved name", []string{"spiffe://mcmirror.dev/cluster/global"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ClusterOf(certWith(t, "", tc.uris...), DefaultTrustDomain)
			if tc.want == "" {
				assert.Error(t, err, "got %q", got)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	assert.Equal(t, "spiffe://mcmirror.dev/cluster/west", Identity(DefaultTrustDomain, "west").String())
}

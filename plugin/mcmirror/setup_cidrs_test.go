package mcmirror

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParseCIDRs(t *testing.T) {
	tests := []struct {
		args      []string
		shouldErr string
	}{
		{[]string{"10.1.0.0/16"}, ""},
		{[]string{"10.1.0.0/16", "fd00:1::/64", "192.0.2.7/32"}, ""},
		{[]string{"10.1.0.5"}, `"10.1.0.5" is not a CIDR`},
		{[]string{"10.1.2.3/16"}, "host bits set; did you mean 10.1.0.0/16?"},
		{[]string{"10.1.0.0/33"}, "not a CIDR"},
		{[]string{"pods"}, "not a CIDR"},
	}
	for _, tc := range tests {
		got, err := parseCIDRs(tc.args)
		if tc.shouldErr == "" {
			assert.False(t, err != nil || len(got) != len(tc.args), "%v: %v, %v", tc.args, got, err)
			continue
		}
		assert.ErrorContains(t, err, tc.shouldErr, "%v", tc.args)
	}
}

func TestParseAllowedCIDRs(t *testing.T) {
	tests := []struct {
		input     string
		shouldErr string
	}{
		{"mcmirror {\ncluster east\nlink west /w.kubeconfig\nallowed_cidrs west 10.1.0.0/16 fd00:1::/64\n}", ""},
		// A link Secret may bring a cluster not named in the Corefile.
		{"mcmirror {\ncluster east\nlink_secrets linkerd-multicluster\nallowed_cidrs paris 10.2.0.0/16\n}", ""},
		{"mcmirror {\ncluster east\nlink west /w.kubeconfig\nallowed_cidrs west\n}", "Wrong argument count"},
		{"mcmirror {\ncluster east\nlink west /w.kubeconfig\nallowed_cidrs west 10.1.2.3/16\n}", "Testfile:4 - Error during parsing: allowed_cidrs west: \"10.1.2.3/16\" has host bits set"},
		{"mcmirror {\ncluster east\nlink west /w.kubeconfig\nallowed_cidrs west 10.1.0.0/16\nallowed_cidrs west 10.2.0.0/16\n}", "Testfile:5 - Error during parsing: allowed_cidrs for \"west\" given twice"},
		{"mcmirror {\ncluster east\nlink west /w.kubeconfig\nallowed_cidrs wst 10.1.0.0/16\n}", "Testfile:4 - Error during parsing: allowed_cidrs: no link named \"wst\""},
		{"mcmirror {\ncluster east\nlink west /w.kubeconfig\nallowed_cidrs east 10.0.0.0/16\n}", "Testfile:4 - Error during parsing: allowed_cidrs: \"east\" is this cluster"},
		{"mcmirror {\ncluster east\nlink west /w.kubeconfig\nallowed_cidrs West_1 10.1.0.0/16\n}", "allowed_cidrs: "},
	}
	for i, tc := range tests {
		if cfg := parsed(t, i, tc.input, tc.shouldErr); cfg != nil && len(cfg.allowed.lists) != 1 {
			t.Errorf("%q: lists %v", tc.input, cfg.allowed.lists)
		}
	}
}

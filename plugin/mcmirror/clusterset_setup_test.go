package mcmirror

import (
	"slices"
	"testing"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseClusterSet(t *testing.T) {
	tests := []struct {
		input string
		keys  []string // server block keys
		want  []string // the clusterset zones
		err   string   // a part of the error; empty: no error
	}{
		// Replace mode: one stanza, both zones.
		{"mcmirror cluster.local clusterset.local in-addr.arpa ip6.arpa {\ncluster east\nclusterset\n}", nil, []string{"clusterset.local."}, ""},
		// Forward mode: a server block of clusterset.local alone.
		{"mcmirror {\ncluster east\nclusterset\n}", []string{"clusterset.local.:53"}, []string{"clusterset.local."}, ""},
		{"mcmirror {\ncluster east\nclusterset clusterset.local\n}", []string{"clusterset.local.:53"}, []string{"clusterset.local."}, ""},
		{"mcmirror cluster.local Example.ORG {\ncluster east\nclusterset example.org.\n}", nil, []string{"example.org."}, ""},
		{"mcmirror cluster.local clusterset.local example.org {\ncluster east\nclusterset example.org clusterset.local\n}", nil, []string{"example.org.", "clusterset.local."}, ""},
		// Without it, none.
		{"mcmirror cluster.local clusterset.local {\ncluster east\n}", nil, nil, ""},

		{"mcmirror {\ncluster east\nclusterset\n}", nil, nil, "Testfile:3 - Error during parsing: clusterset: clusterset.local. is not one of mcmirror's zones (cluster.local.)"},
		{"mcmirror cluster.local clusterset.local {\ncluster east\nclusterset example.org\n}", nil, nil, "clusterset: example.org. is not one of mcmirror's zones"},
		{"mcmirror cluster.local in-addr.arpa {\ncluster east\nclusterset in-addr.arpa\n}", nil, nil, "clusterset: in-addr.arpa. is a reverse zone"},
		{"mcmirror cluster.local clusterset.local {\ncluster east\nclusterset\nclusterset\n}", nil, nil, "Testfile:4 - Error during parsing: clusterset given twice"},
		{"mcmirror cluster.local clusterset.local {\ncluster east\nclusterset clusterset.local clusterset.local.\n}", nil, nil, "clusterset: clusterset.local. given twice"},
		{"mcmirror clusterset.local in-addr.arpa {\ncluster east\nclusterset 10.0.0.0/8\n}", nil, nil, "clusterset"},
	}
	for i, tc := range tests {
		if cfg := parsed(t, i, tc.input, tc.err, tc.keys...); cfg != nil && !slices.Equal(cfg.clusterset, tc.want) {
			t.Errorf("test %d: clusterset %q, want %q", i, cfg.clusterset, tc.want)
		}
	}
}

// The Corefile's clusterset reaches the plugin: its zone answers the
// specification's names, and the local derived Services are watched.
func TestSetupClusterSet(t *testing.T) {
	kc := writeKubeconfig(t, "east")
	corefile := "mcmirror cluster.local clusterset.local in-addr.arpa {\ncluster east\nkubeconfig " + kc + "\nclusterset\n}"
	c := controller(corefile, ".:53")
	require.NoError(t, setup(c))
	m := dnsserver.GetConfig(c).Plugin[0](nil).(*MCMirror)
	assert.Equal(t, []bool{false, true, false}, m.clusterset, "clusterset zones of %v", m.Zones)
	// The index answers the specification's names in clusterset.local,
	// and not in cluster.local.
	m.Next = fromNext
	runCase(t, m, testCase("dns-version.clusterset.local.", dns.TypeTXT, txt("dns-version.clusterset.local.", "1.0.0")), false)
	runCase(t, m, next("dns-version.cluster.local."), false)
	// The watches are told to watch the derived Services (package watch
	// tests that they then do).
	c = controller(corefile, ".:53")
	cfg, err := parse(c)
	require.NoError(t, err)
	assert.True(t, cfg.options().watchOptions().ClusterSet, "the derived Services are not watched")
}

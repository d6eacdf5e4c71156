package mcmirror

import (
	"net/url"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/stretchr/testify/require"

	"github.com/miekg/dns"
	"k8s.io/apimachinery/pkg/util/validation"
)

// fuzzBlockKeys are server block keys as CoreDNS gives them to a plugin:
// the fuzzer picks one; what the Corefile's own parser accepts as a key is
// not parse's business.
var fuzzBlockKeys = [][]string{
	{"cluster.local.:53"},
	{".:53"},
	{"cluster.local.:53", "in-addr.arpa.:53"},
	{"example.org.:1053", "10.0.0.0/8:53"},
}

// parseSeeds are mcmirror stanzas to start from: every property, valid
// and not, and the stanzas of README.md's corefile examples.
func parseSeeds(f *testing.F) []string {
	f.Helper()
	seeds := []string{
		"mcmirror {\ncluster east\n}",
		`mcmirror cluster.local in-addr.arpa {
			cluster east
			kubeconfig /etc/east.kubeconfig east-admin
			link west /etc/west.kubeconfig
			link paris /etc/fleet.kubeconfig paris-admin
			link_secrets linkerd-multicluster mcmirror.io/link in (yes, true)
			allow_insecure_kubeconfig exec files http
			export_selector example.com/export=yes
			ttl 30
			startup_timeout 1m
			stale_max_age 0s
			fallthrough example.org
			gateway_health http://mcmirror-gateway.mcmirror.svc:9155/peers 500ms
			allowed_cidrs west 10.0.0.0/8 fd00::/8
			allowed_cidrs paris 192.0.2.0/24
		}`,
		"mcmirror 10.0.0.0/8 cluster.local {\ncluster east\nlink_secrets ns\nallowed_cidrs paris 10.1.0.0/16\n}",
		"mcmirror {\ncluster east\nlink west a\nlink west b\n}",
		"mcmirror {\nlink east a\ncluster east\n}",
		"mcmirror {\ncluster east\nallowed_cidrs east 10.0.0.0/8\n}",
		"mcmirror {\ncluster east\nallow_insecure_kubeconfig exec\n}",
		"mcmirror {\ncluster east\nttl 3601\n}",
		"mcmirror {\ncluster east\nstartup_timeout -1s\n}",
		"mcmirror {\ncluster east\ngateway_health http://gw:port/peers\n}",
		"mcmirror {\ncluster east\nfallthrough\nfallthrough a.example\n}",
		"mcmirror . {\ncluster east\n}",
		"mcmirror in-addr.arpa {\ncluster east\n}",
		"mcmirror {\ncluster east\n}\nmcmirror {\ncluster east\n}",
		"mcmirror {\ncluster east\nexport_selector in in in\n}",
		"mcmirror cluster.local clusterset.local in-addr.arpa {\ncluster east\nclusterset\n}",
		"mcmirror {\ncluster east\nclusterset cluster.local example.org\n}",
		"mcmirror {\ncluster east\n{\n}\n}",
		"mcmirror",
	}
	readme, err := os.ReadFile("README.md")
	require.NoError(f, err)
	for _, b := range corefileBlock.FindAllStringSubmatch(string(readme), -1) {
		if s := stanza(b[1]); s != "" {
			seeds = append(seeds, s)
		}
	}
	return seeds
}

// stanza returns the text of the first mcmirror stanza of a Corefile, up
// to its closing brace.
func stanza(corefile string) string {
	i := strings.Index(corefile, pluginName+" ")
	if i < 0 {
		return ""
	}
	depth := 0
	for j := i; j < len(corefile); j++ {
		switch corefile[j] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return corefile[i : j+1]
			}
		}
	}
	return ""
}

// FuzzParse feeds any text, as the tokens of a Corefile's mcmirror
// stanza, to parse, and checks that nothing panics, that the same text is
// parsed the same way twice, that every error names its place in the
// Corefile, and that a configuration accepted holds only what each
// property allows: a valid cluster name, zones that are domain names with
// one outside the reverse zones and none the root, unique valid links
// none of which is this cluster, a TTL in range, positive durations, a
// gateway_health URL over http(s) with a host, allowed_cidrs only for
// clusters that can be linked, allow_insecure_kubeconfig only with
// link_secrets.
func FuzzParse(f *testing.F) {
	for _, s := range parseSeeds(f) {
		for k := range fuzzBlockKeys {
			f.Add(s, uint8(k))
		}
	}
	f.Fuzz(func(t *testing.T, input string, key uint8) {
		if len(input) > 8<<10 {
			return // a stanza is short; size is not the point
		}
		keys := fuzzBlockKeys[int(key)%len(fuzzBlockKeys)]
		parseOnce := func() (*config, error) {
			c := caddy.NewTestController("dns", input)
			c.ServerBlockKeys = slices.Clone(keys)
			return parse(c)
		}
		cfg, err := parseOnce()
		again, errAgain := parseOnce()
		require.False(t, (err == nil) != (errAgain == nil) || (err != nil && err.Error() != errAgain.Error()), "parsed twice: %v, then %v", err, errAgain)
		if err != nil {
			require.True(t, strings.Contains(err.Error(), "Testfile:"), "the error does not name its place in the Corefile: %v", err)
			return
		}
		if cfg == nil {
			return // no mcmirror token at all: setup is never called so
		}
		require.True(t, reflect.DeepEqual(cfg, again), "parsed twice, two configurations:\n%+v\n%+v", cfg, again)
		checkConfig(t, cfg)
	})
}

// checkConfig checks what an accepted configuration holds.
func checkConfig(t *testing.T, cfg *config) {
	t.Helper()
	require.NoError(t, labels.ValidateClusterName(cfg.cluster), "accepted cluster")
	require.True(t, slices.ContainsFunc(cfg.zones, func(z string) bool { return !isReverse(z) }), "zones %q: none outside the reverse zones", cfg.zones)
	for _, z := range cfg.zones {
		_, ok := dns.IsDomainName(z)
		require.False(t, !ok || z == "." || !dns.IsFqdn(z), "zone %q accepted", z)
	}
	require.Len(t, cfg.linksAt, len(cfg.links), "the places of the links")
	names := map[string]bool{}
	for _, l := range cfg.links {
		require.NoError(t, labels.ValidateClusterName(l.Name), "link accepted")
		require.False(t, l.Name == cfg.cluster || names[l.Name], "link %q accepted: this cluster's name, or twice", l.Name)
		require.NotEmpty(t, l.Kubeconfig, "link %q without a kubeconfig", l.Name)
		names[l.Name] = true
	}
	require.False(t, cfg.ttl > 3600, "ttl %d", cfg.ttl)
	require.False(t, cfg.startupTimeout <= 0 || cfg.staleMaxAge < 0, "startup_timeout %s, stale_max_age %s", cfg.startupTimeout, cfg.staleMaxAge)
	if cfg.secrets {
		errs := validation.IsDNS1123Label(cfg.secretsNS)
		require.False(t, len(errs) > 0, "link_secrets namespace %q: %v", cfg.secretsNS, errs)
	} else if cfg.secretsNS != "" || cfg.secretsSel != nil {
		t.Fatalf("link_secrets settings without link_secrets: %q %v", cfg.secretsNS, cfg.secretsSel)
	}
	require.False(t, cfg.allowAt != "" && !cfg.secrets, "allow_insecure_kubeconfig without link_secrets")
	require.False(t, cfg.allowAt == "" && cfg.allow != (link.Allow{}), "allowed %s without allow_insecure_kubeconfig", cfg.allow)
	require.False(t, cfg.exportSel != nil && cfg.exportSel.Empty(), "an export_selector that selects everything")
	if cfg.healthURL != "" {
		u, err := url.Parse(cfg.healthURL)
		require.False(t, err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "", "gateway_health %q accepted", cfg.healthURL)
		require.False(t, cfg.healthInterval <= 0, "gateway_health interval %s", cfg.healthInterval)
	}
	for name, prefixes := range cfg.allowed.lists {
		require.False(t, name == cfg.cluster || (!names[name] && !cfg.secrets), "allowed_cidrs for %q, which cannot be linked", name)
		require.NotEmpty(t, prefixes, "allowed_cidrs for %q without a prefix", name)
		for _, p := range prefixes {
			require.False(t, !p.IsValid() || p.Masked() != p || p.Addr().Zone() != "", "allowed_cidrs for %q: prefix %v accepted", name, p)
		}
	}
	for i, z := range cfg.clusterset {
		require.False(t, !slices.Contains(cfg.zones, z) || isReverse(z) || slices.Contains(cfg.clusterset[:i], z), "clusterset zone %q accepted, zones %q", z, cfg.zones)
	}
	for _, z := range cfg.fall.Zones {
		require.False(t, z != "." && !dns.IsFqdn(plugin.Name(z).Normalize()), "fallthrough zone %q", z)
	}
}

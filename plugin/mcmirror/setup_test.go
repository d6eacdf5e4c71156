package mcmirror

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/caddy/caddyfile"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func TestParse(t *testing.T) {
	tests := []struct {
		input     string
		shouldErr string // a part of the error; empty: no error
		check     func(*testing.T, *config)
	}{
		// Defaults.
		{"mcmirror {\ncluster east\n}", "", func(t *testing.T, c *config) {
			assert.False(t, c.cluster != "east" || c.ttl != 5 || c.startupTimeout != 5*time.Second, "cluster %q ttl %d startup_timeout %s", c.cluster, c.ttl, c.startupTimeout)
			assert.Equal(t, []string{"cluster.local."}, c.zones, "zones, want the server block's")
			assert.False(t, c.exportSel != nil || c.secrets || len(c.links) != 0 || c.kubeconfig != "", "unexpected settings %+v", c)
			assert.True(t, c.fall.Equal(fall.F{}), "fallthrough %v", c.fall)
			assert.Empty(t, c.healthURL, "gateway_health without the option")
			assert.Equal(t, time.Hour, c.staleMaxAge, "stale_max_age by default")
		}},
		// Every property.
		{`mcmirror cluster.local in-addr.arpa {
			cluster east
			kubeconfig /etc/east.kubeconfig east-admin
			link west /etc/west.kubeconfig
			link paris /etc/fleet.kubeconfig paris-admin
			link_secrets linkerd-multicluster mcmirror.io/link in (yes, true)
			export_selector example.com/export=yes
			ttl 30
			startup_timeout 1m
			fallthrough example.org
			gateway_health http://mcmirror-gateway.mcmirror.svc:9155/peers 500ms
		}`, "", func(t *testing.T, c *config) {
			assert.False(t, c.healthURL != "http://mcmirror-gateway.mcmirror.svc:9155/peers" || c.healthInterval != 500*time.Millisecond, "gateway_health %q %s", c.healthURL, c.healthInterval)
			assert.Equal(t, []string{"cluster.local.", "in-addr.arpa."}, c.zones, "zones")
			assert.False(t, c.kubeconfig != "/etc/east.kubeconfig" || c.context != "east-admin", "kubeconfig %q %q", c.kubeconfig, c.context)
			if len(c.links) != 2 || c.links[0].Name != "west" || c.links[0].Kubeconfig != "/etc/west.kubeconfig" || c.links[0].Context != "" ||
				c.links[1].Name != "paris" || c.links[1].Context != "paris-admin" {
				t.Errorf("links %+v", c.links)
			}
			assert.False(t, !c.secrets || c.secretsNS != "linkerd-multicluster" || c.secretsSel.String() != "mcmirror.io/link in (true,yes)", "link_secrets %t %q %v", c.secrets, c.secretsNS, c.secretsSel)
			assert.Equal(t, "example.com/export=yes", c.exportSel.String(), "export_selector")
			assert.False(t, c.ttl != 30 || c.startupTimeout != time.Minute, "ttl %d startup_timeout %s", c.ttl, c.startupTimeout)
			assert.True(t, c.fall.Equal(fall.F{Zones: []string{"example.org."}}), "fallthrough %v", c.fall)
		}},
		{"mcmirror {\ncluster east\nlink_secrets linkerd\nfallthrough\nttl 0\n}", "", func(t *testing.T, c *config) {
			assert.False(t, c.secretsSel != nil || c.ttl != 0 || !c.fall.Equal(fall.Root), "selector %v ttl %d fall %v", c.secretsSel, c.ttl, c.fall)
		}},
		{"mcmirror {\ncluster east\nttl 3600\nexport_selector mirror.linkerd.io/exported in (true, remote-discovery)\n}", "", func(t *testing.T, c *config) {
			want, _ := k8slabels.Parse(labels.DefaultExportSelector)
			assert.False(t, c.ttl != 3600 || c.exportSel.String() != want.String(), "ttl %d selector %v", c.ttl, c.exportSel)
		}},

		{"mcmirror {\ncluster east\ngateway_health https://gw.example:9155/peers\n}", "", func(t *testing.T, c *config) {
			assert.False(t, c.healthURL != "https://gw.example:9155/peers" || c.healthInterval != 2*time.Second, "gateway_health %q %s, want the default interval 2s", c.healthURL, c.healthInterval)
		}},

		{"mcmirror {\ncluster east\nlink_secrets linkerd\nallow_insecure_kubeconfig exec files\n}", "", func(t *testing.T, c *config) {
			assert.Equal(t, link.Allow{Exec: true, Files: true}, c.allow, "allow_insecure_kubeconfig")
			assert.Equal(t, "Testfile:4", c.allowAt, "the place of allow_insecure_kubeconfig")
		}},
		{"mcmirror {\ncluster east\nlink_secrets linkerd\nallow_insecure_kubeconfig auth-provider http skip-tls-verify\n}", "", func(t *testing.T, c *config) {
			assert.Equal(t, link.Allow{AuthProvider: true, HTTP: true, SkipTLSVerify: true}, c.allow, "allow_insecure_kubeconfig")
		}},
		{"mcmirror {\ncluster east\nlink_secrets linkerd\n}", "", func(t *testing.T, c *config) {
			assert.Zero(t, c.allow, "allow_insecure_kubeconfig without the option")
		}},

		// Errors.
		{"mcmirror", "no cluster", nil},
		{"mcmirror {\n}", "no cluster", nil},
		{"mcmirror {\ncluster\n}", "Wrong argument count", nil},
		{"mcmirror {\ncluster east west\n}", "Wrong argument count", nil},
		{"mcmirror {\ncluster East\n}", "invalid cluster name", nil},
		{"mcmirror {\ncluster global\n}", "reserved", nil},
		{"mcmirror {\ncluster east\ncluster west\n}", "cluster given twice", nil},
		{"mcmirror {\ncluster east\nkubeconfig\n}", "Wrong argument count", nil},
		{"mcmirror {\ncluster east\nkubeconfig a b c\n}", "Wrong argument count", nil},
		{"mcmirror {\ncluster east\nkubeconfig a\nkubeconfig b\n}", "kubeconfig given twice", nil},
		{"mcmirror {\ncluster east\nlink west\n}", "Wrong argument count", nil},
		{"mcmirror {\ncluster east\nlink west a b c\n}", "Wrong argument count", nil},
		{"mcmirror {\ncluster east\nlink West a\n}", "invalid cluster name", nil},
		{"mcmirror {\ncluster east\nlink global a\n}", "reserved", nil},
		{"mcmirror {\ncluster east\nlink west a\nlink west b\n}", `link "west" given twice`, nil},
		{"mcmirror {\nlink east a\ncluster east\n}", `Testfile:2 - Error during parsing: link "east" has this cluster's name`, nil},
		{"mcmirror {\ncluster east\nlink_secrets\n}", "Wrong argument count", nil},
		{"mcmirror {\ncluster east\nlink_secrets ns a=b=c\n}", "link_secrets: bad selector", nil},
		{"mcmirror {\ncluster east\nlink_secrets ns\nlink_secrets other\n}", "link_secrets given twice", nil},
		{"mcmirror {\ncluster east\nexport_selector\n}", "Wrong argument count", nil},
		{"mcmirror {\ncluster east\nexport_selector in in in\n}", "export_selector: bad selector", nil},
		{"mcmirror {\ncluster east\nexport_selector a=b\nexport_selector c=d\n}", "export_selector given twice", nil},
		{"mcmirror {\ncluster east\nttl\n}", "Wrong argument count", nil},
		// source: direct (the default) or import, which links nothing.
		{"mcmirror {\ncluster east\nsource import\n}", "", func(t *testing.T, c *config) {
			assert.False(t, !c.imports || !c.options().Import, "source import: imports %v", c.imports)
		}},
		{"mcmirror {\ncluster east\nsource direct\nlink west /etc/west.kubeconfig\n}", "", func(t *testing.T, c *config) {
			assert.False(t, c.imports, "source direct is not import mode")
		}},
		{"mcmirror {\ncluster east\nsource import\nallowed_cidrs west 10.0.0.0/8\n}", "", nil},
		{"mcmirror {\ncluster east\nsource import\nlink west /etc/west.kubeconfig\n}", "source import with link or link_secrets", nil},
		{"mcmirror {\ncluster east\nlink_secrets linkerd-multicluster\nsource import\n}", "source import with link or link_secrets", nil},
		{"mcmirror {\ncluster east\nsource both\n}", `source: "both" is neither direct`, nil},
		{"mcmirror {\ncluster east\nsource\n}", "Wrong argument count", nil},
		{"mcmirror {\ncluster east\nsource import\nsource import\n}", "source given twice", nil},
		{"mcmirror {\ncluster east\nttl 1 2\n}", "Wrong argument count", nil},
		{"mcmirror {\ncluster east\nttl five\n}", "not a number", nil},
		{"mcmirror {\ncluster east\nttl -1\n}", "ttl must be in range [0, 3600]: -1", nil},
		{"mcmirror {\ncluster east\nttl 3601\n}", "ttl must be in range [0, 3600]: 3601", nil},
		{"mcmirror {\ncluster east\nstartup_timeout\n}", "Wrong argument count", nil},
		{"mcmirror {\ncluster east\nstale_max_age 10m\n}", "", func(t *testing.T, c *config) {
			assert.Equal(t, 10*time.Minute, c.staleMaxAge, "stale_max_age")
		}},
		{"mcmirror {\ncluster east\nstale_max_age 0s\n}", "", nil},
		{"mcmirror {\ncluster east\nstale_max_age\n}", "Wrong argument count", nil},
		{"mcmirror {\ncluster east\nstale_max_age 5\n}", "stale_max_age: time: missing unit", nil},
		{"mcmirror {\ncluster east\nstale_max_age -1m\n}", "Testfile:3 - Error during parsing: stale_max_age must not be negative", nil},
		{"mcmirror {\ncluster east\nstale_max_age 1m\nstale_max_age 2m\n}", "Testfile:4 - Error during parsing: stale_max_age given twice", nil},
		{"mcmirror {\ncluster east\nstartup_timeout 5\n}", "startup_timeout: time: missing unit", nil},
		{"mcmirror {\ncluster east\nstartup_timeout soon\n}", "startup_timeout: time: invalid duration", nil},
		{"mcmirror {\ncluster east\nstartup_timeout -1s\n}", "startup_timeout must be positive", nil},
		{"mcmirror {\ncluster east\ngateway_health\n}", "Wrong argument count", nil},
		{"mcmirror {\ncluster east\ngateway_health http://gw/peers 2s 3s\n}", "Wrong argument count", nil},
		{"mcmirror {\ncluster east\ngateway_health gw:9155/peers\n}", `gateway_health: bad URL "gw:9155/peers": want http:// or https:// and a host`, nil},
		{"mcmirror {\ncluster east\ngateway_health ftp://gw/peers\n}", `gateway_health: bad URL "ftp://gw/peers"`, nil},
		{"mcmirror {\ncluster east\ngateway_health http:///peers\n}", `gateway_health: bad URL "http:///peers"`, nil},
		{"mcmirror {\ncluster east\ngateway_health http://gw:port/peers\n}", `gateway_health: bad URL "http://gw:port/peers": parse`, nil},
		{"mcmirror {\ncluster east\ngateway_health http://gw/peers 2\n}", `gateway_health: bad interval "2": time: missing unit`, nil},
		{"mcmirror {\ncluster east\ngateway_health http://gw/peers often\n}", `gateway_health: bad interval "often"`, nil},
		{"mcmirror {\ncluster east\ngateway_health http://gw/peers 0s\n}", `gateway_health: bad interval "0s": must be positive`, nil},
		{"mcmirror {\ncluster east\ngateway_health http://gw/peers -1s\n}", `gateway_health: bad interval "-1s": must be positive`, nil},
		{"mcmirror {\ncluster east\ngateway_health http://gw/peers\ngateway_health http://gw2/peers\n}", "Testfile:4 - Error during parsing: gateway_health given twice", nil},
		{"mcmirror {\ncluster east\nfoo bar\n}", "unknown property 'foo'", nil},
		{"mcmirror {\ncluster east\nttl 5\nttl 6\n}", "Testfile:4 - Error during parsing: ttl given twice", nil},
		{"mcmirror {\ncluster east\nstartup_timeout 5s\nstartup_timeout 6s\n}", "Testfile:4 - Error during parsing: startup_timeout given twice", nil},
		{"mcmirror {\ncluster east\nfallthrough\nfallthrough a.example\n}", "Testfile:4 - Error during parsing: fallthrough given twice", nil},
		{"mcmirror {\ncluster east\nlink_secrets Linkerd_Multicluster\n}", `Testfile:3 - Error during parsing: link_secrets: bad namespace "Linkerd_Multicluster"`, nil},
		{"mcmirror {\ncluster east\nlink_secrets linkerd\nallow_insecure_kubeconfig\n}", "Wrong argument count", nil},
		{"mcmirror {\ncluster east\nlink_secrets linkerd\nallow_insecure_kubeconfig exec everything\n}",
			`Testfile:4 - Error during parsing: allow_insecure_kubeconfig: unknown value "everything" (want exec, auth-provider, files, http, skip-tls-verify)`, nil},
		{"mcmirror {\ncluster east\nlink_secrets linkerd\nallow_insecure_kubeconfig exec\nallow_insecure_kubeconfig http\n}", "Testfile:5 - Error during parsing: allow_insecure_kubeconfig given twice", nil},
		{"mcmirror {\ncluster east\nallow_insecure_kubeconfig exec\n}", "Testfile:3 - Error during parsing: allow_insecure_kubeconfig without link_secrets", nil},
		{"mcmirror . {\ncluster east\n}", `Testfile:1 - Error during parsing: zone "." is not a cluster domain`, nil},
		{"mcmirror cluster.local . {\ncluster east\n}", `zone "." is not a cluster domain`, nil},
		{"mcmirror in-addr.arpa {\ncluster east\n}", "non-reverse zone name must be used", nil},
		{"mcmirror {\ncluster east\n}\nmcmirror {\ncluster east\n}", "Testfile:4 - Error during parsing: this plugin", nil}, // plugin.ErrOnce
	}

	for i, tc := range tests {
		if cfg := parsed(t, i, tc.input, tc.shouldErr); cfg != nil && tc.check != nil {
			tc.check(t, cfg)
		}
	}
}

// parsed parses test i's Corefile input in a server block of keys: it
// fails t unless the error holds wantErr (none when empty), and returns
// the config of a good parse, or nil.
func parsed(t *testing.T, i int, input, wantErr string, keys ...string) *config {
	t.Helper()
	cfg, err := parse(controller(input, keys...))
	switch {
	case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
		t.Errorf("test %d: error %v, want one containing %q\n%s", i, err, wantErr, input)
	case wantErr == "" && err != nil:
		t.Errorf("test %d: %v\n%s", i, err, input)
	case wantErr == "":
		return cfg
	}
	return nil
}

// A server block for the root zone, with no zone on the mcmirror line,
// would have mcmirror answer in ".".
func TestParseRootServerBlock(t *testing.T) {
	parsed(t, 0, "mcmirror {\ncluster east\n}", `Testfile:1 - Error during parsing: zone "." is not a cluster domain`, ".:53")
	parsed(t, 1, "mcmirror cluster.local {\ncluster east\n}", "", ".:53") // a named zone in a root server block
}

func TestParseErrorsNameTheLine(t *testing.T) {
	c := controller("mcmirror {\ncluster east\n\nttl 99999\n}")
	_, err := parse(c)
	require.ErrorContains(t, err, "Testfile:4", "the error names line 4")
}

// controller returns a controller of corefile in a server block of keys,
// cluster.local.:53 without any.
func controller(corefile string, keys ...string) *caddy.Controller {
	c := caddy.NewTestController("dns", corefile)
	c.ServerBlockKeys = keys
	if len(keys) == 0 {
		c.ServerBlockKeys = []string{"cluster.local.:53"}
	}
	return c
}

// writeKubeconfig writes a kubeconfig with the contexts given, pointing at
// an address nothing listens on; the first context is current.
func writeKubeconfig(t *testing.T, contexts ...string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	for i, n := range contexts {
		cfg.Clusters[n] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
		cfg.AuthInfos[n] = &clientcmdapi.AuthInfo{Token: "t"}
		cfg.Contexts[n] = &clientcmdapi.Context{Cluster: n, AuthInfo: n}
		if i == 0 {
			cfg.CurrentContext = n
		}
	}
	p := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*cfg, p))
	return p
}

func TestSetup(t *testing.T) {
	kc := writeKubeconfig(t, "east", "west")
	garbage := filepath.Join(t.TempDir(), "garbage")
	require.NoError(t, os.WriteFile(garbage, []byte("::: not yaml ["), 0o600))
	missing := filepath.Join(t.TempDir(), "missing")

	tests := []struct {
		input     string
		shouldErr string
	}{
		{"mcmirror {\ncluster east\nkubeconfig " + kc + "\nlink west " + kc + " west\n}", ""},
		{"mcmirror {\ncluster east\nkubeconfig " + kc + "\nlink west " + kc + "\nlink_secrets linkerd-multicluster\n}", ""},
		{"mcmirror {\ncluster east\nkubeconfig " + kc + " east\n}", ""},
		{"mcmirror {\ncluster east\nkubeconfig " + kc + "\ngateway_health http://127.0.0.1:1/peers 1s\n}", ""},
		{"mcmirror {\ncluster east\nkubeconfig " + kc + "\ngateway_health 127.0.0.1:1\n}", "plugin/mcmirror: Testfile:4 - Error during parsing: gateway_health: bad URL"},
		{"mcmirror {\ncluster east\nkubeconfig " + missing + "\n}", "Testfile:3: kubeconfig " + missing + ": stat"},
		{"mcmirror {\ncluster east\nkubeconfig " + kc + " nope\n}", `no context "nope"`},
		{"mcmirror {\ncluster east\nkubeconfig " + garbage + "\n}", "kubeconfig " + garbage},
		{"mcmirror {\ncluster east\nkubeconfig " + kc + "\nlink west " + missing + "\n}", "Testfile:4: link west: kubeconfig " + missing},
		{"mcmirror {\ncluster east\nkubeconfig " + kc + "\nlink west " + garbage + "\n}", "link west: kubeconfig " + garbage},
		{"mcmirror {\ncluster east\nkubeconfig " + kc + "\nlink west " + kc + " paris\n}", `link west: kubeconfig ` + kc + `: no context "paris"`},
		{"mcmirror {\ncluster east\nttl 99999\n}", "ttl must be in range"},
	}
	for i, tc := range tests {
		c := controller(tc.input)
		err := setup(c)
		if tc.shouldErr != "" {
			if assert.ErrorContains(t, err, tc.shouldErr, "test %d", i) {
				assert.True(t, strings.HasPrefix(err.Error(), "plugin/mcmirror: "), "test %d: error %q is not the plugin's", i, err)
			}
		} else if assert.NoError(t, err, "test %d", i) {
			assert.Len(t, dnsserver.GetConfig(c).Plugin, 1, "test %d: plugins added", i)
		}
	}
}

func TestSetupGatewayHealth(t *testing.T) {
	kc := writeKubeconfig(t, "east")
	c := controller("mcmirror {\ncluster east\nkubeconfig " + kc + "\ngateway_health http://127.0.0.1:1/peers 1s\n}")
	require.NoError(t, setup(c))
	m, ok := dnsserver.GetConfig(c).Plugin[0](nil).(*MCMirror)
	require.True(t, ok, "no MCMirror")
	require.False(t, m.health == nil || m.health.url != "http://127.0.0.1:1/peers" || m.health.interval != time.Second || m.health.grace != 5*time.Second, "health %+v", m.health)
	assert.NotNil(t, m.health.changed, "the index is not told the gateways' health")
}

func TestSetupStaleMaxAge(t *testing.T) {
	kc := writeKubeconfig(t, "east", "west")
	corefile := "mcmirror {\ncluster east\nkubeconfig " + kc + "\nlink west " + kc + " west\nstale_max_age 90s\n}"
	c := controller(corefile)
	require.NoError(t, setup(c))
	// The watches are given stale_max_age (package watch tests that it
	// is each link's, and not the local cluster's).
	c = controller(corefile)
	cfg, err := parse(c)
	require.NoError(t, err)
	assert.Equal(t, 90*time.Second, cfg.options().watchOptions().StaleMaxAge, "the watches' stale_max_age")
}

func TestSetupInCluster(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	c := controller("mcmirror {\ncluster east\n}")
	require.ErrorContains(t, setup(c), "not running in a cluster")
}

var corefileBlock = regexp.MustCompile("(?s)(?:```|~~~) ?corefile\n(.*?)(?:```|~~~)")

// TestReadme parses the mcmirror stanza of every corefile example of
// README.md.
func TestReadme(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	blocks := corefileBlock.FindAllStringSubmatch(string(readme), -1)
	require.False(t, len(blocks) < 3, "found %d corefile examples, want at least 3", len(blocks))
	directives := append(slices.Clone(dnsserver.Directives), pluginName)
	for i, b := range blocks {
		sbs, err := caddyfile.Parse("README.md", strings.NewReader(b[1]), directives)
		if !assert.NoError(t, err, "example %d", i) {
			continue
		}
		found := false
		for _, sb := range sbs {
			tokens, ok := sb.Tokens[pluginName]
			if !ok {
				continue
			}
			found = true
			c := caddy.NewTestController("dns", "")
			c.Dispenser = caddyfile.NewDispenserTokens("README.md", tokens)
			c.ServerBlockKeys = sb.Keys
			_, err := parse(c)
			assert.NoError(t, err, "example %d\n%s", i, b[1])
		}
		assert.True(t, found, "example %d has no mcmirror stanza", i)
	}
}

package options

import (
	"flag"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/mcmirror/mcmirror/internal/trust"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// parse parses args with addFlags on a fresh flag set.
func parse(addFlags func(*flag.FlagSet), args ...string) error {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addFlags(fs)
	return fs.Parse(args)
}

func TestControllerDefaults(t *testing.T) {
	o := NewController()
	require.NoError(t, parse(o.AddFlags))
	assert.Equal(t, NewController(), o, "no flag: the defaults")
	assert.Equal(t, 4, o.Workers)
	assert.Equal(t, "kube-system", o.LeaseNamespace)
	assert.Equal(t, "mcmirror-controller", o.LeaseName)
	assert.Equal(t, 15*time.Second, o.LeaseDuration)
	assert.Equal(t, ":9154", o.MetricsAddress)
	assert.True(t, o.MCSAPI)
	assert.Equal(t, labels.ModeGateway, o.ServiceExportMode)
	assert.Equal(t, 5000, o.MaxImportEndpoints)
	assert.Equal(t, 30*time.Second, o.LinkStartupTimeout)
	assert.Empty(t, o.AllowSelectorless, "no selector-less Service is believed by default")

	// The help shows the defaults of the constructor.
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	NewController().AddFlags(fs)
	assert.Equal(t, "10m0s", fs.Lookup("headless-grace").DefValue)
	assert.Equal(t, labels.DefaultExportSelector, fs.Lookup("export-selector").DefValue)
}

func TestControllerValidate(t *testing.T) {
	base := []string{"--cluster", "east", "--egress-address", "10.0.0.1", "--egress-ports", "1-2"}
	o := NewController()
	require.NoError(t, parse(o.AddFlags, append(base, "--link-secrets", "links/app=x", "--allow-insecure-kubeconfig", "exec, files")...))
	c, err := o.Complete()
	require.NoError(t, err)
	assert.Equal(t, netip.MustParseAddr("10.0.0.1"), c.EgressAddress)
	assert.Equal(t, labels.PortRange{First: 1, Last: 2}, c.EgressPorts)
	assert.Equal(t, "links", c.LinkSecretsNamespace)
	assert.Equal(t, "app=x", c.LinkSecretsSelector.String())
	assert.Equal(t, link.Allow{Exec: true, Files: true}, o.AllowInsecureKubeconfig)

	o = NewController()
	require.NoError(t, parse(o.AddFlags, "--cluster", "east", "--egress-service", "mcmirror/gw", "--egress-ports", "1-2"))
	c, err = o.Complete()
	require.NoError(t, err)
	assert.Equal(t, types.NamespacedName{Namespace: "mcmirror", Name: "gw"}, c.EgressService)
	assert.False(t, c.EgressAddress.IsValid())

	// The first mistake, in the order the controller always checked them.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--cluster is required"},
		{[]string{"--cluster", "Bad_Name", "--workers", "0"}, "--cluster: "},
		{[]string{"--cluster", "east", "--workers", "0"}, "--workers must be at least 1"},
		{[]string{"--cluster", "east"}, "--egress-address or --egress-service is required"},
		{[]string{"--cluster", "east", "--egress-address", "127.0.0.1"}, "the API server refuses loopback"},
		{[]string{"--cluster", "east", "--egress-address", "10.0.0.1", "--egress-service", "a/b"}, "give one"},
		{[]string{"--cluster", "east", "--egress-service", "gw", "--egress-ports", "1-2"}, "--egress-service: "},
		{[]string{"--cluster", "east", "--egress-address", "10.0.0.1"}, "--egress-ports: "},
		{append(base, "--export-selector", ""), `--export-selector "": must select some Services`},
		{append(base, "--link-secrets", "Bad_NS"), `--link-secrets: bad namespace "Bad_NS"`},
		{append(base, "--allow-insecure-kubeconfig", "exec"), "--allow-insecure-kubeconfig without --link-secrets"},
		{append(base, "--link", "east=/x"), "--link east: that is this cluster's name"},
		{append(base, "--service-export-mode", "mesh"), `--service-export-mode "mesh": want gateway or flat`},
		{append(base, "--leader-elect", "--leader-elect-renew-deadline", "20s"), "--leader-elect-lease-duration must exceed"},
		{append(base, "--max-import-endpoints", "0"), "--max-import-endpoints must be at least 1"},
		{append(base, "--link-startup-timeout", "-1s"), "--link-startup-timeout must not be negative"},
	} {
		o := NewController()
		require.NoError(t, parse(o.AddFlags, tc.args...), "%q", tc.args)
		_, err := o.Complete()
		assert.ErrorContains(t, err, tc.want, "%q", tc.args)
	}
}

// The controller's imports take the gateway's endpoint policy flags.
func TestControllerImportFlags(t *testing.T) {
	o := NewController()
	require.NoError(t, parse(o.AddFlags, "--allow-selectorless", "shop/db", "--deny-cidr", "10.96.0.0/12",
		"--max-import-endpoints", "20", "--link-startup-timeout", "5s"))
	assert.Equal(t, EndpointPolicy{AllowSelectorless: []string{"shop/db"}, DenyCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}}, o.EndpointPolicy)
	assert.Equal(t, 20, o.MaxImportEndpoints)
	assert.Equal(t, 5*time.Second, o.LinkStartupTimeout)
	assert.Error(t, parse(NewController().AddFlags, "--allow-selectorless", "shop"))
}

func TestLinks(t *testing.T) {
	dir := t.TempDir()
	withColon := filepath.Join(dir, "a:b.kubeconfig")
	require.NoError(t, os.WriteFile(withColon, nil, 0o600))

	var l Links
	require.NoError(t, l.Set("west=/etc/west.kubeconfig"))
	require.NoError(t, l.Set("paris=/etc/paris.kubeconfig:admin"))
	require.NoError(t, l.Set("tokyo="+withColon))
	assert.Equal(t, Links{
		{Name: "west", Kubeconfig: "/etc/west.kubeconfig"},
		{Name: "paris", Kubeconfig: "/etc/paris.kubeconfig", Context: "admin"},
		{Name: "tokyo", Kubeconfig: withColon},
	}, l)
	for _, bad := range []string{"west=/x", "noequals", "=x", "x=", "Bad_Name=/x", "global=/x"} {
		assert.Error(t, l.Set(bad), bad)
	}
}

func TestParseEgressService(t *testing.T) {
	n, err := ParseEgressService("mcmirror/mcmirror-gateway-egress")
	require.NoError(t, err)
	assert.Equal(t, types.NamespacedName{Namespace: "mcmirror", Name: "mcmirror-gateway-egress"}, n)
	for _, bad := range []string{"", "x", "/x", "x/", "a/b/c", "Bad/x", "x/1abc", "x/Y"} {
		_, err := ParseEgressService(bad)
		assert.Error(t, err, bad)
	}
}

func TestGatewayDefaults(t *testing.T) {
	t.Setenv("POD_NAME", "gw-0")
	t.Setenv("POD_NAMESPACE", "mcmirror")
	o := NewGateway()
	require.NoError(t, parse(o.AddFlags))
	assert.Equal(t, NewGateway(), o, "no flag: the defaults")
	assert.Equal(t, trust.DefaultTrustDomain, o.TrustDomain)
	assert.Equal(t, ":4143", o.IngressAddress)
	assert.Equal(t, ":9155", o.MetricsAddress)
	assert.True(t, o.Egress)
	assert.Equal(t, 1024, o.MaxConnectionsPerSource)
	assert.Zero(t, o.MaxConnectionsPerPeer)
	assert.Zero(t, o.BufferBudget)
	assert.Equal(t, "gw-0", o.PodName)
	assert.Equal(t, "mcmirror", o.PodNamespace)
}

func TestGatewayValidate(t *testing.T) {
	o := NewGateway()
	require.NoError(t, parse(o.AddFlags, "--cluster", "east", "--peer", "west=203.0.113.10:4143", "--allow-cluster", "paris", "--egress-ports", "30000-32767"))
	c, err := o.Complete()
	require.NoError(t, err)
	assert.Equal(t, map[string]bool{"paris": true, "west": true}, c.AllowClusters, "the allow-list takes the peers in")
	assert.Equal(t, labels.PortRange{First: 30000, Last: 32767}, c.EgressPorts)
	assert.True(t, c.ExportSelector.Matches(k8slabels.Set{"mirror.linkerd.io/exported": "true"}))

	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--cluster is required"},
		{[]string{"--cluster", "Bad_Name", "--dial-timeout", "0s"}, "timeouts and intervals must be positive"},
		{[]string{"--cluster", "Bad_Name"}, "--cluster: "},
		{[]string{"--cluster", "east", "--ingress-address", "", "--egress=false"}, "nothing to do"},
		{[]string{"--cluster", "east", "--max-header-bytes", "100"}, "--max-header-bytes at least 512"},
		{[]string{"--cluster", "east", "--peer", "east=10.0.0.1:4143"}, "--peer east: that is this cluster's name"},
		{[]string{"--cluster", "east", "--allow-cluster", "east"}, "--allow-cluster east: that is this cluster's name"},
		{[]string{"--cluster", "east", "--allow-cluster", "west", "--ingress-address", ""}, "there is no ingress"},
		{[]string{"--cluster", "east", "--export-selector", ""}, "--export-selector"},
	} {
		o := NewGateway()
		require.NoError(t, parse(o.AddFlags, tc.args...), "%q", tc.args)
		_, err := o.Complete()
		assert.ErrorContains(t, err, tc.want, "%q", tc.args)
	}
}

func TestPeers(t *testing.T) {
	o := NewGateway()
	require.NoError(t, o.addPeer("west=203.0.113.10:4143"))
	require.NoError(t, o.addPeer("paris=gw.paris.example:4143"))
	assert.Equal(t, map[string]string{"west": "203.0.113.10:4143", "paris": "gw.paris.example:4143"}, o.Peers)
	assert.Equal(t, []string{"west", "paris"}, o.PeerOrder)
	for _, bad := range []string{"west=10.0.0.1:1", "noequals", "=x:1", "x=", "Bad_Name=a:1", "global=a:1", "x=nohost", "x=:4143", "x=a:0", "x=a:65536", "x=a:http"} {
		assert.Error(t, o.addPeer(bad), bad)
	}
	assert.Equal(t, []string{"west", "paris"}, o.PeerOrder, "a refused --peer is not kept")
}

// The ingress's allow-list: none without --allow-cluster (any cluster of
// the root); with it, those clusters and every --peer.
func TestAllowedClusters(t *testing.T) {
	o := NewGateway()
	require.NoError(t, o.addPeer("west=a:1"))
	assert.Nil(t, o.allowedClusters())
	require.NoError(t, o.addAllowCluster("paris"))
	assert.Equal(t, map[string]bool{"paris": true, "west": true}, o.allowedClusters())
	for _, bad := range []string{"", "global", "Bad_Name", "paris"} {
		assert.Error(t, o.addAllowCluster(bad), bad)
	}
}

func TestTrustFlags(t *testing.T) {
	o := NewGateway()
	require.NoError(t, parse(o.AddFlags, "--egress-ports", "30000-32767", "--allow-selectorless", "shop/db", "--allow-selectorless", "legacy/*",
		"--deny-cidr", "10.96.0.0/12", "--deny-cidr", "192.168.1.7/24", "--deny-cidr", "fd00::/8"))
	assert.Equal(t, "30000-32767", o.EgressPorts)
	assert.Equal(t, []string{"shop/db", "legacy/*"}, o.AllowSelectorless)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("192.168.1.0/24"), netip.MustParsePrefix("fd00::/8")}, o.DenyCIDRs)

	for _, bad := range [][]string{
		{"--egress-ports", "32767-30000"}, {"--egress-ports", "x"},
		{"--allow-selectorless", "shop"}, {"--allow-selectorless", "Shop/db"},
		{"--deny-cidr", "10.96.0.1"}, {"--deny-cidr", "nonsense"},
	} {
		assert.Error(t, parse(NewGateway().AddFlags, bad...), "%v", bad)
	}
}

func TestValidateSelectorless(t *testing.T) {
	for s, ok := range map[string]bool{
		"*": true, "shop/*": true, "shop/web": true,
		"": false, "shop": false, "*/web": false, "shop/Web": false, "shop/1web": false, "Shop/web": false, "shop/web/x": false,
	} {
		err := ValidateSelectorless(s)
		assert.Equal(t, ok, err == nil, "%q: %v", s, err)
	}
}

// The limits are kept as parsed; the budget is the gateway's to apply.
func TestLimitFlags(t *testing.T) {
	o := NewGateway()
	require.NoError(t, parse(o.AddFlags, "--buffer-budget", "8388608", "--max-connections-per-source", "0", "--max-connections-per-peer", "7"))
	assert.EqualValues(t, 8<<20, o.BufferBudget)
	assert.Zero(t, o.MaxConnectionsPerSource)
	assert.Equal(t, 7, o.MaxConnectionsPerPeer)
	assert.Error(t, parse(NewGateway().AddFlags, "--buffer-budget", "1k"))
	assert.Error(t, parse(NewGateway().AddFlags, "--buffer-budget", "1024"))
}

// Parsing -v sets nothing: reading another process's flags (check) leaves
// this one's logs alone. Apply does.
func TestVerbosity(t *testing.T) {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	before := fs.Lookup("v").Value.String()
	t.Cleanup(func() { _ = fs.Set("v", before) })

	o := NewController()
	require.NoError(t, parse(o.AddFlags, "-v", "7"))
	assert.Equal(t, before, fs.Lookup("v").Value.String())
	require.NoError(t, o.Verbosity.Apply())
	assert.Equal(t, "7", fs.Lookup("v").Value.String())

	assert.ErrorContains(t, parse(NewGateway().AddFlags, "-v", "loud"), `invalid value "loud" for flag -v`)
	require.NoError(t, Verbosity{}.Apply(), "no -v: nothing to set")
}

// --link-allowed-namespaces and --link-denied-namespaces narrow a --link,
// given before or after it; a list of no --link, or one that does not
// make namespaces, is refused in the flags' words.
func TestLinkNamespaces(t *testing.T) {
	o := NewController()
	require.NoError(t, parse(o.AddFlags, "--cluster", "east", "--egress-address", "10.0.0.1", "--egress-ports", "30000-30100",
		"--link-denied-namespaces", "west=tenant-b, kube-system", "--link", "west=/etc/west.kubeconfig",
		"--link", "paris=/etc/paris.kubeconfig", "--link-allowed-namespaces", "paris=shop"))
	c, err := o.Complete()
	require.NoError(t, err)
	require.Len(t, c.Links, 2)
	assert.Equal(t, link.Namespaces{Deny: []string{"kube-system", "tenant-b"}}, c.Links[0].Namespaces)
	assert.Equal(t, link.Namespaces{Allow: []string{"shop"}}, c.Links[1].Namespaces)

	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"--link-allowed-namespaces", "tokyo=shop"}, `--link-allowed-namespaces tokyo: no --link named "tokyo" (those of a link Secret are its annotations mcmirror.dev/allowed-namespaces and mcmirror.dev/denied-namespaces)`},
		{[]string{"--link-allowed-namespaces", "west=shop", "--link-denied-namespaces", "west=shop"}, `--link-allowed-namespaces and --link-denied-namespaces of link west: namespace "shop" is both allowed and denied`},
		{[]string{"--link-denied-namespaces", "west=Shop"}, `denied namespaces: "Shop" is not a namespace name`},
	} {
		o := NewController()
		require.NoError(t, parse(o.AddFlags, append([]string{"--cluster", "east", "--egress-address", "10.0.0.1", "--egress-ports", "30000-30100",
			"--link", "west=/etc/west.kubeconfig"}, tc.args...)...))
		_, err := o.Complete()
		assert.ErrorContains(t, err, tc.err, "%v", tc.args)
	}
	for _, bad := range [][]string{
		{"--link-denied-namespaces", "west"},
		{"--link-denied-namespaces", "west="},
		{"--link-denied-namespaces", "west=a,,b"},
		{"--link-denied-namespaces", "west=a", "--link-denied-namespaces", "west=b"},
	} {
		assert.Error(t, parse(NewController().AddFlags, bad...), "%v", bad)
	}
}

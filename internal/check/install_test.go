package check

import (
	"flag"
	"testing"

	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/mcmirror/mcmirror/internal/options"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// deployment is a Deployment whose container runs coredns-mc with args.
func deployment(args ...string) *appsv1.Deployment {
	d := &appsv1.Deployment{}
	d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "coredns-mc", Command: []string{"/coredns-mc"}, Args: args}}
	return d
}

// parsed is what the component itself makes of args (its subcommand
// removed).
func parsed(t *testing.T, addFlags func(*flag.FlagSet), args ...string) {
	t.Helper()
	fs := flag.NewFlagSet("component", flag.ContinueOnError)
	addFlags(fs)
	require.NoError(t, fs.Parse(args))
	require.Zero(t, fs.NArg())
}

// A Deployment's arguments read by check are the options the component
// runs with: same flags, same defaults.
func TestParseDeploymentArgs(t *testing.T) {
	ctlArgs := []string{"--cluster=east", "--leader-elect", "--leader-elect-namespace", "mcmirror", "--egress-service", "mcmirror/gw",
		"--egress-ports", "30000-30999", "--link-secrets", "links/app=x", "--allow-insecure-kubeconfig", "exec,files", "--workers", "8"}
	got := ParseController(WorkloadOf(deployment(append([]string{"controller"}, ctlArgs...)...)).Args)
	want := options.NewController()
	parsed(t, want.AddFlags, ctlArgs...)
	assert.Equal(t, *want, got)
	assert.Equal(t, "links", got.LinkSecretsNamespace())
	assert.Equal(t, link.Allow{Exec: true, Files: true}, got.AllowInsecureKubeconfig)
	assert.Equal(t, "kube-system", ParseController([]string{"controller"}).LeaseNamespace, "the controller's default")

	gwArgs := []string{"--cluster", "east", "--peer", "west=203.0.113.10:4143", "--peer=paris=gw.paris.example:4143",
		"--egress=false", "--allow-cluster", "tokyo", "--tls-ca", "/etc/mcmirror/tls/ca.crt", "--egress-ports=30000-30999"}
	gw := ParseGateway(WorkloadOf(deployment(append([]string{"gateway"}, gwArgs...)...)).Args)
	wantGw := options.NewGateway()
	parsed(t, wantGw.AddFlags, gwArgs...)
	assert.Equal(t, *wantGw, gw)
	assert.Equal(t, []string{"west", "paris"}, gw.PeerOrder)
	assert.False(t, gw.Egress)
	assert.Equal(t, ":4143", gw.IngressAddress, "the gateway's default")

	// A flag this version does not know, a bad value, a stray argument:
	// passed over, every other flag still read.
	gw = ParseGateway([]string{"gateway", "--cluster", "east", "--from-the-future", "value", "--max-connections", "many", "stray",
		"--peer", "west=203.0.113.10:4143", "--metrics-addr", ":9999"})
	assert.Equal(t, "east", gw.Cluster)
	assert.Equal(t, []string{"west"}, gw.PeerOrder)
	assert.Equal(t, ":9999", gw.MetricsAddress)
}

func TestLastFlag(t *testing.T) {
	args := []string{"kube-apiserver", "--service-node-port-range=30000-30100", "-conf", "/etc/Corefile", "--service-node-port-range", "1-2", "--last"}
	v, ok := lastFlag(args, "service-node-port-range")
	assert.True(t, ok)
	assert.Equal(t, "1-2", v)
	v, ok = lastFlag(args, "conf")
	assert.True(t, ok)
	assert.Equal(t, "/etc/Corefile", v)
	_, ok = lastFlag(args, "last")
	assert.False(t, ok, "no value")
	_, ok = lastFlag(args, "missing")
	assert.False(t, ok)
}

// The Corefile is read by CoreDNS's parser: quotes, comments, one-line
// blocks and several server blocks as CoreDNS reads them; one it refuses
// has no mcmirror block.
func TestParseCorefileSyntax(t *testing.T) {
	d, err := parseCorefile(`cluster.local:53 {
    kubernetes
}
.:53 {
    mcmirror "example.org" { cluster east }
}
`)
	require.NoError(t, err)
	assert.True(t, d.Mcmirror)
	assert.True(t, d.Kubernetes, "in another server block")
	assert.Equal(t, "east", d.Cluster)
	assert.Equal(t, "example.org", d.Domain())

	d, err = parseCorefile(".:53 {\n    mcmirror cluster.local {\n        cluster east\n")
	assert.Error(t, err, "an unclosed block")
	assert.False(t, d.Mcmirror)
}

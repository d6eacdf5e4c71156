package gateway

import (
	"flag"
	"io"
	"net/netip"
	"testing"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/internal/remote/remotetest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	k8slabels "k8s.io/apimachinery/pkg/labels"
)

func TestTrustFlags(t *testing.T) {
	parse := func(args ...string) (*TrustFlags, error) {
		fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		tf := RegisterTrustFlags(fs)
		return tf, fs.Parse(args)
	}
	tf, err := parse("--egress-ports", "30000-32767", "--allow-selectorless", "shop/db", "--allow-selectorless", "legacy/*",
		"--deny-cidr", "10.96.0.0/12", "--deny-cidr", "192.168.1.7/24", "--deny-cidr", "fd00::/8")
	require.NoError(t, err)

	var e Egress
	tf.ConfigureEgress(&e)
	assert.Equal(t, labels.PortRange{First: 30000, Last: 32767}, e.Trust.Ports)
	sel, err := k8slabels.Parse(labels.DefaultExportSelector)
	require.NoError(t, err)
	x := NewExports(remotetest.NewClientset(), sel)
	tf.ConfigureIngress(x)
	assert.Equal(t, []string{"shop/db", "legacy/*"}, x.policy.Selectorless)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("192.168.1.0/24"), netip.MustParsePrefix("fd00::/8")}, x.policy.Deny)
	assert.False(t, x.policy.loopback)

	for _, bad := range [][]string{
		{"--egress-ports", "32767-30000"}, {"--egress-ports", "x"},
		{"--allow-selectorless", "shop"}, {"--allow-selectorless", "Shop/db"},
		{"--deny-cidr", "10.96.0.1"}, {"--deny-cidr", "nonsense"},
	} {
		_, err := parse(bad...)
		assert.Error(t, err, "%v", bad)
	}
}

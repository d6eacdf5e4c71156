package endpointpolicy

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Loopback addresses are refused unless a unit test's policy lets them in
// (a fake clientset takes them; an API server does not): only
// AllowLoopback opens the hatch, and only for loopback.
func TestAllowLoopbackOnly(t *testing.T) {
	p := Policy{}
	assert.Equal(t, Address, p.AddressRefusal(netip.MustParseAddr("127.0.0.1")))
	p = p.AllowLoopback()
	assert.Empty(t, p.AddressRefusal(netip.MustParseAddr("127.0.0.1")))
	assert.Equal(t, Address, p.AddressRefusal(netip.MustParseAddr("169.254.169.254")), "only loopback")
	assert.Equal(t, Address, p.AddressRefusal(netip.MustParseAddr("::")), "only loopback")
}

// SelectorlessAllowed reads NAMESPACE/NAME, NAMESPACE/* and *.
func TestSelectorlessAllowed(t *testing.T) {
	for _, tc := range []struct {
		list []string
		want bool
	}{
		{nil, false},
		{[]string{"shop/legacy"}, true},
		{[]string{"shop/*"}, true},
		{[]string{"*"}, true},
		{[]string{"shop/other", "tenant/*", "shop"}, false},
	} {
		p := Policy{Selectorless: tc.list}
		assert.Equal(t, tc.want, p.SelectorlessAllowed("shop", "legacy"), "%v", tc.list)
	}
}

// Special is the one list of addresses no linked cluster may send anyone
// to; everything else is left to the lists and the rest of the policy.
func TestSpecial(t *testing.T) {
	for ip, want := range map[string]bool{
		"127.0.0.1":              true,
		"127.8.0.1":              true,
		"::1":                    true,
		"169.254.169.254":        true, // cloud metadata
		"169.254.0.1":            true,
		"fe80::1":                true,
		"febf::1":                true,
		"224.0.0.1":              true,
		"239.255.255.250":        true,
		"ff02::1":                true,
		"ff05::2":                true,
		"0.0.0.0":                true,
		"::":                     true,
		"255.255.255.255":        true,
		"::ffff:127.0.0.1":       true, // what it maps to
		"::ffff:169.254.169.254": true,
		"10.1.0.30":              false,
		"192.168.0.1":            false,
		"100.64.0.1":             false,
		"fd00::20":               false,
		"fec0::1":                false, // site-local, deprecated: not link-local
		"2001:db8::1":            false,
		"::ffff:10.1.0.30":       false,
	} {
		a := netip.MustParseAddr(ip)
		assert.Equal(t, want, Special(a), ip)
		p := Policy{}
		assert.Equal(t, want, p.AddressRefusal(a) == Address, "AddressRefusal(%s) agrees", ip)
	}
	assert.True(t, Special(netip.Addr{}), "no address at all")
}

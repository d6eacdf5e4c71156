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

package index

import (
	"net/netip"
	"testing"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/index/indextest"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
)

func TestCIDRsAllows(t *testing.T) {
	list := cidrs{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("fd00::/8")}
	// Only IPv6 is allowed at large: an IPv4-mapped address is IPv4.
	v6 := cidrs{netip.MustParsePrefix("::/0")}
	tests := []struct {
		l    cidrs
		ip   string
		want bool
	}{
		{nil, "10.96.0.1", true}, // no list: everything not special
		{nil, "169.254.169.254", false},
		{nil, "127.0.0.1", false},
		{nil, "::ffff:127.0.0.1", false},
		{nil, "fe80::1", false},
		{nil, "ff02::1", false},
		{nil, "::", false},
		{cidrs{netip.MustParsePrefix("0.0.0.0/0")}, "169.254.169.254", false}, // a list never lets one in
		{list, "10.1.0.30", true},
		{list, "10.1.255.255", true},
		{list, "10.96.0.1", false}, // the local API server's ClusterIP
		{list, "169.254.169.254", false},
		{list, "fd00::20", true},
		{list, "fe80::1", false},
		{list, "::ffff:10.1.0.30", true}, // answered as A 10.1.0.30
		{list, "::ffff:10.96.0.1", false},
		{v6, "::ffff:10.96.0.1", false}, // would be A 10.96.0.1
		{v6, "2001:db8::1", true},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, tc.l.allows(netip.MustParseAddr(tc.ip)), "%v allows %s", tc.l, tc.ip)
	}
}

// A linked cluster with an allow-list has its flat-mode addresses outside
// it dropped from every name; one without a list is answered as before;
// each drop is counted and logged when it first shows.
func TestIndexAllowedCIDRs(t *testing.T) {
	src := indextest.NewSource("paris", "west")
	src.AddService("west", "default", "flat", labels.Flat, []string{"10.100.0.3"}, httpPort)
	src.AddSlice("west", "default", "flat", []object.Port{httpPort},
		ep("", "10.1.0.30", true), ep("", "10.96.0.1", true), ep("", "::ffff:10.96.0.2", true),
		ep("", "10.96.0.9", false)) // not ready: never answered, so not a drop
	src.AddFlat("west", "default", "db", ep("db-0", "10.1.0.40", true), ep("db-1", "10.96.0.1", true))
	src.AddService("paris", "default", "flat", labels.Flat, []string{"10.100.0.3"}, httpPort)
	src.AddSlice("paris", "default", "flat", []object.Port{httpPort}, ep("", "10.96.0.1", true))

	x := New(src, Options{
		Cluster:      "east",
		Zones:        []string{"cluster.local."},
		AllowedCIDRs: map[string][]netip.Prefix{"west": {netip.MustParsePrefix("10.1.0.0/16")}},
	})
	west, paris := droppedAddresses.WithLabelValues("west"), droppedAddresses.WithLabelValues("paris")
	before, beforeParis := testutil.ToFloat64(west), testutil.ToFloat64(paris)
	syncAll(x, src)
	assert.EqualValues(t, 3, testutil.ToFloat64(west)-before, "west: addresses counted dropped")
	assert.EqualValues(t, 0, testutil.ToFloat64(paris)-beforeParis, "paris has no list, yet addresses counted dropped")

	wantAddrs(t, x, "flat-west"+z, "10.1.0.30") // no AAAA record either
	wantAddrs(t, x, "db-0.db-west"+z, "10.1.0.40")
	wantNXDOMAIN(t, x, "db-1.db-west"+z)
	wantAddrs(t, x, "db-west"+z, "10.1.0.40")
	// paris has no list: answered as before.
	wantAddrs(t, x, "flat-paris"+z, "10.96.0.1")
	wantAddrs(t, x, "flat-global"+z, "10.1.0.30", "10.96.0.1")

	// A rebuild with nothing new counts nothing.
	mid := testutil.ToFloat64(west)
	x.Sync(object.ServiceKey("default", "flat"))
	x.Sync(object.ServiceKey("default", "db"))
	assert.Equal(t, mid, testutil.ToFloat64(west), "drops counted by a rebuild of the same addresses")
	// A slice that shows one more address outside counts that one.
	src.EndpointSlices[[3]string{"west", "default", "flat"}][0].Endpoints = append(src.EndpointSlices[[3]string{"west", "default", "flat"}][0].Endpoints,
		ep("", "192.168.0.1", true))
	x.Sync(object.ServiceKey("default", "flat"))
	assert.EqualValues(t, 1, testutil.ToFloat64(west)-mid, "one new address outside: addresses counted dropped")
}

// allowed_cidrs bounds a federated member's addresses as any flat-mode
// address of its cluster: one outside is not answered, and counted once.
func TestFederatedAllowedCIDRs(t *testing.T) {
	f := indextest.NewSource("west")
	f.AddMember("west", "default", "web", labels.Flat, []string{"10.100.0.7"}, httpPort)
	f.AddSlice("west", "default", "web", []object.Port{indextest.TargetPort}, ep("", "10.1.0.1", true), ep("", "10.96.0.1", true))
	f.Federate("web-federated", "web@west", "-")
	x := New(f, Options{Cluster: "east", Zones: []string{"cluster.local."},
		AllowedCIDRs: map[string][]netip.Prefix{"west": {netip.MustParsePrefix("10.1.0.0/16")}}})
	before := testutil.ToFloat64(droppedAddresses.WithLabelValues("west"))
	syncAll(x, f)
	syncKeys(x, object.ServiceKey("default", "web")) // built again: counted once
	wantAddrs(t, x, "web-federated"+z, "10.1.0.1")   // the allowed address only
	assert.EqualValues(t, 1, testutil.ToFloat64(droppedAddresses.WithLabelValues("west"))-before, "addresses counted dropped")
}

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

// A linked cluster's loopback, link-local (the cloud's metadata service),
// multicast and unspecified addresses are never answered, with or without
// allowed_cidrs, by any name its flat-mode Services give; each is counted
// in dropped_addresses_total. The local cluster's own are answered as
// they are.
func TestIndexSpecialAddresses(t *testing.T) {
	src := indextest.NewSource("paris", "west")
	special := []string{"127.0.0.1", "169.254.169.254", "::ffff:169.254.169.254", "fe80::1", "224.0.0.1", "ff02::1", "0.0.0.0", "::"}
	eps := []object.Endpoint{ep("", "10.1.0.30", true)}
	for _, ip := range special {
		eps = append(eps, ep("", ip, true))
	}
	src.AddService("west", "default", "flat", labels.Flat, []string{"10.100.0.3"}, httpPort)
	src.AddSlice("west", "default", "flat", []object.Port{httpPort}, eps...)
	src.AddFlat("west", "default", "db", ep("db-0", "10.1.0.40", true), ep("db-1", "169.254.169.254", true))
	// paris has an allow-list that takes everything: still none.
	src.AddService("paris", "default", "flat", labels.Flat, []string{"10.100.0.3"}, httpPort)
	src.AddSlice("paris", "default", "flat", []object.Port{httpPort}, ep("", "10.2.0.1", true), ep("", "169.254.169.254", true))
	// The local cluster's own addresses are answered as they are.
	src.AddFlat("east", "default", "db", ep("db-2", "169.254.0.7", true))

	x := New(src, Options{
		Cluster:      "east",
		Zones:        []string{"cluster.local."},
		AllowedCIDRs: map[string][]netip.Prefix{"paris": {netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}},
	})
	west, paris := droppedAddresses.WithLabelValues("west"), droppedAddresses.WithLabelValues("paris")
	before, beforeParis := testutil.ToFloat64(west), testutil.ToFloat64(paris)
	syncAll(x, src)
	assert.Equal(t, float64(len(special)+1), testutil.ToFloat64(west)-before, "west: addresses counted dropped")
	assert.EqualValues(t, 1, testutil.ToFloat64(paris)-beforeParis, "paris: addresses counted dropped")
	wantAddrs(t, x, "flat-west"+z, "10.1.0.30")
	wantAddrs(t, x, "db-0.db-west"+z, "10.1.0.40")
	wantAbsent(t, x, "db-1.db-west"+z)
	wantAddrs(t, x, "db-west"+z, "10.1.0.40")
	wantAddrs(t, x, "flat-paris"+z, "10.2.0.1")
	wantAddrs(t, x, "flat-global"+z, "10.1.0.30", "10.2.0.1")
	wantAddrs(t, x, "db-global"+z, "10.1.0.40", "169.254.0.7")
}

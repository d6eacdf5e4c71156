package index

import (
	"strings"
	"testing"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/index/indextest"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// wantNXDOMAIN fails t unless name is below a name of the index without
// being one: the handler answers it NXDOMAIN.
func wantNXDOMAIN(t *testing.T, x *Index, name string) {
	t.Helper()
	wantAbsent(t, x, name)
	_, ok := x.Claimed(name, "cluster.local.")
	assert.True(t, ok, "%s: not claimed, want NXDOMAIN", name)
}

// wantPassed fails t unless name is neither a name of the index nor below
// one: the handler hands it to the next plugin.
func wantPassed(t *testing.T, x *Index, name string) {
	t.Helper()
	wantAbsent(t, x, name)
	_, ok := x.Claimed(name, "cluster.local.")
	assert.False(t, ok, "%s: claimed, want it left to the next plugin", name)
}

// Two groups produce the same name (svc a-b of cluster c, svc a of cluster
// b-c): the one that keeps it keeps everything below it, its pods and SRV
// names; none of the other's answers under it.
func TestCollisionTakesTheSubtree(t *testing.T) {
	for _, order := range [][]string{{"a", "a-b"}, {"a-b", "a"}} {
		t.Run(strings.Join(order, ","), func(t *testing.T) {
			src := indextest.NewSource("c", "b-c")
			src.AddFlat("c", "default", "a-b", ep("loser-0", "10.1.0.1", true))
			src.AddFlat("b-c", "default", "a", ep("winner-0", "10.2.0.1", true))
			x := New(src, Options{Cluster: "east", Zones: []string{"cluster.local."}})
			for _, svc := range order {
				x.Sync(object.ServiceKey("default", svc))
			}
			wantAddrs(t, x, "winner-0.a-b-c"+z, "10.2.0.1") // the kept name's pod
			wantNXDOMAIN(t, x, "loser-0.a-b-c"+z)           // the other group's pod under the kept name
			assert.Equal(t, []string{"winner-0.a-b-c" + z}, targets(x, "_http._tcp.a-b-c"+z), "SRV of the kept name")
		})
	}
}

// A pod whose name cannot be a DNS name (a 64-octet host, or a name over
// 255 octets under a long zone) is left out of SRV answers, counted, and
// the rest of the answer is sent.
func TestInvalidTargetsLeftOut(t *testing.T) {
	long := strings.Repeat("z", 60) + "."
	zone := strings.Repeat(long, 3) + "example." // 191 octets
	src := indextest.NewSource("west")
	src.AddService("west", "default", "web", labels.Flat, nil, httpPort)
	src.AddSlice("west", "default", "web", []object.Port{httpPort},
		ep("ok-0", "10.1.0.1", true),
		ep(strings.Repeat("h", 64), "10.1.0.2", true), // a label over 63 octets
		ep(strings.Repeat("p", 63), "10.1.0.3", true)) // a name over 255 octets under zone
	before := testutil.ToFloat64(invalidNames.WithLabelValues("west"))
	x := built(src, Options{Cluster: "east", Zones: []string{"cluster.local.", zone}})
	assert.Equal(t, before+2, testutil.ToFloat64(invalidNames.WithLabelValues("west")), "invalid_names_total{cluster=west}: 2 more")
	for _, name := range []string{"_http._tcp.web-west" + z, "web-west" + z, "web-global" + z} {
		want := strings.TrimSuffix(name, z)
		want = "ok-0." + strings.TrimPrefix(want, "_http._tcp.")
		if strings.HasPrefix(want, "ok-0.web-global") {
			want = "ok-0.web-west"
		}
		assert.Equal(t, []string{want + z}, targets(x, name), "%s: targets", name)
	}
	// Under the long zone the pod with the 63-octet host has no name;
	// its address still answers the Service's name.
	wname := "web-west.default.svc." + zone
	wantAddrs(t, x, wname, "10.1.0.1", "10.1.0.2", "10.1.0.3")
	assert.Len(t, targets(x, "_http._tcp."+wname), 1, "SRV under the long zone")
}

// An endpoint without a hostname is named as the kubernetes plugin names
// it (fd00:1:2:3:4:: is fd00-1-2-3-4--0), so that a local -global SRV
// target resolves there; addresses are compared by value.
func TestDashedIPv6AndDedupe(t *testing.T) {
	src := indextest.NewSource("west")
	src.AddFlat("east", "default", "db", ep("", "fd00:1:2:3:4::", true))
	src.AddService("west", "default", "db", labels.Flat, nil, httpPort)
	src.AddSlice("west", "default", "db", []object.Port{httpPort},
		object.Endpoint{Addresses: []string{"fd00::1", "fd00:0::1"}, Ready: true},
		ep("", "fd00:0:0::1", true))
	x := testIndex(src)

	assert.Equal(t, []string{"fd00-1-2-3-4--0.db" + z, "fd00--1.db-west" + z}, targets(x, "_http._tcp.db-global"+z), "targets, the local first")
	// One record for fd00::1, written three ways.
	wantAddrs(t, x, "db-west"+z, "fd00::1")
}

// Names a remote cluster sends are checked as DNS labels: a namespace or
// a hostname with a dot would add a label and could shadow another name.
func TestRemoteNamesAreLabels(t *testing.T) {
	src := indextest.NewSource("west")
	src.AddFlat("west", "b.c", "a", ep("x", "10.1.0.1", true))
	src.AddFlat("west", "default", "web", ep("y.a-west", "10.1.0.2", true), ep("ok", "10.1.0.3", true))
	x := testIndex(src)
	for name := range x.names {
		assert.False(t, strings.Contains(name, "b.c.svc") || strings.HasPrefix(name, "y."), "name %q from a name that is not a label", name)
	}
	wantPassed(t, x, "a-west.b.c.svc.cluster.local.")
	// The endpoint's address still answers the Service's name.
	wantAddrs(t, x, "web-west"+z, "10.1.0.2", "10.1.0.3")
}

// ExternalName exports have no addresses: a remote one is counted and left
// out; a local one does not claim <svc>-global.
func TestExternalNameExports(t *testing.T) {
	src := indextest.NewSource("west")
	src.AddService("east", "default", "ext", labels.Flat, nil, httpPort).ExternalName = true
	src.AddService("west", "default", "rext", labels.Gateway, nil, httpPort).ExternalName = true
	before := testutil.ToFloat64(externalNames.WithLabelValues("west"))
	x := testIndex(src)
	assert.Equal(t, before+1, testutil.ToFloat64(externalNames.WithLabelValues("west")), "externalname_exports_total{cluster=west}: one more")
	for _, name := range []string{"ext-global" + z, "rext-west" + z, "rext-global" + z} {
		wantPassed(t, x, name)
	}
}

// -global answers list the local cluster's members first, in both A and
// SRV answers.
func TestGlobalLocalFirst(t *testing.T) {
	src := indextest.NewSource("a-first", "west")
	for _, c := range []string{"a-first", "west", "east"} {
		src.AddService(c, "default", "db", labels.Flat, nil, httpPort)
	}
	src.AddSlice("a-first", "default", "db", []object.Port{httpPort}, ep("db-0", "10.1.0.1", true))
	src.AddSlice("west", "default", "db", []object.Port{httpPort}, ep("db-0", "10.2.0.1", true))
	src.AddSlice("east", "default", "db", []object.Port{httpPort}, ep("db-0", "10.0.0.1", true))
	x := testIndex(src)
	h := x.Lookup("db-global" + z)
	require.NotNil(t, h, "db-global: not in the index")
	assert.Equal(t, []string{"10.0.0.1", "10.1.0.1", "10.2.0.1"}, indextest.Unpack(h.Addresses(false), 4), "A: the local 10.0.0.1 first, then the links in order")
	ts := targets(x, "_http._tcp.db-global"+z)
	assert.False(t, len(ts) != 3 || ts[0] != "db-0.db"+z,
		"SRV targets %v, want the local db-0.db first", ts)
}

package index

import (
	"testing"

	"github.com/mcmirror/mcmirror/plugin/mcmirror/index/indextest"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/object"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The clusterset names of a group come and go with its derived Service,
// the namespaces' empty non-terminals with them, and a group nobody exports
// or imports any more leaves no slot; mcmirror's own names never move.
func TestClusterSetNamesGo(t *testing.T) {
	src := indextest.Fixture()
	src.AddImport("default", "web", []string{"10.97.0.1"}, httpPort)
	src.AddImport("default", "nginx-svc", nil, httpPort)
	src.AddImport("default", "solo", []string{"10.97.0.12"}, httpPort)
	x := built(src, Options{Cluster: "east", Zones: []string{"cluster.local."}, ClusterSet: []string{"clusterset.local."}, PTR: true})
	require.False(t, len(x.cs) == 0 || x.csNS["default"] != 3, "clusterset names %v, imports by namespace %v", x.cs, x.csNS)
	for _, svc := range []string{"web", "nginx-svc", "solo"} {
		delete(src.Imports, [2]string{"default", svc})
		x.Sync(object.ServiceKey("default", svc))
	}
	assert.False(t, len(x.cs) != 0 || len(x.csNS) != 0, "clusterset names left: %v, imports by namespace %v", x.cs, x.csNS)
	assert.NotContains(t, x.slots, object.ServiceKey("default", "solo"), "the slot of a group nobody exports or imports is kept")
	wantAddrs(t, x, "web-west"+z, "10.96.0.20", "fd00::20")
	wantAddrs(t, x, "nginx-set-0.nginx-svc-paris"+z, "10.96.1.10")
}

// Without clusterset zones, a clusterset.local zone is one of mcmirror's
// like any other: no clusterset name is made, whatever is imported.
func TestClusterSetOff(t *testing.T) {
	src := indextest.Fixture()
	src.AddImport("default", "web", []string{"10.97.0.1"}, httpPort)
	x := built(src, Options{Cluster: "east", Zones: []string{"cluster.local.", "clusterset.local."}})
	assert.Empty(t, x.cs, "clusterset names without clusterset")
	wantAddrs(t, x, "web-west.default.svc.clusterset.local.", "10.96.0.20", "fd00::20")
}

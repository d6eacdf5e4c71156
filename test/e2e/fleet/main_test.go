// Package fleet_test runs a fleet: ten clusters linked in a full mesh,
// each with its own coredns-mc, every cluster answering every other's
// names through an unlink, a relink and an API server's restart; and what
// a linked cluster costs the others: a real coredns-mc and controller in
// east receive nothing of west's churn of what west does not export.
package fleet_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/test/harness"
)

// fleetSize is the number of clusters of the mesh.
const fleetSize = 10

var env = harness.New(harness.Options{Clusters: func() []harness.ClusterOptions {
	cs := []harness.ClusterOptions{{Name: "east"}, {Name: "west", Workloads: true}}
	for i := len(cs); i < fleetSize; i++ {
		cs = append(cs, harness.ClusterOptions{Name: fmt.Sprintf("c%d", i)})
	}
	return cs
}(),
	// Ten API servers start at once on a machine of two cores.
	StartTimeout: 6 * time.Minute,
})

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

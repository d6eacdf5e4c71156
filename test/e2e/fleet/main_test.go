// Package fleet_test runs a fleet: ten clusters linked in a full mesh,
// each with its own coredns-mc, every cluster answering every other's
// names through an unlink, a relink and an API server's restart; and what
// a linked cluster costs the others: a real coredns-mc and controller in
// east receive nothing of west's churn of what west does not export.
package fleet_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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

// linkFile returns the path of a kubeconfig for remote with the read-only
// credentials of deploy/remote-link.yaml.
func linkFile(t *testing.T, remote *harness.Cluster) string {
	t.Helper()
	path := filepath.Join(env.Dir, remote.Name+"-link.kubeconfig")
	require.NoError(t, os.WriteFile(path, linkKubeconfig(t, remote), 0o600))
	return path
}

var (
	linkMu sync.Mutex
	linkKC = map[string][]byte{}
)

// linkKubeconfig returns a kubeconfig for remote with the read-only
// credentials of deploy/remote-link.yaml, made once per cluster.
func linkKubeconfig(t *testing.T, remote *harness.Cluster) []byte {
	t.Helper()
	linkMu.Lock()
	defer linkMu.Unlock()
	if kc, ok := linkKC[remote.Name]; ok {
		return kc
	}
	kc, err := remote.LinkKubeconfig(context.Background())
	require.NoError(t, err)
	linkKC[remote.Name] = kc
	return kc
}

// corefile is the cluster DNS of c: mcmirror (with block in its stanza)
// before kubernetes, as the chart runs it.
func corefile(c *harness.Cluster, block string) string {
	return fmt.Sprintf(`
. {
    bind 127.0.0.1
    errors
    ready 127.0.0.1:{READY}
    prometheus 127.0.0.1:{METRICS}
    mcmirror cluster.local {
        cluster %[1]s
        kubeconfig %[2]s
%[3]s        fallthrough
    }
    kubernetes cluster.local {
        kubeconfig %[2]s
    }
}
`, c.Name, c.Kubeconfig, block)
}

package harness

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// An environment of API servers alone takes up to 160 clusters (a service
// range each, 10.96.0.0/16 to 10.255.0.0/16); one that runs pods anywhere
// takes 50 (a pod range each too).
func TestClusterLimits(t *testing.T) {
	plain := func(n int) []ClusterOptions {
		var out []ClusterOptions
		for i := range n {
			out = append(out, ClusterOptions{Name: fmt.Sprintf("c%d", i)})
		}
		return out
	}
	require.NoError(t, New(Options{Clusters: plain(160)}).validate())
	require.ErrorContains(t, New(Options{Clusters: plain(161)}).validate(), "at most 160 clusters")

	withPods := plain(51)
	withPods[7].Workloads = true
	require.ErrorContains(t, New(Options{Clusters: withPods}).validate(), "50 with workloads")
	require.NoError(t, New(Options{Clusters: withPods[:50]}).validate())
}

// $MCMIRROR_REPO is where the repository's files are read from, for a
// program run away from its checkout.
func TestRepoPathFromEnvironment(t *testing.T) {
	here := RepoPath("deploy", "remote-link.yaml")
	require.FileExists(t, here, "the checkout's own file, without $MCMIRROR_REPO")
	dir := t.TempDir()
	t.Setenv("MCMIRROR_REPO", dir)
	require.Equal(t, filepath.Join(dir, "deploy", "remote-link.yaml"), RepoPath("deploy", "remote-link.yaml"))
}

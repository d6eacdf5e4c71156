// Package stockcoredns_test proves what plugin/mcmirror/README.md says under
// "Building your own CoreDNS": one line in CoreDNS's plugin.cfg, right before
// kubernetes, makes mcmirror part of a CoreDNS an operator builds. The binary
// is CoreDNS's own main package built by test/tools/coredns-stock.sh, not
// coredns-mc; it answers mcmirror's names from real API servers (east the
// local cluster, west linked) and the kubernetes plugin's names beside them.
package stockcoredns_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mcmirror/mcmirror/test/harness"
)

var env = harness.New(harness.Options{Clusters: []harness.ClusterOptions{
	{Name: "east", MCS: true}, {Name: "west", Workloads: true},
}})

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// builtCoreDNS returns the path of a CoreDNS that test/tools/coredns-stock.sh
// builds with args (none: the stock CoreDNS with mcmirror; --plain: as its
// release builds it, without mcmirror), or finds in its cache, for this
// checkout: $envVar when set (test/tools/gotest.sh builds both before the
// tests).
func builtCoreDNS(t *testing.T, envVar string, args ...string) string {
	t.Helper()
	if p := os.Getenv(envVar); p != "" {
		return p
	}
	var out bytes.Buffer
	script := harness.RepoPath("test", "tools", "coredns-stock.sh")
	cmd := exec.Command("bash", append([]string{script}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	require.NoError(t, cmd.Run(), "test/tools/coredns-stock.sh %s", strings.Join(args, " "))
	return strings.TrimSpace(out.String())
}

// repoRoot is the root of this checkout, symlinks resolved.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.EvalSymlinks(harness.RepoPath())
	require.NoError(t, err)
	return root
}

// Package stockcoredns_test proves what plugin/mcmirror/README.md says under
// "Building your own CoreDNS": one line in CoreDNS's plugin.cfg, right before
// kubernetes, makes mcmirror part of a CoreDNS an operator builds. The binary
// is CoreDNS's own main package built by test/tools/coredns-stock.sh, not
// coredns-mc; it answers mcmirror's names from real API servers (east the
// local cluster, west linked) and the kubernetes plugin's names beside them.
package stockcoredns_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mcmirror/mcmirror/test/harness"
)

var env = harness.New(harness.Options{Clusters: []harness.ClusterOptions{
	{Name: "east", MCS: true}, {Name: "west", Workloads: true},
}})

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

var (
	stockOnce sync.Once
	stockPath string
	stockErr  error
)

// stockCoreDNS returns the path of the stock CoreDNS: $MCMIRROR_COREDNS_STOCK
// when set (test/tools/gotest.sh builds it before the tests), otherwise what
// test/tools/coredns-stock.sh builds, or finds in its cache, for this
// checkout.
func stockCoreDNS(t *testing.T) string {
	t.Helper()
	stockOnce.Do(func() {
		if p := os.Getenv("MCMIRROR_COREDNS_STOCK"); p != "" {
			stockPath = p
			return
		}
		var out bytes.Buffer
		cmd := exec.Command("bash", filepath.Join(repoRoot(t), "test", "tools", "coredns-stock.sh"))
		cmd.Stdout, cmd.Stderr = &out, os.Stderr
		if err := cmd.Run(); err != nil {
			stockErr = fmt.Errorf("test/tools/coredns-stock.sh: %w", err)
			return
		}
		stockPath = strings.TrimSpace(out.String())
	})
	require.NoError(t, stockErr)
	return stockPath
}

// repoRoot is the root of this checkout, symlinks resolved: go test runs a
// package in its directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.EvalSymlinks(filepath.Join("..", "..", ".."))
	require.NoError(t, err)
	root, err = filepath.Abs(root)
	require.NoError(t, err)
	return root
}

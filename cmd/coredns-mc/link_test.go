package main

import (
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/trust"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runCmd runs link or unlink and returns the exit code, stdout and stderr.
func runCmd(name string, args ...string) (int, string, string) {
	return runWith(func(args []string, stdout, stderr io.Writer) int { return runLinkCmd(name, args, stdout, stderr) }, args...)
}

// A mistake in the command line is one line on stderr and exit code 2,
// before any cluster is contacted.
func TestLinkFlags(t *testing.T) {
	for _, c := range []struct {
		cmd  string
		args []string
		want string
	}{
		{"link", nil, "coredns-mc link: --cluster is required"},
		{"unlink", nil, "coredns-mc unlink: --cluster is required"},
		{"link", []string{"--cluster", "West"}, `invalid cluster name "West"`},
		{"link", []string{"--cluster", "west.eu"}, `invalid cluster name "west.eu"`},
		{"unlink", []string{"--cluster", "global"}, "reserved for the global names"},
		{"link", []string{"--cluster", "east", "--source-cluster", "east"}, `cluster name "east" is the source cluster's own name`},
		{"link", []string{"--cluster", "west", "--source-cluster", "East"}, `source: invalid cluster name "East"`},
		{"link", []string{"--cluster", "west", "--namespace", "Mc_mirror"}, `invalid namespace "Mc_mirror"`},
		{"unlink", []string{"--cluster", "west", "--link-namespace", "a/b"}, `invalid namespace "a/b"`},
		{"link", []string{"--cluster", "west", "extra"}, `unexpected arguments ["extra"]`},
		{"link", []string{"--cluster", "west", "--nope"}, "flag provided but not defined: -nope (-h lists the flags)"},
		{"unlink", []string{"--cluster", "west", "--api-server", "https://x"}, "flag provided but not defined: -api-server"},
		{"link", []string{"--cluster", "west", "--api-server", "http://10.0.0.1:6443"}, "--api-server: API server URL \"http://10.0.0.1:6443\": want https://HOST[:PORT]"},
		{"link", []string{"--cluster", "west", "--token-timeout", "0s"}, "--token-timeout must be positive"},
		{"link", []string{"--cluster", "west", "--token-timeout", "soon"}, `invalid value "soon" for flag -token-timeout`},
	} {
		usageError(t, c.want, append([]string{c.cmd}, c.args...)...)(runCmd(c.cmd, c.args...))
	}
}

func TestLinkHelp(t *testing.T) {
	code, _, stderr := runCmd("link", "-h")
	assert.Equal(t, 0, code)
	assert.Contains(t, stderr, "usage: coredns-mc link --cluster NAME")
	assert.Contains(t, stderr, "-source-context")
	code, _, stderr = runCmd("unlink", "-h")
	assert.Equal(t, 0, code)
	assert.Contains(t, stderr, "usage: coredns-mc unlink --cluster NAME")
	assert.NotContains(t, stderr, "-api-server")
}

const kubeconfigFmt = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: %q, %s}
users:
- name: u
  user: {token: abc}
contexts:
- name: west
  context: {cluster: c, user: u}
- name: paris
  context: {cluster: c, user: u}
current-context: %s
`

// writeKubeconfig writes a kubeconfig for server and returns its path.
func writeKubeconfig(t *testing.T, server, tls, current string) string {
	t.Helper()
	if tls == "" {
		tls = "certificate-authority-data: " + base64.StdEncoding.EncodeToString(testCA(t))
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(path, fmt.Appendf(nil, kubeconfigFmt, server, tls, current), 0o600))
	return path
}

// testCA returns the PEM of a self-signed CA certificate.
func testCA(t *testing.T) []byte {
	t.Helper()
	root, err := trust.NewRoot("test.example", time.Now(), time.Now().Add(time.Hour))
	require.NoError(t, err)
	return trust.CertPEM(root.Cert)
}

// Kubeconfigs that cannot be used, and API servers that cannot be reached:
// one line on stderr that names the cause, exit code 1, nothing printed.
func TestLinkClusterErrors(t *testing.T) {
	down := "https://" + freeAddr(t)
	good := writeKubeconfig(t, down, "", "west")
	garbage := filepath.Join(t.TempDir(), "garbage")
	require.NoError(t, os.WriteFile(garbage, []byte("clusters: {{{"), 0o600))
	otherDown := "https://" + freeAddr(t)
	other := writeKubeconfig(t, otherDown, "", "west")

	for _, c := range []struct {
		cmd  string
		args []string
		want string
	}{
		{"link", []string{"--kubeconfig", "/nonexistent/kubeconfig"}, "target cluster: --kubeconfig /nonexistent/kubeconfig: no such file or directory"},
		{"unlink", []string{"--kubeconfig", "/nonexistent/kubeconfig"}, "target cluster: --kubeconfig /nonexistent/kubeconfig: no such file or directory"},
		{"link", []string{"--kubeconfig", garbage}, "target cluster: kubeconfig " + garbage + ":"},
		{"link", []string{"--kubeconfig", good, "--context", "tokyo"}, `target cluster: --context "tokyo": no such context in ` + good + ` (it has "paris", "west")`},
		{"link", []string{"--kubeconfig", writeKubeconfig(t, down, "", `""`)}, "has no current context: give --kubeconfig or --context"},
		{"link", []string{"--kubeconfig", good, "--source-kubeconfig", "/nonexistent"}, "source cluster: --source-kubeconfig /nonexistent: no such file or directory"},
		{"link", []string{"--kubeconfig", good, "--source-kubeconfig", other, "--source-context", "tokyo"}, `source cluster: --source-context "tokyo": no such context`},
		{"link", []string{"--kubeconfig", good, "--source-kubeconfig", good, "--source-context", "paris"}, "the source and the target are the same API server (" + down + "): a cluster does not link to itself"},
		{"link", []string{"--kubeconfig", writeKubeconfig(t, down, "insecure-skip-tls-verify: true", "west")}, "target cluster " + down + ": the kubeconfig skips TLS verification (insecure-skip-tls-verify)"},
		{"link", []string{"--kubeconfig", writeKubeconfig(t, "http://"+freeAddr(t), "", "west")}, "want https://HOST[:PORT]"},
		{"link", []string{"--kubeconfig", good}, "target cluster " + down + ": unreachable: dial tcp " + strings.TrimPrefix(down, "https://") + ": connect: connection refused"},
		{"link", []string{"--kubeconfig", good, "--context", "paris"}, "target cluster " + down + ": unreachable:"},
		{"unlink", []string{"--kubeconfig", good}, "target cluster " + down + ": unreachable:"},
		{"link", []string{"--kubeconfig", good, "--source-kubeconfig", other}, "target cluster " + down + ": unreachable:"},
		// unlink starts with the source.
		{"unlink", []string{"--kubeconfig", good, "--source-kubeconfig", other}, "source cluster " + otherDown + ": unreachable:"},
	} {
		args := append([]string{"--cluster", "west"}, c.args...)
		code, stdout, stderr := runCmd(c.cmd, args...)
		assert.Equal(t, 1, code, "%s %q: %s", c.cmd, args, stderr)
		// The error is one line, the last; unlink may have printed the
		// source's Secret and said so before it.
		lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
		assert.Contains(t, lines[len(lines)-1], c.want, "%s %q", c.cmd, args)
		assert.Equal(t, 1, strings.Count(stderr, "coredns-mc "+c.cmd+":"), "one error line: %q", stderr)
		if c.cmd == "link" {
			assert.Empty(t, stdout, "%s %q", c.cmd, args)
			assert.Len(t, lines, 1)
		}
	}
}

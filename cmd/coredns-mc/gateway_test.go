package main

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcmirror/mcmirror/gateway/gatewaytest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stderrOf runs f and returns what it wrote to standard error.
func stderrOf(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	old := os.Stderr
	os.Stderr = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	f()
	os.Stderr = old
	w.Close()
	return <-done
}

// Bad flags and bad certificates exit 2 with one line that names the
// problem, before anything is contacted.
func TestGatewayFlags(t *testing.T) {
	dir, _, east := eastFiles(t)
	other, err := gatewaytest.NewCA("other root")
	require.NoError(t, err)
	foreign, err := other.IssueFiles(t.TempDir(), "east", gatewaytest.Options{})
	require.NoError(t, err)
	empty := filepath.Join(dir, "empty.pem")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	tls := east.Args()
	with := func(extra ...string) []string { return append(append([]string{"--cluster", "east"}, tls...), extra...) }
	kc, _ := testKubeconfigs(t, dir)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()

	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--cluster is required"},
		{[]string{"--cluster", "east"}, "certificates: certificate, key and trust root files are all required"},
		{[]string{"--cluster", "Bad_Name"}, "--cluster"},
		{with("--peer", "east=10.0.0.1:4143"), "that is this cluster's name"},
		{with("--ingress-address", "", "--egress=false"), "nothing to do"},
		{with("--dial-timeout", "0s"), "must be positive"},
		{with("--max-connections", "0"), "--max-connections"},
		{with("--export-selector", ""), "--export-selector"},
		{with("extra"), "unexpected arguments"},
		{with("--peer", "west"), `invalid value "west" for flag -peer: want NAME=HOST:PORT`},
		{with("--no-such-flag"), "flag provided but not defined: -no-such-flag"},
		{[]string{"--cluster", "west", "--tls-cert", east.Cert, "--tls-key", east.Key, "--tls-ca", east.CA}, `names cluster "east", not --cluster "west"`},
		{[]string{"--cluster", "east", "--tls-cert", east.Cert, "--tls-key", east.Key, "--tls-ca", foreign.CA}, "does not chain to"},
		{[]string{"--cluster", "east", "--tls-cert", east.Cert, "--tls-key", foreign.Key, "--tls-ca", east.CA}, "private key does not match"},
		{[]string{"--cluster", "east", "--tls-cert", east.Cert, "--tls-key", east.Key, "--tls-ca", empty}, "no PEM certificate"},
		{with("--kubeconfig", "/nonexistent"), "local cluster: kubeconfig /nonexistent"},
		{with("--allow-cluster", "Bad_Name"), `invalid value "Bad_Name" for flag -allow-cluster`},
		{with("--allow-cluster", "west", "--allow-cluster", "west"), `cluster "west" given twice`},
		{with("--allow-cluster", "east"), "--allow-cluster east: that is this cluster's name"},
		{with("--allow-cluster", "west", "--ingress-address", ""), "--allow-cluster is the ingress's allow-list, and there is no ingress"},
		{with("--kubeconfig", kc, "--ingress-address", taken.Addr().String()), "--ingress-address: listen tcp " + taken.Addr().String() + ": bind: address already in use"},
		{with("--kubeconfig", kc, "--ingress-address", "127.0.0.1:0", "--metrics-addr", taken.Addr().String()), "--metrics-addr: listen tcp " + taken.Addr().String() + ": bind: address already in use"},
	} {
		var code int
		out := stderrOf(t, func() { code = runGateway(tc.args) })
		assert.Equal(t, 2, code, "%q", tc.args)
		assert.Contains(t, out, tc.want, "%q", tc.args)
		assert.Equal(t, 1, strings.Count(strings.TrimSpace(out), "\n")+1, "one line for %q: %s", tc.args, out)
	}
}

// eastFiles issues east's gateway certificate from a new trust root, into
// files in a temporary directory: the directory, the root, and the files.
func eastFiles(t *testing.T) (string, *gatewaytest.CA, gatewaytest.Files) {
	t.Helper()
	dir := t.TempDir()
	ca, err := gatewaytest.NewCA("root")
	require.NoError(t, err)
	east, err := ca.IssueFiles(dir, "east", gatewaytest.Options{})
	require.NoError(t, err)
	return dir, ca, east
}

package main

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runWith runs a subcommand, run, with args and returns its exit code,
// stdout and stderr.
func runWith(run func([]string, io.Writer, io.Writer) int, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func runCheckCmd(args ...string) (int, string, string) { return runWith(runCheck, args...) }

// usageError checks what a mistake in the command line args makes: exit
// code 2, nothing on stdout, one line on stderr that holds want.
func usageError(t *testing.T, want string, args ...string) func(code int, stdout, stderr string) {
	return func(code int, stdout, stderr string) {
		t.Helper()
		assert.Equal(t, 2, code, "%q: %s", args, stderr)
		assert.Empty(t, stdout, "%q", args)
		assert.Contains(t, stderr, want, "%q", args)
		assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
	}
}

// A mistake in the command line is one line on stderr and exit code 2,
// before any cluster is contacted.
func TestCheckFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"extra"}, `coredns-mc check: unexpected arguments ["extra"]`},
		{[]string{"-o", "yaml"}, `coredns-mc check: -o "yaml": want text or json`},
		{[]string{"--timeout", "0s"}, "coredns-mc check: --timeout must be positive"},
		{[]string{"--dns-server", "10.96.0.10"}, `coredns-mc check: --dns-server "10.96.0.10": want HOST:PORT`},
		{[]string{"--gateway-ca", "/nonexistent/ca.crt"}, "coredns-mc check: --gateway-ca: open /nonexistent/ca.crt: no such file or directory"},
		{[]string{"--kubeconfig", "/nonexistent/kubeconfig"}, "coredns-mc check: cluster: --kubeconfig /nonexistent/kubeconfig: no such file or directory"},
		{[]string{"--nope"}, "coredns-mc check: flag provided but not defined: -nope (-h lists the flags)"},
	} {
		usageError(t, c.want, c.args...)(runCheckCmd(c.args...))
	}
}

func TestCheckHelp(t *testing.T) {
	code, stdout, stderr := runCheckCmd("-h")
	assert.Equal(t, 0, code)
	assert.Empty(t, stdout)
	for _, f := range []string{"-kubeconfig", "-context", "-o", "-dns-server", "-gateway-ca", "-timeout"} {
		assert.Contains(t, stderr, "  "+f+" ", "the usage lists %s", f)
	}
	assert.Contains(t, stderr, "usage: coredns-mc check")
	_, registered := subcommands["check"]
	assert.True(t, registered)
}

// An API server that does not answer is a failed check (exit code 1), in
// the text report and in the JSON one, within the timeout.
func TestCheckUnreachable(t *testing.T) {
	server := "https://" + freeAddr(t) // nothing listens there now
	kc := writeKubeconfig(t, server, "insecure-skip-tls-verify: true", "west")

	code, stdout, stderr := runCheckCmd("--kubeconfig", kc, "--timeout", "5s")
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stdout, "fail  api  the API server "+server+" does not answer: unreachable:")
	assert.Contains(t, stdout, "fix: check --kubeconfig and --context")
	assert.Contains(t, stdout, "0 ok, 0 warn, 1 fail")

	code, stdout, _ = runCheckCmd("--kubeconfig", kc, "-o", "json")
	assert.Equal(t, 1, code)
	var rep struct {
		FormatVersion int `json:"formatVersion"`
		Results       []struct {
			ID, Status, Message, Fix string
		} `json:"results"`
		Summary struct{ OK, Warn, Fail int } `json:"summary"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	assert.Equal(t, 1, rep.FormatVersion)
	require.Len(t, rep.Results, 1)
	assert.Equal(t, "api", rep.Results[0].ID)
	assert.Equal(t, "fail", rep.Results[0].Status)
	assert.NotEmpty(t, rep.Results[0].Fix)
	assert.Equal(t, 1, rep.Summary.Fail)
}

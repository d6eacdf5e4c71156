package main

import (
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseInterleaved(t *testing.T) {
	for _, c := range []struct {
		args       []string
		positional []string
		topology   string
		verbose    bool
	}{
		{[]string{"east", "west"}, []string{"east", "west"}, "", false},
		{[]string{"--topology", "hub=east", "east", "west"}, []string{"east", "west"}, "hub=east", false},
		{[]string{"east", "--topology=hub=east", "west", "-v"}, []string{"east", "west"}, "hub=east", true},
		{[]string{"east", "west", "-v", "paris"}, []string{"east", "west", "paris"}, "", true},
		{[]string{"-v", "--", "east", "-topology", "x"}, []string{"east", "-topology", "x"}, "", true},
		{[]string{"-v"}, nil, "", true},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		topology := fs.String("topology", "", "")
		verbose := fs.Bool("v", false, "")
		got, err := parseInterleaved(fs, c.args)
		require.NoError(t, err, "%q", c.args)
		assert.Equal(t, c.positional, got, "%q", c.args)
		assert.Equal(t, c.topology, *topology, "%q", c.args)
		assert.Equal(t, c.verbose, *verbose, "%q", c.args)
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	_, err := parseInterleaved(fs, []string{"east", "--nope", "west"})
	assert.EqualError(t, err, "flag provided but not defined: -nope")
}

// Over a list of contexts, a mistake in the command line is one line on
// stderr and exit code 2, before any cluster is contacted.
func TestLinkFleetFlags(t *testing.T) {
	kc := writeKubeconfig(t, "https://127.0.0.1:1", "", "west")
	for _, c := range []struct {
		cmd  string
		args []string
		want string
	}{
		{"link", []string{"east", "west", "--cluster", "west"},
			`unexpected arguments ["east" "west"] with --cluster: those flags make one link; a list of contexts links the pairs of a fleet, without them`},
		{"unlink", []string{"east", "--source-context", "paris", "west"}, `unexpected arguments ["east" "west"] with --source-context`},
		{"link", []string{"east"}, "a fleet takes two contexts or more, not 1"},
		{"link", []string{"east", "west", "east"}, `context "east" listed twice`},
		{"link", []string{"east", "West"}, `context "West": invalid cluster name "West"`},
		{"link", []string{"east", "kind-west", "--cluster-name", "kind-west=east"}, `contexts "east" and "kind-west" are both named "east"`},
		{"link", []string{"east", "west", "--cluster-name", "west"}, `invalid value "west" for flag -cluster-name: "west": want CONTEXT=VALUE`},
		{"link", []string{"east", "west", "--topology", "hub=paris"}, `topology "hub=paris": "paris" is no context or cluster name of the list`},
		{"link", []string{"east", "west", "paris", "--topology", "east->west"}, `context "paris" is in no pair`},
		{"link", []string{"east", "west", "--api-server", "https://10.0.0.1:6443"},
			`--api-server "https://10.0.0.1:6443": want CONTEXT=VALUE: with a list of contexts, give CONTEXT=https://HOST[:PORT]`},
		{"link", []string{"east", "west", "--api-server", "paris=https://10.0.0.1:6443"}, `--api-server paris=https://10.0.0.1:6443: context "paris" is not in the list`},
		{"link", []string{"east", "west", "--api-server", "west=https://a:6443", "--api-server", "west=https://b:6443"}, `--api-server: context "west" given twice`},
		{"link", []string{"east", "west", "--api-server", "west=http://10.0.0.1:6443"}, `--api-server west: API server URL "http://10.0.0.1:6443": want https://HOST[:PORT]`},
		{"unlink", []string{"east", "west", "--api-server", "west=https://a:6443"}, "flag provided but not defined: -api-server"},
		{"link", []string{"east", "west", "--parallel", "0"}, "--parallel must be at least 1"},
		{"link", []string{"east", "west", "--token-timeout", "0s"}, "--token-timeout must be positive"},
		{"link", []string{"east", "west", "--link-namespace", "A"}, `invalid namespace "A"`},
		{"link", []string{"--cluster", "west", "--topology", "hub=east"}, "--topology goes with a list of contexts (coredns-mc link CONTEXT CONTEXT... --topology ...)"},
		{"unlink", []string{"--cluster", "west", "--cluster-name", "a=b", "--parallel", "2"}, "--cluster-name, --parallel goes with a list of contexts"},
		{"link", []string{"east", "west", "--kubeconfig", "/nonexistent/kubeconfig"}, "cluster east: --kubeconfig /nonexistent/kubeconfig: no such file or directory"},
		{"link", []string{"east", "west", "--kubeconfig", kc}, `cluster east: context "east": no such context in ` + kc + ` (it has "paris", "west")`},
		{"unlink", []string{"west", "paris", "--kubeconfig", kc}, `contexts "west" and "paris" reach the same API server (https://127.0.0.1:1): a cluster does not link to itself`},
	} {
		usageError(t, c.want, append([]string{c.cmd}, c.args...)...)(runCmd(c.cmd, c.args...))
	}
}

func TestLinkFleetHelp(t *testing.T) {
	for _, name := range []string{"link", "unlink"} {
		code, _, stderr := runCmd(name, "-h")
		assert.Equal(t, 0, code)
		assert.Contains(t, stderr, "coredns-mc "+name+" CONTEXT CONTEXT... [--topology mesh|hub=C|A->B,...]")
		for _, f := range []string{"-cluster-name", "-topology", "-parallel"} {
			assert.Contains(t, stderr, "  "+f+" ", "%s lists %s", name, f)
		}
	}
}

func TestCheckFleetFlags(t *testing.T) {
	kc := writeKubeconfig(t, "https://127.0.0.1:1", "", "west")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"east", "west", "--context", "east"}, "--context goes with one cluster, not with a list of contexts (east west)"},
		{[]string{"east", "west", "--dns-server", "10.0.0.10:53", "--gateway-ca", "ca.crt"}, "--dns-server, --gateway-ca goes with one cluster"},
		{[]string{"east", "east"}, `context "east" listed twice`},
		{[]string{"east", "west", "--topology", "east->paris"}, `topology "east->paris": "paris" is no context or cluster name of the list`},
		{[]string{"--topology", "mesh"}, "--topology goes with a list of contexts (coredns-mc check CONTEXT CONTEXT... --topology ...)"},
		{[]string{"east", "west", "-o", "yaml"}, `-o "yaml": want text or json`},
		{[]string{"east", "west", "--kubeconfig", kc}, `cluster east: context "east": no such context in ` + kc},
	} {
		usageError(t, "coredns-mc check: "+c.want, c.args...)(runCheckCmd(c.args...))
	}
	code, _, stderr := runCheckCmd("-h")
	assert.Equal(t, 0, code)
	assert.Contains(t, stderr, "coredns-mc check CONTEXT CONTEXT...")
	for _, f := range []string{"-cluster-name", "-topology"} {
		assert.Contains(t, stderr, "  "+f+" ")
	}
}

// Every pair of a fleet whose API servers do not answer is a failure in
// the one report, exit code 1; the pairs are judged from their sources.
func TestCheckFleetUnreachable(t *testing.T) {
	kc := writeKubeconfig(t, "https://127.0.0.1:1", "insecure-skip-tls-verify: true", "west")
	code, stdout, stderr := runCheckCmd("west", "paris", "--kubeconfig", kc, "--timeout", "2s")
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stdout, "mcmirror check of 2 clusters (west, paris), topology mesh: 2 pairs")
	assert.Contains(t, stdout, "west    paris   ?       ?       -            ?        fail")
	assert.Contains(t, stdout, "fail  api west->paris: the API server of west (https://127.0.0.1:1) does not answer: unreachable:")
	assert.Contains(t, stdout, "0 ok, 0 warn, 2 fail")
}

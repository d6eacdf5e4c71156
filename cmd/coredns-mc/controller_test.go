package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLinkFlag(t *testing.T) {
	dir := t.TempDir()
	withColon := filepath.Join(dir, "a:b.kubeconfig")
	require.NoError(t, os.WriteFile(withColon, nil, 0o600))

	var l linkFlags
	require.NoError(t, l.Set("west=/etc/west.kubeconfig"))
	require.NoError(t, l.Set("paris=/etc/paris.kubeconfig:admin"))
	require.NoError(t, l.Set("tokyo="+withColon))
	assert.Equal(t, linkFlags{
		{Name: "west", Kubeconfig: "/etc/west.kubeconfig"},
		{Name: "paris", Kubeconfig: "/etc/paris.kubeconfig", Context: "admin"},
		{Name: "tokyo", Kubeconfig: withColon},
	}, l)
	for _, bad := range []string{"west=/x", "noequals", "=x", "x=", "Bad_Name=/x", "global=/x"} {
		assert.Error(t, l.Set(bad), bad)
	}
}

// Bad flags are a usage error (exit 2) with one line that names the
// problem, before anything is contacted: run through coredns-mc's main, so
// that a flag let through shows as a controller that keeps running.
func TestControllerFlags(t *testing.T) {
	dir := t.TempDir()
	// A kubeconfig of a server nothing listens on: a mistake must be found
	// before it is dialled.
	kc, garbage := testKubeconfigs(t, dir)
	base := []string{"--cluster", "east", "--kubeconfig", kc, "--egress-address", "10.0.0.1", "--egress-ports", "1-2", "--metrics-addr", ""}
	with := func(extra ...string) []string { return append(append([]string(nil), base...), extra...) }

	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--cluster is required"},
		{[]string{"--cluster", "east"}, "--egress-address or --egress-service is required"},
		{[]string{"--cluster", "Bad_Name", "--egress-address", "10.0.0.1", "--egress-ports", "1-2"}, "--cluster: "},
		{[]string{"--cluster", "east", "--egress-address", "127.0.0.1", "--egress-ports", "1-2", "--kubeconfig", "/nonexistent"}, "--egress-address 127.0.0.1: the API server refuses loopback"},
		{[]string{"--cluster", "east", "--egress-address", "10.0.0.1", "--egress-ports", "2-1"}, "--egress-ports: "},
		{[]string{"--cluster", "east", "--egress-address", "10.0.0.1"}, "--egress-ports: "},
		{[]string{"--cluster", "east", "--egress-address", "not-an-ip", "--egress-ports", "1-2"}, "--egress-address: "},
		{[]string{"--cluster", "east", "--egress-address", "10.0.0.1", "--egress-service", "mcmirror/gw", "--egress-ports", "1-2"}, "give one"},
		{[]string{"--cluster", "east", "--egress-service", "gw", "--egress-ports", "1-2"}, "--egress-service: "},
		{[]string{"--cluster", "east", "--egress-service", "mcmirror/gw/x", "--egress-ports", "1-2"}, "--egress-service: "},
		{[]string{"--cluster", "east", "--egress-service", "Mcmirror/gw", "--egress-ports", "1-2"}, "--egress-service: "},
		{[]string{"--cluster", "east", "--egress-service", "mcmirror/", "--egress-ports", "1-2"}, "--egress-service: "},
		{[]string{"--cluster", "east", "--egress-service", "mcmirror/gw", "--egress-ports", "2-1"}, "--egress-ports: "},
		{with("--export-selector", ""), `--export-selector "": must select some Services`},
		{with("--export-selector", "a=b=c"), `--export-selector "a=b=c"`},
		{with("--link", "east=/x"), "--link east: that is this cluster's name"},
		{with("--link", "west"), `invalid value "west" for flag -link: want NAME=KUBECONFIG[:CONTEXT]`},
		{with("--link", "west=/x", "--link", "west=/y"), `link "west" given twice`},
		{with("--link", "west=/nonexistent"), "link west: kubeconfig /nonexistent: stat"},
		{with("--link", "west="+garbage), "link west: kubeconfig " + garbage},
		{with("--link", "west="+kc+":nope"), `link west: kubeconfig ` + kc + `: no context "nope"`},
		{with("--link-secrets", "Bad_NS"), `--link-secrets: bad namespace "Bad_NS"`},
		{with("--link-secrets", "/a=b"), `--link-secrets: bad namespace ""`},
		{with("--link-secrets", "links/a=b=c"), `--link-secrets: bad selector "a=b=c"`},
		{with("--link-secrets", "links", "--allow-insecure-kubeconfig", "exec,everything"),
			`invalid value "exec,everything" for flag -allow-insecure-kubeconfig: unknown value "everything" (want exec, auth-provider, files, http, skip-tls-verify)`},
		{with("--allow-insecure-kubeconfig", "exec"), "--allow-insecure-kubeconfig without --link-secrets"},
		{with("--workers", "0"), "--workers must be at least 1"},
		{with("--workers", "many"), `invalid value "many" for flag -workers`},
		{with("--pod-grace", "-1s"), "--pod-grace and --link-removal-grace must not be negative"},
		{with("--link-removal-grace", "-1s"), "--pod-grace and --link-removal-grace must not be negative"},
		{with("--pod-grace", "30"), `invalid value "30" for flag -pod-grace`},
		{with("--kube-api-qps", "0"), "--kube-api-qps must be positive"},
		{with("--kube-api-burst", "0"), "--kube-api-burst at least 1"},
		{with("--leader-elect", "--leader-elect-renew-deadline", "20s"), "--leader-elect-lease-duration must exceed --leader-elect-renew-deadline"},
		{with("--leader-elect", "--leader-elect-retry-period", "0s"), "must be positive"},
		{with("--leader-elect", "--leader-elect-name", "Bad_Name"), `--leader-elect-name "Bad_Name" is not a valid name`},
		{with("--metrics-addr", "nope:nope"), "--metrics-addr: "},
		{with("extra"), `unexpected arguments ["extra"]`},
		{with("--no-such-flag"), "flag provided but not defined: -no-such-flag (-h lists the flags)"},
		{[]string{"--cluster", "east", "--egress-address", "10.0.0.1", "--egress-ports", "1-2", "--kubeconfig", "/nonexistent"}, "local cluster: kubeconfig /nonexistent: stat"},
		{with("--context", "nope"), `local cluster: kubeconfig ` + kc + `: no context "nope"`},
	} {
		code, out := runCorednsMC(t, false, append([]string{"controller"}, tc.args...)...)
		assert.Equal(t, 2, code, "%q", tc.args)
		assert.Contains(t, out, tc.want, "%q", tc.args)
		assert.True(t, strings.HasPrefix(out, "coredns-mc controller: "), "%q: %s", tc.args, out)
		assert.Equal(t, 1, strings.Count(strings.TrimSpace(out), "\n")+1, "one line for %q: %s", tc.args, out)
	}
}

func TestControllerHelp(t *testing.T) {
	var code int
	out := stderrOf(t, func() { code = runController([]string{"-h"}) })
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "usage: coredns-mc controller")
	assert.Contains(t, out, "-allow-insecure-kubeconfig")
}

package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/mcmirror/mcmirror/internal/dnspatch"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runDNSCmd runs `coredns-mc dns args...` and returns the exit code,
// stdout and stderr.
func runDNSCmd(args ...string) (int, string, string) { return runWith(runDNS, args...) }

// projectPatchFile is deploy/patches/coredns.yaml.
const projectPatchFile = "../../deploy/patches/coredns.yaml"

// A mistake in the command line or the patch file is one line on stderr
// and exit code 2, before any cluster is contacted.
func TestDNSFlags(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
		return p
	}
	replicas := write("replicas.yaml", "- {op: test, path: /spec/replicas, value: 2}\n- {op: replace, path: /spec/replicas, value: 3}\n")
	empty := write("empty.yaml", "# nothing\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "coredns-mc dns: want apply or revert"},
		{[]string{"undo"}, "coredns-mc dns: want apply or revert"},
		{[]string{"apply"}, "coredns-mc dns apply: --patch-file is required"},
		{[]string{"apply", "--patch-file", filepath.Join(dir, "absent.yaml")}, "--patch-file: open " + filepath.Join(dir, "absent.yaml") + ": no such file or directory"},
		{[]string{"apply", "--patch-file", empty}, "--patch-file " + empty + ": no operations"},
		{[]string{"apply", "--patch-file", replicas}, "operation 2 (replace /spec/replicas 3): changes /spec/replicas"},
		{[]string{"apply", "--patch-file", projectPatchFile, "--deployment", "coredns"}, `--deployment "coredns": want NAMESPACE/NAME`},
		{[]string{"revert", "--deployment", "Kube_System/coredns"}, `--deployment "Kube_System/coredns": want NAMESPACE/NAME`},
		{[]string{"revert", "--deployment", "kube-system/"}, `want NAMESPACE/NAME`},
		{[]string{"revert", "--timeout", "0s"}, "coredns-mc dns revert: --timeout must be positive"},
		{[]string{"revert", "--timeout", "soon"}, `invalid value "soon" for flag -timeout`},
		{[]string{"revert", "--patch-file", projectPatchFile}, "flag provided but not defined: -patch-file (-h lists the flags)"},
		{[]string{"revert", "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"apply", "--patch-file", projectPatchFile, "--wait=maybe"}, `invalid boolean value "maybe" for -wait`},
	} {
		usageError(t, c.want, c.args...)(runDNSCmd(c.args...))
	}
}

func TestDNSHelp(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"help"}} {
		code, _, stderr := runDNSCmd(args...)
		assert.Equal(t, 0, code)
		assert.Contains(t, stderr, "usage: coredns-mc dns apply --patch-file FILE")
		assert.Contains(t, stderr, "coredns-mc dns revert [--deployment NAMESPACE/NAME]")
	}
	code, _, stderr := runDNSCmd("apply", "-h")
	assert.Equal(t, 0, code)
	assert.Contains(t, stderr, "Flags of apply:")
	assert.Contains(t, stderr, "-patch-file")
	assert.Contains(t, stderr, `(default "kube-system/coredns")`)
	code, _, stderr = runDNSCmd("revert", "-h")
	assert.Equal(t, 0, code)
	assert.NotContains(t, stderr, "-patch-file string")
}

// Outside a pod, without a kubeconfig, it says what to give; with one
// whose server does not answer, it says so. Either way, exit code 1.
func TestDNSNoCluster(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	code, stdout, stderr := runDNSCmd("revert")
	assert.Equal(t, 1, code)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, "coredns-mc dns revert: unable to load in-cluster configuration")
	assert.Contains(t, stderr, "outside a pod, give --kubeconfig or --context")

	kc := writeKubeconfig(t, "https://127.0.0.1:1", "", "west")
	code, _, stderr = runDNSCmd("apply", "--patch-file", projectPatchFile, "--kubeconfig", kc)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "coredns-mc dns apply: kube-system/coredns: get: ")
	assert.Contains(t, stderr, "connection refused")
	code, _, stderr = runDNSCmd("apply", "--patch-file", projectPatchFile, "--kubeconfig", kc, "--context", "other")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, `no context "other"`)
}

// A failed test of the patch is reported with its path, what the
// Deployment has there, and that the patch changed nothing.
func TestDNSDoesNotApply(t *testing.T) {
	c := &dnsCmd{action: "apply", ns: "kube-system", name: "coredns", patchFile: "coredns.yaml"}
	p := dnspatch.Plan{First: 1, End: 21, Records: true}
	err := c.doesNotApply(p, &dnspatch.OpError{
		Index: 4,
		Op:    dnspatch.Op{Op: "test", Path: "/spec/template/spec/volumes/0/name", Value: []byte(`"config-volume"`)},
		Found: []byte(`"coredns-config"`),
	})
	assert.EqualError(t, err, `kube-system/coredns is not laid out as kubeadm lays out its CoreDNS, which coredns.yaml expects: `+
		`operation 4 of the patch: /spec/template/spec/volumes/0/name is "coredns-config", where the patch tests for "config-volume". `+
		`The patch changed nothing (deploy/README.md, "The cluster DNS", says what it needs)`)

	p.Records = false
	err = c.doesNotApply(p, &dnspatch.OpError{Index: 9, Op: dnspatch.Op{Op: "test", Path: "/spec/template/spec/containers/0/livenessProbe/httpGet/path", Value: []byte(`"/health"`)}})
	assert.ErrorContains(t, err, "operation 9 of the patch (applied to the original recorded in annotation mcmirror.dev/dns-original): "+
		`/spec/template/spec/containers/0/livenessProbe/httpGet/path is missing, where the patch tests for "/health"`)

	err = c.doesNotApply(p, &dnspatch.OpError{Index: 0, Op: dnspatch.Op{Op: "add", Path: "/spec/template"}, Err: errors.New("boom")})
	assert.ErrorContains(t, err, "the original recorded in annotation mcmirror.dev/dns-original cannot be put back")
}

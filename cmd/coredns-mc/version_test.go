package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coredns/coredns/coremain"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A binary built with -ldflags -X prints mcmirror's version and commit, then
// CoreDNS's version line, for -version, --version and version alike; CoreDNS
// flags around -version do not change that.
func TestVersionLdflags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds coredns-mc")
	}
	bin := filepath.Join(t.TempDir(), "coredns-mc")
	build := exec.Command("go", "build", "-o", bin,
		"-ldflags", "-X main.version=v9.8.7-test -X main.commit=abc1234def56", ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	want := "mcmirror v9.8.7-test (commit abc1234def56)\nCoreDNS-" + coremain.CoreVersion + "\n"
	for _, args := range [][]string{{"-version"}, {"--version"}, {"version"}, {"-conf", "/nonexistent", "-version"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if assert.NoError(t, err, "coredns-mc %q: %s", args, out) {
			assert.True(t, strings.HasPrefix(string(out), want), "coredns-mc %q printed\n%s\nwant it to begin with\n%s", args, out, want)
		}
	}
}

// Without -ldflags the version is "dev" and the commit is the VCS revision
// Go recorded, or "unknown".
func TestVersionDefault(t *testing.T) {
	var b bytes.Buffer
	printVersion(&b)
	first, rest, _ := strings.Cut(b.String(), "\n")
	assert.Regexp(t, `^mcmirror (.* )?\(commit `, first)
	assert.True(t, strings.HasPrefix(rest, "CoreDNS-"+coremain.CoreVersion+"\n"), "second line of %q", b.String())
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"-version"}, true},
		{[]string{"-conf", "x", "--version"}, true},
		{[]string{"-version=true"}, true},
		{[]string{"-conf", "x"}, false},
		{[]string{"--", "-version"}, false},
	} {
		assert.Equal(t, c.want, versionFlag(c.args), "versionFlag(%q)", c.args)
	}
}

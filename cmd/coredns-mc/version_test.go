package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coredns/coredns/coremain"
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
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	want := []string{
		"mcmirror v9.8.7-test (commit abc1234def56)\n",
		"CoreDNS-" + coremain.CoreVersion + "\n",
	}
	for _, args := range [][]string{{"-version"}, {"--version"}, {"version"}, {"-conf", "/nonexistent", "-version"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Errorf("coredns-mc %q: %v\n%s", args, err, out)
			continue
		}
		lines := strings.SplitAfter(string(out), "\n")
		if len(lines) < 2 || lines[0] != want[0] || lines[1] != want[1] {
			t.Errorf("coredns-mc %q printed\n%s\nwant it to begin with\n%s", args, out, strings.Join(want, ""))
		}
	}
}

// Without -ldflags the version is "dev" and the commit is the VCS revision
// Go recorded, or "unknown".
func TestVersionDefault(t *testing.T) {
	var b bytes.Buffer
	printVersion(&b)
	first, rest, _ := strings.Cut(b.String(), "\n")
	if !strings.HasPrefix(first, "mcmirror ") || !strings.Contains(first, " (commit ") {
		t.Errorf("first line %q", first)
	}
	if !strings.HasPrefix(rest, "CoreDNS-"+coremain.CoreVersion+"\n") {
		t.Errorf("second line of %q", b.String())
	}
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
		if got := versionFlag(c.args); got != c.want {
			t.Errorf("versionFlag(%q) = %v", c.args, got)
		}
	}
}

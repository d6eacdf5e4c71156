package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/coredns/coredns/coremain"
)

// version and commit are mcmirror's, set at build time:
//
//	go build -ldflags "-X main.version=v0.1.0 -X main.commit=abc1234" ./cmd/coredns-mc
var (
	version = "dev"
	commit  = "unknown"
)

func init() {
	subcommands["version"] = func([]string) int { printVersion(os.Stdout); return 0 }
}

// versionFlag reports whether args ask for the version with -version or
// --version (CoreDNS's flag), among the flags before the first non-flag.
func versionFlag(args []string) bool {
	for _, a := range args {
		switch a {
		case "-version", "--version", "-version=true", "--version=true":
			return true
		case "--":
			return false
		}
	}
	return false
}

// printVersion writes mcmirror's version and commit, then CoreDNS's version
// line and the platform and Go version.
func printVersion(w io.Writer) {
	v, c := buildVersion()
	fmt.Fprintf(w, "mcmirror %s (commit %s)\n", v, c)
	fmt.Fprintf(w, "%s-%s\n", coremain.CoreName, coremain.CoreVersion)
	fmt.Fprintf(w, "%s/%s, %s\n", runtime.GOOS, runtime.GOARCH, runtime.Version())
}

// buildVersion returns version and commit; without -ldflags it takes what
// the Go toolchain recorded: the module version of `go install ...@vX` and
// the VCS revision of a build in a git checkout.
func buildVersion() (string, string) {
	v, c := version, commit
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v, c
	}
	if v == "dev" && info.Main.Version != "" && info.Main.Version != "(devel)" {
		v = info.Main.Version
	}
	if c == "unknown" {
		var rev, modified string
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if rev != "" {
			c = rev
			if modified == "true" {
				c += "-dirty"
			}
		}
	}
	return v, c
}

package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
)

// CorednsMC returns the path of a coredns-mc binary for end-to-end tests:
// $MCMIRROR_COREDNS_MC when set (make test builds it once, with the race
// detector), otherwise one built from this checkout into the user cache.
var CorednsMC = sync.OnceValues(func() (string, error) {
	return buildCorednsMC("MCMIRROR_COREDNS_MC", "coredns-mc-dev", nil, nil)
})

// CorednsMCRelease returns the path of a coredns-mc built as the image
// builds it (CGO_ENABLED=0, -trimpath, no race detector), for tests of what
// the shipped binary holds in memory: $MCMIRROR_COREDNS_MC_RELEASE when set
// (make test builds it beside the race-detector one, whose shadow memory
// is several times the program's), otherwise one built into the user cache.
var CorednsMCRelease = sync.OnceValues(func() (string, error) {
	return buildCorednsMC("MCMIRROR_COREDNS_MC_RELEASE", "coredns-mc-release",
		[]string{"-trimpath"}, []string{"CGO_ENABLED=0"})
})

// buildCorednsMC returns $envVar when set, otherwise builds coredns-mc from
// this checkout into the user cache as name, with the build flags and the
// environment given.
func buildCorednsMC(envVar, name string, flags, env []string) (string, error) {
	if p := os.Getenv(envVar); p != "" {
		return p, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	path := filepath.Join(cache, "mcmirror", name)
	args := slices.Concat([]string{"build"}, flags, []string{"-o", path, "./cmd/coredns-mc"})
	cmd := exec.Command("go", args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = RepoPath(), os.Stderr, os.Stderr
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("harness: build coredns-mc: %w", err)
	}
	return path, nil
}

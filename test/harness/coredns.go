package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

var (
	cmcOnce sync.Once
	cmcPath string
	cmcErr  error

	relOnce sync.Once
	relPath string
	relErr  error
)

// CorednsMC returns the path of a coredns-mc binary for end-to-end tests:
// $MCMIRROR_COREDNS_MC when set (make test builds it once, with the race
// detector), otherwise one built from this checkout into the user cache.
func CorednsMC() (string, error) {
	cmcOnce.Do(func() {
		if p := os.Getenv("MCMIRROR_COREDNS_MC"); p != "" {
			cmcPath = p
			return
		}
		root := RepoPath()
		cache, err := os.UserCacheDir()
		if err != nil {
			cmcErr = err
			return
		}
		cmcPath = filepath.Join(cache, "mcmirror", "coredns-mc-dev")
		cmd := exec.Command("go", "build", "-o", cmcPath, "./cmd/coredns-mc")
		cmd.Dir, cmd.Stdout, cmd.Stderr = root, os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			cmcErr = fmt.Errorf("harness: build coredns-mc: %w", err)
		}
	})
	return cmcPath, cmcErr
}

// CorednsMCRelease returns the path of a coredns-mc built as the image
// builds it (CGO_ENABLED=0, -trimpath, no race detector), for tests of what
// the shipped binary holds in memory: $MCMIRROR_COREDNS_MC_RELEASE when set
// (make test builds it beside the race-detector one, whose shadow memory
// is several times the program's), otherwise one built into the user cache.
func CorednsMCRelease() (string, error) {
	relOnce.Do(func() {
		if p := os.Getenv("MCMIRROR_COREDNS_MC_RELEASE"); p != "" {
			relPath = p
			return
		}
		cache, err := os.UserCacheDir()
		if err != nil {
			relErr = err
			return
		}
		relPath = filepath.Join(cache, "mcmirror", "coredns-mc-release")
		cmd := exec.Command("go", "build", "-trimpath", "-o", relPath, "./cmd/coredns-mc")
		cmd.Dir, cmd.Stdout, cmd.Stderr = RepoPath(), os.Stderr, os.Stderr
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if err := cmd.Run(); err != nil {
			relErr = fmt.Errorf("harness: build coredns-mc: %w", err)
		}
	})
	return relPath, relErr
}

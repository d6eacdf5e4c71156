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
		root := repoRoot()
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

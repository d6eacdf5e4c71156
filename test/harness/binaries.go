package harness

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// Binary returns the path of a control-plane binary (kube-apiserver,
// kube-controller-manager, kwok, etcd). They come from $MCMIRROR_TESTBIN when
// set (the Makefile sets it); otherwise test/tools/build.sh builds them once
// and caches them outside the work tree.
func Binary(name string) (string, error) {
	binOnce.Do(func() { binDir, binErr = binaryDir() })
	if binErr != nil {
		return "", binErr
	}
	path := filepath.Join(binDir, name)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("harness: %s: %w (run test/tools/build.sh)", name, err)
	}
	return path, nil
}

func binaryDir() (string, error) {
	if d := os.Getenv("MCMIRROR_TESTBIN"); d != "" {
		return d, nil
	}
	return runTool("build.sh")
}

// runTool runs test/tools/NAME, which prints one line on success, and
// returns that line; the script's log goes to stderr.
func runTool(name string) (string, error) {
	script := RepoPath("test", "tools", name)
	var out bytes.Buffer
	cmd := exec.Command("bash", script)
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("harness: %s: %w", script, err)
	}
	return strings.TrimSpace(out.String()), nil
}

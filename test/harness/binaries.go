package harness

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("harness: cannot locate test/tools/build.sh; set MCMIRROR_TESTBIN")
	}
	script := filepath.Join(filepath.Dir(self), "..", "tools", "build.sh")
	var out bytes.Buffer
	cmd := exec.Command("bash", script)
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("harness: %s: %w", script, err)
	}
	return strings.TrimSpace(out.String()), nil
}

package harness

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// RepoPath is the path of a file of this checkout, from its root:
// RepoPath("deploy", "coredns.yaml"). $MCMIRROR_REPO, when set, is the
// root instead: a program built from the checkout and run elsewhere (the
// fleet benchmark's archive) carries the few files it reads there.
func RepoPath(parts ...string) string {
	if root := os.Getenv("MCMIRROR_REPO"); root != "" {
		return filepath.Join(append([]string{root}, parts...)...)
	}
	_, self, _, _ := runtime.Caller(0)
	return filepath.Join(append([]string{filepath.Dir(self), "..", ".."}, parts...)...)
}

// RepoFile is the text of RepoPath(parts...), for the test t.
func RepoFile(t testing.TB, parts ...string) string {
	t.Helper()
	b, err := os.ReadFile(RepoPath(parts...))
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	return string(b)
}

// TempFile writes data into name in a directory of the test t, readable
// by its owner only, and returns its path.
func TempFile(t testing.TB, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatalf("harness: %v", err)
	}
	return p
}

package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// LinkKubeconfig applies deploy/remote-link.yaml to c and returns a
// kubeconfig with the token of its read-only ServiceAccount: what another
// cluster links c with.
func (c *Cluster) LinkKubeconfig(ctx context.Context) ([]byte, error) {
	manifest, err := os.ReadFile(filepath.Join(repoRoot(), "deploy", "remote-link.yaml"))
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	if err := c.Apply(ctx, string(manifest)); err != nil {
		return nil, err
	}
	return c.ServiceAccountKubeconfig(ctx, "mcmirror", "mcmirror-link")
}

// LinkKubeconfigFile writes LinkKubeconfig's kubeconfig, once per cluster,
// to <env dir>/<cluster>-link.kubeconfig and returns the path: what a
// coredns-mc process started by a test links c with.
func (c *Cluster) LinkKubeconfigFile(ctx context.Context) (string, error) {
	c.linkMu.Lock()
	defer c.linkMu.Unlock()
	if c.linkFile != "" {
		return c.linkFile, nil
	}
	kc, err := c.LinkKubeconfig(ctx)
	if err != nil {
		return "", err
	}
	p := filepath.Join(c.env.Dir, c.Name+"-link.kubeconfig")
	if err := os.WriteFile(p, kc, 0o600); err != nil {
		return "", fmt.Errorf("harness: %w", err)
	}
	c.linkFile = p
	return p, nil
}

// LinkFile is LinkKubeconfigFile for the test t: it fails t on an error.
func (c *Cluster) LinkFile(t testing.TB) string {
	t.Helper()
	p, err := c.LinkKubeconfigFile(context.Background())
	if err != nil {
		t.Fatalf("harness: link kubeconfig of %s: %v", c.Name, err)
	}
	return p
}

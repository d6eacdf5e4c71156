package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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

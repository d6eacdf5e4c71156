package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
)

// LinkKubeconfig applies deploy/remote-link.yaml to c and returns a
// kubeconfig with the token of its read-only ServiceAccount: what another
// cluster links c with.
func (c *Cluster) LinkKubeconfig(ctx context.Context) ([]byte, error) {
	_, self, _, _ := runtime.Caller(0)
	manifest, err := os.ReadFile(filepath.Join(filepath.Dir(self), "..", "..", "deploy", "remote-link.yaml"))
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	if err := c.Apply(ctx, string(manifest)); err != nil {
		return nil, err
	}
	return c.ServiceAccountKubeconfig(ctx, "mcmirror", "mcmirror-link")
}

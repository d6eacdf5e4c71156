package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcmirror/mcmirror/internal/grant"
)

// LinkKubeconfig applies deploy/remote-link.yaml to c and returns a
// kubeconfig with the token of its read-only ServiceAccount: what another
// cluster links c with. The token is valid for an hour.
func (c *Cluster) LinkKubeconfig(ctx context.Context) ([]byte, error) {
	return c.LinkKubeconfigTTL(ctx, time.Hour)
}

// LinkKubeconfigTTL is LinkKubeconfig with a token valid for ttl: what a
// run longer than an hour (the fleet benchmark) links with.
func (c *Cluster) LinkKubeconfigTTL(ctx context.Context, ttl time.Duration) ([]byte, error) {
	manifest, err := os.ReadFile(RepoPath("deploy", "remote-link.yaml"))
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	if err := c.Apply(ctx, string(manifest)); err != nil {
		return nil, err
	}
	return c.ServiceAccountKubeconfigTTL(ctx, "mcmirror", "mcmirror-link", ttl)
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

// LinkData is the kubeconfig LinkFile holds, for the test t: what a link
// Secret for c carries.
func (c *Cluster) LinkData(t testing.TB) []byte {
	t.Helper()
	kc, err := os.ReadFile(c.LinkFile(t))
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	return kc
}

// CreateLinkSecret creates in c, in namespace ns, the link Secret of
// cluster that `coredns-mc link` writes (grant.LinkSecret), holding
// kubeconfig, and deletes it when t ends.
func (c *Cluster) CreateLinkSecret(t testing.TB, ns, cluster string, kubeconfig []byte) *corev1.Secret {
	t.Helper()
	secrets := c.Client.CoreV1().Secrets(ns)
	s, err := secrets.Create(context.Background(), grant.LinkSecret(grant.Options{Cluster: cluster, LinkNamespace: ns}, kubeconfig), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("harness: %s: link Secret of %s in %s: %v", c.Name, cluster, ns, err)
	}
	t.Cleanup(func() { _ = secrets.Delete(context.Background(), s.Name, metav1.DeleteOptions{}) })
	return s
}

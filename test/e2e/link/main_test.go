// Package link_test runs `coredns-mc link` and `coredns-mc unlink` against
// real API servers: east links west (both run kube-controller-manager, whose
// token controller fills ServiceAccount token Secrets); paris runs no
// kube-controller-manager, so no token ever appears there. East, west and
// tokyo (a token controller too) make the mesh that link and check take as
// a fleet (mesh_test.go).
package link_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/grant"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

var env = harness.New(harness.Options{Clusters: []harness.ClusterOptions{
	{Name: "east", Workloads: true}, {Name: "west", Workloads: true}, {Name: "paris"}, {Name: "tokyo", Workloads: true},
}})

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

const (
	wait = 60 * time.Second
	tick = 100 * time.Millisecond
)

// result is what one run of coredns-mc printed.
type result struct {
	code           int
	stdout, stderr string
}

// coredns runs `coredns-mc args...` to its end.
func coredns(t *testing.T, args ...string) result {
	t.Helper()
	bin, err := harness.CorednsMC()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var exit *exec.ExitError
	if err != nil && !assert.ErrorAs(t, err, &exit, "coredns-mc %q: %s", args, r.stderr) {
		r.code = -1
	} else {
		r.code = cmd.ProcessState.ExitCode()
	}
	t.Logf("coredns-mc %q: exit %d\n%s", args, r.code, r.stderr)
	return r
}

// mustRun runs coredns-mc and requires it to succeed.
func mustRun(t *testing.T, args ...string) result {
	t.Helper()
	r := coredns(t, args...)
	require.Equal(t, 0, r.code, "coredns-mc %q: %s", args, r.stderr)
	return r
}

// errOf is the error of a call that returns a value too.
func errOf[T any](_ T, err error) error { return err }

// decodeSecret reads the one Secret of a printed YAML stream.
func decodeSecret(t *testing.T, stream string) *corev1.Secret {
	t.Helper()
	var s corev1.Secret
	require.NoError(t, utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(stream)), 4096).Decode(&s))
	return &s
}

// linkClient is a client of the cluster a link Secret links to, with the
// Secret's own credentials.
func linkClient(t *testing.T, s *corev1.Secret) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data[labels.LinkSecretKey])
	require.NoError(t, err)
	client, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	return client
}

// badTokenKubeconfig writes a kubeconfig of cluster c with a token that no
// API server issued, and returns its path.
func badTokenKubeconfig(t *testing.T, c *harness.Cluster) string {
	t.Helper()
	kc, err := grant.Kubeconfig(grant.Options{Cluster: c.Name}, grant.Endpoint{Server: c.Server, CAData: env.CAPEM()}, []byte("not-a-token"))
	require.NoError(t, err)
	return harness.TempFile(t, "bad.kubeconfig", kc)
}

// cleanLinks removes, when t ends, whatever a test left of links to c and
// in east: every test starts from clusters with no link.
func cleanLinks(t *testing.T, c *harness.Cluster) {
	t.Cleanup(func() {
		ctx := context.Background()
		_ = env.Cluster("east").Client.CoreV1().Secrets(grant.DefaultLinkNamespace).DeleteCollection(ctx,
			metav1.DeleteOptions{}, metav1.ListOptions{})
		tokens, err := c.Client.CoreV1().Secrets(grant.DefaultNamespace).List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, s := range tokens.Items {
				if s.Annotations[corev1.ServiceAccountNameKey] == grant.ServiceAccount {
					_ = c.Client.CoreV1().Secrets(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{})
				}
			}
		}
		_ = c.Client.RbacV1().ClusterRoleBindings().Delete(ctx, grant.Role, metav1.DeleteOptions{})
		_ = c.Client.RbacV1().ClusterRoles().Delete(ctx, grant.Role, metav1.DeleteOptions{})
		_ = c.Client.CoreV1().ServiceAccounts(grant.DefaultNamespace).Delete(ctx, grant.ServiceAccount, metav1.DeleteOptions{})
	})
}

// assertGone checks that the link's ServiceAccount, role and binding are
// not in c.
func assertGone(t assert.TestingT, ctx context.Context, c *harness.Cluster) {
	_, err := c.Client.CoreV1().ServiceAccounts(grant.DefaultNamespace).Get(ctx, grant.ServiceAccount, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "ServiceAccount: %v", err)
	_, err = c.Client.RbacV1().ClusterRoles().Get(ctx, grant.Role, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "ClusterRole: %v", err)
	_, err = c.Client.RbacV1().ClusterRoleBindings().Get(ctx, grant.Role, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "ClusterRoleBinding: %v", err)
}

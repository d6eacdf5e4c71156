package harness_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/mcmirror/mcmirror/test/harness"
)

// A link kubeconfig asked for with a lifetime carries a token of that
// lifetime, and reads what a link reads.
func TestLinkKubeconfigTTL(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	kc, err := env.Cluster("east").LinkKubeconfigTTL(ctx, 48*time.Hour)
	require.NoError(t, err)
	cfg, err := clientcmd.Load(kc)
	require.NoError(t, err)
	auth := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]
	parts := strings.Split(auth.Token, ".")
	require.Len(t, parts, 3, "a JWT")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	var claims struct{ Iat, Exp int64 }
	require.NoError(t, json.Unmarshal(payload, &claims))
	require.Equal(t, int64(48*3600), claims.Exp-claims.Iat)

	rc, err := clientcmd.RESTConfigFromKubeConfig(kc)
	require.NoError(t, err)
	cs, err := kubernetes.NewForConfig(rc)
	require.NoError(t, err)
	_, err = cs.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
}

// EtcdURL serves etcd's metrics, its database size among them.
func TestEtcdURL(t *testing.T) {
	v := harness.RequireSeries(t, env.EtcdURL()+"/metrics", "etcd_mvcc_db_total_size_in_use_in_bytes")
	require.Positive(t, v)
}

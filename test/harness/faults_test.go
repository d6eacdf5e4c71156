package harness_test

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// A stopped API server refuses connections without failing the
// environment, and comes back at the same address with its data, its
// admin credentials and the ServiceAccount tokens it issued.
func TestAPIServerStopAndRestart(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	paris := env.Cluster("paris")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "survives-restart"}, Data: map[string]string{"k": "v"}}
	_, err := paris.Client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = paris.Client.CoreV1().ConfigMaps("default").Delete(ctx, cm.Name, metav1.DeleteOptions{}) })
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "restart-probe"}}
	_, err = paris.Client.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = paris.Client.CoreV1().ServiceAccounts("default").Delete(ctx, sa.Name, metav1.DeleteOptions{})
	})
	saCfg, err := paris.ServiceAccountConfig(ctx, "default", sa.Name)
	require.NoError(t, err)
	before, server := paris.APIServer(), paris.Server
	require.NotNil(t, before)

	restart := paris.APIServerOutage(t)
	assert.Nil(t, paris.APIServer())
	_, err = paris.Client.CoreV1().ConfigMaps("default").Get(ctx, cm.Name, metav1.GetOptions{})
	require.Error(t, err, "the API server is down")
	assert.Contains(t, err.Error(), "connection refused")
	env.RequireAlive(t) // a deliberate stop is no crash

	restart()
	after := paris.APIServer()
	require.NotNil(t, after)
	assert.NotEqual(t, before.PID, after.PID)
	assert.Equal(t, server, paris.Server)
	got, err := paris.Client.CoreV1().ConfigMaps("default").Get(ctx, cm.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "v", got.Data["k"])
	// The token issued before the restart is still accepted (same signing
	// key); the ServiceAccount may not list ConfigMaps, so 403 is the proof
	// of authentication.
	saClient, err := kubernetes.NewForConfig(saCfg)
	require.NoError(t, err)
	_, err = saClient.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	assert.True(t, apierrors.IsForbidden(err), "authenticated, not authorized: %v", err)
	env.RequireAlive(t, after)
}

// A restarted API server that exits while it starts (here: another
// process holds its port) is started again until it serves, and that exit
// fails no wait of the environment: a kubelet starts a static pod again.
func TestAPIServerStartedAgainAfterExitWhileStarting(t *testing.T) {
	env.LogOnFailure(t)
	paris := env.Cluster("paris")
	u, err := url.Parse(paris.Server)
	require.NoError(t, err)
	paris.APIServerOutage(t) // its cleanup starts the server should the test fail first
	l, err := net.Listen("tcp", u.Host)
	require.NoError(t, err)
	defer l.Close()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		done <- paris.StartAPIServer(ctx)
	}()
	// Evidence that a start exited on the taken port.
	require.Eventually(t, func() bool {
		logs, _ := filepath.Glob(filepath.Join(env.Dir, "logs", "paris-kube-apiserver*.log"))
		for _, f := range logs {
			if b, _ := os.ReadFile(f); strings.Contains(string(b), "address already in use") {
				return true
			}
		}
		return false
	}, 2*time.Minute, 100*time.Millisecond, "no start of paris's API server exited on its taken port")
	env.RequireAlive(t)
	require.NoError(t, l.Close())
	require.NoError(t, <-done)
	env.RequireAlive(t)
	_, err = paris.Client.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{})
	require.NoError(t, err)
}

// proxyClient is a client of east through the proxy, with user agent ua.
func proxyClient(t *testing.T, kubeconfig, ua string, timeout time.Duration) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	require.NoError(t, err)
	cfg.UserAgent, cfg.Timeout = ua, timeout
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	return cs
}

// The fault proxy passes requests and watches through, hangs on demand
// (TCP accepted, TLS never answered), recovers, and fails only the writes
// of the user agent it was told to, with the status it was told to.
func TestFaultProxy(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	east := env.Cluster("east")
	p := east.FaultProxy(t)
	cs := proxyClient(t, p.Kubeconfig, "fault-victim", 3*time.Second)

	// Pass-through, a watch included.
	w, err := cs.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=through-proxy"})
	require.NoError(t, err)
	defer w.Stop()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "through-proxy"}}
	_, err = cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = east.Client.CoreV1().ConfigMaps("default").Delete(ctx, cm.Name, metav1.DeleteOptions{}) })
	select {
	case ev := <-w.ResultChan():
		assert.Equal(t, watch.Added, ev.Type)
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event through the proxy")
	}
	// A dropped connection ends the watch on it.
	p.DropConnections()
	deadline := time.After(10 * time.Second)
	for ended := false; !ended; {
		select {
		case _, open := <-w.ResultChan():
			ended = !open
		case <-deadline:
			t.Fatal("the watch outlived its dropped connection")
		}
	}
	requests := p.Requests()
	assert.GreaterOrEqual(t, requests, int64(2))

	// Hang: a new client's request times out, the connection is held.
	p.Hang()
	hung := proxyClient(t, p.Kubeconfig, "fault-victim", 2*time.Second)
	start := time.Now()
	_, err = hung.CoreV1().ConfigMaps("default").Get(ctx, cm.Name, metav1.GetOptions{})
	require.Error(t, err, "a hanging address answers nothing")
	assert.GreaterOrEqual(t, time.Since(start), 2*time.Second-100*time.Millisecond, "it timed out, it was not refused: %v", err)
	assert.GreaterOrEqual(t, p.Held(), 1)
	assert.Equal(t, requests, p.Requests(), "no request got through")

	// Pass again.
	p.Pass()
	require.Eventually(t, func() bool {
		_, err := cs.CoreV1().ConfigMaps("default").Get(ctx, cm.Name, metav1.GetOptions{})
		return err == nil
	}, 20*time.Second, 100*time.Millisecond)

	// 409 for the writes of one user agent only, reads untouched.
	p.Inject("fault-victim", http.StatusConflict, 1, 0)
	_, err = cs.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{})
	assert.True(t, apierrors.IsConflict(err), "injected 409: %v", err)
	assert.Equal(t, int64(1), p.Injected())
	_, err = cs.CoreV1().ConfigMaps("default").Get(ctx, cm.Name, metav1.GetOptions{})
	assert.NoError(t, err, "reads pass")
	other := proxyClient(t, p.Kubeconfig, "bystander", 5*time.Second)
	_, err = other.CoreV1().ConfigMaps("default").Patch(ctx, cm.Name, "application/merge-patch+json", []byte(`{"data":{"a":"b"}}`), metav1.PatchOptions{})
	assert.NoError(t, err, "another user agent's writes pass")
	assert.Equal(t, int64(1), p.Injected())

	// 429 three times: client-go honours Retry-After and retries by itself, so the
	// write succeeds after the injected refusals.
	p.Inject("fault-victim", http.StatusTooManyRequests, 1, 3)
	patient := proxyClient(t, p.Kubeconfig, "fault-victim", 30*time.Second)
	start = time.Now()
	_, err = patient.CoreV1().ConfigMaps("default").Patch(ctx, cm.Name, "application/merge-patch+json", []byte(`{"data":{"c":"d"}}`), metav1.PatchOptions{})
	assert.NoError(t, err, "retried after 429")
	assert.Equal(t, int64(4), p.Injected())
	assert.GreaterOrEqual(t, time.Since(start), 3*time.Second, "Retry-After was honoured")
	p.Inject("", 0, 0, 0)
}

package link

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// recorder is a Handler that logs its calls as "+name host" (and the
// namespaces, when not all) and "-name".
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *recorder) Add(name string, cfg *rest.Config, ns Namespaces) {
	r.mu.Lock()
	defer r.mu.Unlock()
	call := "+" + name + " " + cfg.Host
	if !ns.All() {
		call += " (" + ns.String() + ")"
	}
	r.calls = append(r.calls, call)
}

func (r *recorder) Remove(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, "-"+name)
}

func (r *recorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

func (r *recorder) String() string { return fmt.Sprintf("%q", r.get()) }

// waitFor polls cond for up to 5 seconds, and fails the test with what
// it waited for when cond stays false.
func waitFor(t *testing.T, cond func() bool, format string, args ...any) {
	t.Helper()
	require.Eventually(t, cond, 5*time.Second, 5*time.Millisecond, append([]any{format}, args...)...)
}

// waitCalls waits until the recorder has seen exactly want.
func (r *recorder) waitCalls(t *testing.T, want ...string) {
	t.Helper()
	waitFor(t, func() bool { return slices.Equal(r.get(), want) }, "calls = %v, want %q", r, want)
}

type logs struct {
	mu    sync.Mutex
	lines []string
	// refused is what OnRefused was told: "namespace/name reason".
	refused []string
}

func (l *logs) refuse(s *corev1.Secret, reason Reason, _ error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refused = append(l.refused, s.Namespace+"/"+s.Name+" "+string(reason))
}

func (l *logs) refusals() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.refused)
	slices.Sort(out)
	return out
}

// waitLog waits for a log line containing s.
func (l *logs) waitLog(t *testing.T, s string) {
	t.Helper()
	waitFor(t, func() bool { return l.contains(s) }, "no log line containing %q in %v", s, l)
}

func (l *logs) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("%q", l.lines)
}

func (l *logs) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.ContainsFunc(l.lines, func(line string) bool { return strings.Contains(line, s) })
}

// startWatcher runs a watcher of client's link Secrets in
// linkerd-multicluster (unless opts names another namespace) until the
// test ends, and waits for it to sync.
func startWatcher(t *testing.T, client *fake.Clientset, opts SecretWatcherOptions) (*recorder, *logs, *SecretWatcher) {
	t.Helper()
	rec, lg := &recorder{}, &logs{}
	opts.Namespace = cmp.Or(opts.Namespace, "linkerd-multicluster")
	opts.Logf, opts.OnRefused = lg.logf, lg.refuse
	w, err := NewSecretWatcher(client, rec, opts)
	require.NoError(t, err)
	go w.Run(t.Context())
	waitFor(t, w.HasSynced, "secret watcher did not sync")
	return rec, lg, w
}

var ctxBG = context.Background()

// update writes s, a Secret of linkerd-multicluster, over the one of its name.
func update(t *testing.T, client *fake.Clientset, s *corev1.Secret) {
	t.Helper()
	_, err := client.CoreV1().Secrets("linkerd-multicluster").Update(ctxBG, s, metav1.UpdateOptions{})
	require.NoError(t, err)
}

func TestSecretWatcherLifecycle(t *testing.T) {
	west := kubeconfig(t, "https://west.example:6443")
	west2 := kubeconfig(t, "https://west-2.example:6443")
	client := fake.NewClientset(secret("cluster-credentials-west", nil, west))
	rec, _, _ := startWatcher(t, client, SecretWatcherOptions{})
	secrets := client.CoreV1().Secrets("linkerd-multicluster")

	// Existing at start.
	rec.waitCalls(t, "+west https://west.example:6443")

	// An update that leaves the kubeconfig alone does not restart.
	s := secret("cluster-credentials-west", nil, west)
	s.Annotations = map[string]string{"touched": "yes"}
	update(t, client, s)
	// A new kubeconfig restarts the link: Add again, without a Remove.
	update(t, client, secret("cluster-credentials-west", nil, west2))
	rec.waitCalls(t, "+west https://west.example:6443", "+west https://west-2.example:6443")

	// Added at run time.
	_, err := secrets.Create(ctxBG, secret("cluster-credentials-paris", nil, west), metav1.CreateOptions{})
	require.NoError(t, err)
	rec.waitCalls(t, "+west https://west.example:6443", "+west https://west-2.example:6443", "+paris https://west.example:6443")

	// Deleted at run time.
	require.NoError(t, secrets.Delete(ctxBG, "cluster-credentials-west", metav1.DeleteOptions{}))
	rec.waitCalls(t, "+west https://west.example:6443", "+west https://west-2.example:6443", "+paris https://west.example:6443", "-west")
}

func TestSecretWatcherRename(t *testing.T) {
	kc := kubeconfig(t, "https://x.example")
	client := fake.NewClientset(secret("link", map[string]string{labels.LinkClusterName: "west"}, kc))
	rec, _, _ := startWatcher(t, client, SecretWatcherOptions{})
	rec.waitCalls(t, "+west https://x.example")

	// The label now names another cluster: the old link goes, the new comes.
	update(t, client, secret("link", map[string]string{labels.LinkClusterName: "paris"}, kc))
	rec.waitCalls(t, "+west https://x.example", "-west", "+paris https://x.example")
}

func TestSecretWatcherBadUpdateKeepsLink(t *testing.T) {
	kc := kubeconfig(t, "https://west.example")
	client := fake.NewClientset(secret("cluster-credentials-west", nil, kc))
	rec, lg, _ := startWatcher(t, client, SecretWatcherOptions{})
	rec.waitCalls(t, "+west https://west.example")

	update(t, client, secret("cluster-credentials-west", nil, []byte("{{{")))
	lg.waitLog(t, "keeping the running link")
	rec.waitCalls(t, "+west https://west.example")
}

func TestSecretWatcherIgnores(t *testing.T) {
	kc := kubeconfig(t, "https://x.example")
	opaque := secret("cluster-credentials-paris", nil, kc)
	opaque.Type = corev1.SecretTypeOpaque
	client := fake.NewClientset(
		secret("cluster-credentials-east", nil, kc),   // the local cluster
		secret("cluster-credentials-static", nil, kc), // a configured link
		opaque,                     // not a link secret
		secret("no-name", nil, kc), // names no cluster
		secret("cluster-credentials-west", nil, kc),
	)
	rec, lg, _ := startWatcher(t, client, SecretWatcherOptions{Reserved: []string{"east", "static"}})
	rec.waitCalls(t, "+west https://x.example")
	for _, want := range []string{`cluster "east" is the local cluster`, `cluster "static" is the local cluster`, "names no cluster"} {
		assert.True(t, lg.contains(want), "no log line about %q", want)
	}
	want := []string{
		"linkerd-multicluster/cluster-credentials-east reserved",
		// The API server filters an opaque Secret out; the fake does
		// not, and the watcher refuses it.
		"linkerd-multicluster/cluster-credentials-paris invalid",
		"linkerd-multicluster/cluster-credentials-static reserved",
		"linkerd-multicluster/no-name invalid",
	}
	assert.Equal(t, want, lg.refusals(), "refusals")
}

func TestSecretWatcherSelector(t *testing.T) {
	kc := kubeconfig(t, "https://x.example")
	client := fake.NewClientset(
		secret("cluster-credentials-west", map[string]string{"mcmirror": "yes"}, kc),
		secret("cluster-credentials-paris", nil, kc),
	)
	sel, err := k8slabels.Parse("mcmirror=yes")
	require.NoError(t, err)
	rec, _, _ := startWatcher(t, client, SecretWatcherOptions{Selector: sel})
	rec.waitCalls(t, "+west https://x.example")
}

func TestSecretWatcherDuplicateTakesOver(t *testing.T) {
	a := kubeconfig(t, "https://a.example")
	b := kubeconfig(t, "https://b.example")
	client := fake.NewClientset(
		secret("a", map[string]string{labels.LinkClusterName: "west"}, a),
		secret("b", map[string]string{labels.LinkClusterName: "west"}, b),
	)
	rec, lg, _ := startWatcher(t, client, SecretWatcherOptions{})
	first := rec.get()
	require.Len(t, first, 1, "one link to west")
	assert.True(t, lg.contains(`cluster "west" is already linked`), "duplicate not reported")
	winner, loserHost := "a", "https://b.example"
	if first[0] == "+west https://b.example" {
		winner, loserHost = "b", "https://a.example"
	}
	require.NoError(t, client.CoreV1().Secrets("linkerd-multicluster").Delete(ctxBG, winner, metav1.DeleteOptions{}))
	rec.waitCalls(t, first[0], "-west", "+west "+loserHost)
}

func TestSecretWatcherLinks(t *testing.T) {
	kc := kubeconfig(t, "https://x.example")
	client := fake.NewClientset(secret("cluster-credentials-west", nil, kc), secret("cluster-credentials-paris", nil, kc))
	rec, _, w := startWatcher(t, client, SecretWatcherOptions{})
	w.mu.Lock()
	assert.Equal(t, []string{"paris", "west"}, slices.Sorted(maps.Keys(w.owner)), "the clusters linked")
	w.mu.Unlock()
	_, err := NewSecretWatcher(client, rec, SecretWatcherOptions{})
	assert.Error(t, err, "no namespace")
}

// hostileKubeconfig is a kubeconfig whose user runs a command.
func hostileKubeconfig(t *testing.T) []byte {
	t.Helper()
	return secretWith(t, hostile(func(u *clientcmdapi.AuthInfo, _ *clientcmdapi.Cluster) {
		u.Exec = &clientcmdapi.ExecConfig{Command: "/bin/sh", Args: []string{"-c", "id"},
			APIVersion: "client.authentication.k8s.io/v1", InteractiveMode: clientcmdapi.NeverExecInteractiveMode}
	}))
}

func TestSecretWatcherRefusesHostileKubeconfigs(t *testing.T) {
	good := kubeconfig(t, "https://west.example")
	plain := kubeconfig(t, "http://tokyo.example")
	client := fake.NewClientset(
		secret("cluster-credentials-west", nil, good),
		secret("cluster-credentials-paris", nil, hostileKubeconfig(t)),
		secret("cluster-credentials-tokyo", nil, plain),
	)
	rec, lg, _ := startWatcher(t, client, SecretWatcherOptions{})
	rec.waitCalls(t, "+west https://west.example")
	lg.waitLog(t, `link secret linkerd-multicluster/cluster-credentials-paris refused (exec): kubeconfig refused: user "u" runs a command (exec "/bin/sh") (exec not allowed)`)
	lg.waitLog(t, `link secret linkerd-multicluster/cluster-credentials-tokyo refused (http)`)

	// A hostile update of a running link is refused, and the link keeps
	// running on its last good kubeconfig.
	update(t, client, secret("cluster-credentials-west", nil, hostileKubeconfig(t)))
	lg.waitLog(t, `link secret linkerd-multicluster/cluster-credentials-west refused (exec): kubeconfig refused: user "u" runs a command (exec "/bin/sh") (exec not allowed); keeping the running link to cluster "west"`)
	rec.waitCalls(t, "+west https://west.example")
	want := []string{
		"linkerd-multicluster/cluster-credentials-paris exec",
		"linkerd-multicluster/cluster-credentials-tokyo http",
		"linkerd-multicluster/cluster-credentials-west exec",
	}
	assert.Equal(t, want, lg.refusals(), "refusals")

	// Allowed, the same Secrets link.
	rec2, lg2, _ := startWatcher(t, client, SecretWatcherOptions{Allow: Allow{Exec: true, HTTP: true}})
	waitFor(t, func() bool { return len(rec2.get()) >= 3 }, "allowed: calls %v", rec2)
	assert.ElementsMatch(t, []string{"+paris https://west.example:6443", "+tokyo http://tokyo.example", "+west https://west.example:6443"}, rec2.get(), "allowed: calls")
	assert.Empty(t, lg2.refusals(), "allowed: refusals, logs %v", lg2)
}

// A duplicate is refused, and named as such.
func TestSecretWatcherDuplicateIsReported(t *testing.T) {
	kc := kubeconfig(t, "https://x.example")
	client := fake.NewClientset(
		secret("a", map[string]string{labels.LinkClusterName: "west"}, kc),
		secret("b", map[string]string{labels.LinkClusterName: "west"}, kc),
	)
	_, lg, _ := startWatcher(t, client, SecretWatcherOptions{})
	got := lg.refusals()
	require.Len(t, got, 1, "one refusal")
	assert.True(t, strings.HasSuffix(got[0], " duplicate"), "refusals %q, want one duplicate", got)
}

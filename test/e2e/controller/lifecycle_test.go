package controller_test

import (
	"fmt"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The controller is killed in the middle of creating mirrors and
// restarted: it converges, and what existed before keeps its ClusterIP,
// its UID and its egress ports.
func TestRestartKeepsPorts(t *testing.T) {
	const ns = "e2e-restart"
	const n = 100
	ctx := setUp(t, ns, "east", "west")
	west := env.Cluster("west")
	first := startController(t, "controller-1")

	require.NoError(t, west.Apply(ctx, statefulSet(ns, "db", 3, "true")))
	var manifest strings.Builder
	for i := range n {
		manifest.WriteString("---\n" + clusterIPService(ns, fmt.Sprintf("svc-%02d", i), 80+i, "true"))
	}
	require.NoError(t, west.Apply(ctx, manifest.String()))
	// Kill it as soon as some, not necessarily all, mirrors exist.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.GreaterOrEqual(c, len(mirrors(c, ns)), 3)
	}, wait, 5*time.Millisecond)
	require.NoError(t, first.Signal(syscall.SIGKILL))
	<-first.Done()
	before := mirrors(t, ns)
	t.Logf("%d of %d mirrors existed when the controller was killed", len(before), n+5)

	// Meanwhile the remote cluster changes.
	require.NoError(t, west.Scale(ctx, ns, "db-set", 4))
	require.NoError(t, west.Apply(ctx, clusterIPService(ns, "late", 9000, "true")))

	startController(t, "controller-2")
	want := []string{"db-set-0-west", "db-set-1-west", "db-set-2-west", "db-set-3-west", "db-west", "late-west"}
	for i := range n {
		want = append(want, fmt.Sprintf("svc-%02d-west", i))
	}
	sort.Strings(want)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m := mirrors(c, ns)
		assert.Equal(c, want, names(m))
		assertConsistent(c, ctx, ns, m)
		assertPortsUnique(c, ctx)
	}, wait, tick)
	after := mirrors(t, ns)
	for name, b := range before {
		a := after[name]
		assert.Equal(t, b.UID, a.UID, "%s was not recreated", name)
		assert.Equal(t, b.Spec.ClusterIP, a.Spec.ClusterIP, name)
		if v := b.Annotations[labels.EgressPorts]; v != "" {
			assert.Equal(t, v, a.Annotations[labels.EgressPorts], "%s keeps its egress ports", name)
		}
	}
}

// Two replicas with --leader-elect: one leads, the other waits; when the
// leader is killed the other takes over and mirrors what is exported next.
//
// The leader renews every retry period (250 ms) and gives the Lease up only
// after failing to renew for the renew deadline: 10 s, which a renewal on a
// machine at load 4, whose API server runs beside the test, meets. A
// shorter one (2 s) lets a starved renewal hand the Lease to the follower
// while the test asserts that only one replica leads. The takeover after
// the kill waits for the lease duration (15 s), within wait.
func TestLeaderElection(t *testing.T) {
	const ns = "e2e-leader"
	ctx := setUp(t, ns, "east", "west")
	east, west := env.Cluster("east"), env.Cluster("west")
	le := []string{"--leader-elect", "--leader-elect-namespace", "kube-system", "--leader-elect-name", "mcmirror-e2e",
		"--leader-elect-lease-duration", "15s", "--leader-elect-renew-deadline", "10s", "--leader-elect-retry-period", "250ms"}
	a := startController(t, "controller-a", le...)
	b := startController(t, "controller-b", le...)
	byPID := map[int]string{a.PID: "a", b.PID: "b"}

	holder := func(c *assert.CollectT) string {
		l, err := east.Client.CoordinationV1().Leases("kube-system").Get(ctx, "mcmirror-e2e", metav1.GetOptions{})
		require.NoError(c, err)
		require.NotNil(c, l.Spec.HolderIdentity)
		for pid, name := range byPID {
			if strings.Contains(*l.Spec.HolderIdentity, fmt.Sprintf("_%d_", pid)) {
				return name
			}
		}
		require.Fail(c, "unknown holder", *l.Spec.HolderIdentity)
		return ""
	}
	var leader string
	require.EventuallyWithT(t, func(c *assert.CollectT) { leader = holder(c) }, wait, tick)
	require.NoError(t, west.Apply(ctx, clusterIPService(ns, "one", 80, "true")))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, mirrors(c, ns), "one-west")
	}, wait, tick)

	leaderProc, follower, followerName := a, b, "b"
	if leader == "b" {
		leaderProc, follower, followerName = b, a, "a"
	}
	// The follower has seen the leader (positive evidence that it runs
	// its election), and is alive: only then does its silence count.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, follower.Tail(200), `"Following"`)
	}, wait, tick)
	env.RequireAlive(t, follower)
	assert.NotContains(t, follower.Tail(200), `"Leading"`, "only one replica leads")
	assert.NotContains(t, follower.Tail(200), "Created mirror", "the follower writes nothing")

	require.NoError(t, leaderProc.Signal(syscall.SIGKILL))
	<-leaderProc.Done()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, followerName, holder(c))
	}, wait, tick)
	require.NoError(t, west.Apply(ctx, clusterIPService(ns, "two", 80, "true")))
	waitMirrors(t, ns, "one-west", "two-west")
}

// Links from Linkerd-format Secrets: a link Secret for paris links it;
// deleting the Secret sweeps paris's mirrors and nothing else.
func TestLinkSecretRemoval(t *testing.T) {
	const ns = "e2e-links"
	ctx := setUp(t, ns, "east", "west", "paris")
	namespace(t, "e2e-link-secrets", "east")
	east, west, paris := env.Cluster("east"), env.Cluster("west"), env.Cluster("paris")

	// What `coredns-mc link` (or `linkerd multicluster link`) sets up: a
	// ServiceAccount in the remote cluster that may list and watch
	// Services and EndpointSlices, and its kubeconfig in a Secret here.
	secret := east.CreateLinkSecret(t, "e2e-link-secrets", "paris", paris.LinkData(t))

	// An unrelated Service named like a paris mirror, made by someone
	// else, must survive the sweep.
	require.NoError(t, east.Apply(ctx, fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata: {name: bystander-paris, namespace: %s}
spec: {ports: [{port: 1}]}
`, ns)))

	o := eastController("controller")
	o.Remotes, o.Links, o.LinkSecrets = nil, []harness.Link{{Name: "west", Kubeconfig: west.LinkFile(t)}}, "e2e-link-secrets"
	env.StartFleet(t, o)
	require.NoError(t, paris.Apply(ctx, statefulSet(ns, "db", 2, "true")))
	require.NoError(t, west.Apply(ctx, clusterIPService(ns, "web", 80, "true")))
	waitMirrors(t, ns, "db-paris", "db-set-0-paris", "db-set-1-paris", "web-west")
	bystander := service(t, east, ns, "bystander-paris")

	require.NoError(t, east.Client.CoreV1().Secrets("e2e-link-secrets").Delete(ctx, secret.Name, metav1.DeleteOptions{}))
	waitMirrors(t, ns, "web-west")
	assert.Equal(t, bystander.ResourceVersion, service(t, east, ns, "bystander-paris").ResourceVersion)
}

// A namespace missing locally is created with --create-namespaces; a
// remote namespace deleted takes its mirrors with it.
func TestNamespaces(t *testing.T) {
	const ns = "e2e-ns"
	ctx := setUp(t, ns, "west")
	east, west := env.Cluster("east"), env.Cluster("west")
	startController(t, "controller", "--create-namespaces")
	require.NoError(t, west.Apply(ctx, statefulSet(ns, "db", 2, "true")))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := east.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		require.NoError(c, err)
		assert.Equal(c, labels.ManagedByValue, got.Labels[labels.ManagedBy])
		assert.Equal(c, []string{"db-set-0-west", "db-set-1-west", "db-west"}, names(mirrors(c, ns)))
	}, wait, tick)

	require.NoError(t, west.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Empty(c, mirrors(c, ns))
		_, err := east.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		assert.NoError(c, err, "namespaces are never deleted")
	}, wait, tick)
}

// Linkerd #12499: in a rolling update each pod is deleted and recreated;
// its per-pod mirror, and so the ClusterIP DNS answers for it, stays.
func TestRollingUpdateKeepsPodMirrors(t *testing.T) {
	const ns = "e2e-rollout"
	ctx := setUp(t, ns, "east", "west")
	west := env.Cluster("west")
	startController(t, "controller", "--pod-grace", "30s")
	require.NoError(t, west.Apply(ctx, statefulSet(ns, "db", 3, "true")))
	want := []string{"db-set-0-west", "db-set-1-west", "db-set-2-west", "db-west"}
	before := waitMirrors(t, ns, want...)

	// Delete every pod, as a rollout does one by one; the StatefulSet
	// recreates them.
	pods, err := west.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, pods.Items, 3)
	old := map[string]bool{}
	for _, p := range pods.Items {
		old[string(p.UID)] = true
		require.NoError(t, west.Client.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}))
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pods, err := west.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		require.NoError(c, err)
		var uids []string
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && !old[string(p.UID)] {
				uids = append(uids, string(p.UID))
			}
		}
		assert.Len(c, uids, 3, "three new pods")
		m := mirrors(c, ns)
		assert.Equal(c, want, names(m))
		assertConsistent(c, ctx, ns, m)
	}, wait, tick)
	after := mirrors(t, ns)
	for _, name := range want {
		assert.Equal(t, before[name].UID, after[name].UID, "%s was not recreated", name)
	}
}

package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// Bad flags are a usage error (exit 2) with one line that names the
// problem, before anything is contacted: run through coredns-mc's main, so
// that a flag let through shows as a controller that keeps running.
func TestControllerFlags(t *testing.T) {
	dir := t.TempDir()
	// A kubeconfig of a server nothing listens on: a mistake must be found
	// before it is dialled.
	kc, garbage := testKubeconfigs(t, dir)
	base := []string{"--cluster", "east", "--kubeconfig", kc, "--egress-address", "10.0.0.1", "--egress-ports", "1-2", "--metrics-addr", ""}
	with := func(extra ...string) []string { return append(append([]string(nil), base...), extra...) }

	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--cluster is required"},
		{[]string{"--cluster", "east"}, "--egress-address or --egress-service is required"},
		{[]string{"--cluster", "Bad_Name", "--egress-address", "10.0.0.1", "--egress-ports", "1-2"}, "--cluster: "},
		{[]string{"--cluster", "east", "--egress-address", "127.0.0.1", "--egress-ports", "1-2", "--kubeconfig", "/nonexistent"}, "--egress-address 127.0.0.1: the API server refuses loopback"},
		{[]string{"--cluster", "east", "--egress-address", "10.0.0.1", "--egress-ports", "2-1"}, "--egress-ports: "},
		{[]string{"--cluster", "east", "--egress-address", "10.0.0.1"}, "--egress-ports: "},
		{[]string{"--cluster", "east", "--egress-address", "not-an-ip", "--egress-ports", "1-2"}, "--egress-address: "},
		{[]string{"--cluster", "east", "--egress-address", "10.0.0.1", "--egress-service", "mcmirror/gw", "--egress-ports", "1-2"}, "give one"},
		{[]string{"--cluster", "east", "--egress-service", "gw", "--egress-ports", "1-2"}, "--egress-service: "},
		{[]string{"--cluster", "east", "--egress-service", "mcmirror/gw/x", "--egress-ports", "1-2"}, "--egress-service: "},
		{[]string{"--cluster", "east", "--egress-service", "Mcmirror/gw", "--egress-ports", "1-2"}, "--egress-service: "},
		{[]string{"--cluster", "east", "--egress-service", "mcmirror/", "--egress-ports", "1-2"}, "--egress-service: "},
		{[]string{"--cluster", "east", "--egress-service", "mcmirror/gw", "--egress-ports", "2-1"}, "--egress-ports: "},
		{with("--export-selector", ""), `--export-selector "": must select some Services`},
		{with("--export-selector", "a=b=c"), `--export-selector "a=b=c"`},
		{with("--link", "east=/x"), "--link east: that is this cluster's name"},
		{with("--link", "west"), `invalid value "west" for flag -link: want NAME=KUBECONFIG[:CONTEXT]`},
		{with("--link", "west=/x", "--link", "west=/y"), `link "west" given twice`},
		{with("--link", "west=/nonexistent"), "link west: kubeconfig /nonexistent: stat"},
		{with("--link", "west="+garbage), "link west: kubeconfig " + garbage},
		{with("--link", "west="+kc+":nope"), `link west: kubeconfig ` + kc + `: no context "nope"`},
		{with("--link-secrets", "Bad_NS"), `--link-secrets: bad namespace "Bad_NS"`},
		{with("--link-secrets", "/a=b"), `--link-secrets: bad namespace ""`},
		{with("--link-secrets", "links/a=b=c"), `--link-secrets: bad selector "a=b=c"`},
		{with("--link-secrets", "links", "--allow-insecure-kubeconfig", "exec,everything"),
			`invalid value "exec,everything" for flag -allow-insecure-kubeconfig: unknown value "everything" (want exec, auth-provider, files, http, skip-tls-verify)`},
		{with("--allow-insecure-kubeconfig", "exec"), "--allow-insecure-kubeconfig without --link-secrets"},
		{with("--workers", "0"), "--workers must be at least 1"},
		{with("--workers", "many"), `invalid value "many" for flag -workers`},
		{with("--pod-grace", "-1s"), "--pod-grace, --link-removal-grace and --headless-grace must not be negative"},
		{with("--link-removal-grace", "-1s"), "--pod-grace, --link-removal-grace and --headless-grace must not be negative"},
		{with("--headless-grace", "-1s"), "--pod-grace, --link-removal-grace and --headless-grace must not be negative"},
		{with("--pod-grace", "30"), `invalid value "30" for flag -pod-grace`},
		{with("--kube-api-qps", "0"), "--kube-api-qps must be positive"},
		{with("--kube-api-burst", "0"), "--kube-api-burst at least 1"},
		{with("--service-export-mode", "mesh"), `--service-export-mode "mesh": want gateway or flat`},
		{with("--leader-elect", "--leader-elect-renew-deadline", "20s"), "--leader-elect-lease-duration must exceed --leader-elect-renew-deadline"},
		{with("--leader-elect", "--leader-elect-retry-period", "0s"), "must be positive"},
		{with("--leader-elect", "--leader-elect-name", "Bad_Name"), `--leader-elect-name "Bad_Name" is not a valid name`},
		{with("--metrics-addr", "nope:nope"), "--metrics-addr: "},
		{with("extra"), `unexpected arguments ["extra"]`},
		{with("--no-such-flag"), "flag provided but not defined: -no-such-flag (-h lists the flags)"},
		// A non-loopback egress address, so that the kubeconfig is
		// reached and is what fails.
		{[]string{"--cluster", "east", "--egress-address", "10.0.0.1", "--egress-ports", "1-2", "--kubeconfig", "/nonexistent"}, "local cluster: kubeconfig /nonexistent: stat"},
		{[]string{"--cluster", "east", "--egress-address", "10.0.0.1", "--egress-ports", "1-2", "--kubeconfig", garbage}, "local cluster: kubeconfig " + garbage},
		{with("--context", "nope"), `local cluster: kubeconfig ` + kc + `: no context "nope"`},
	} {
		code, out := runCorednsMC(t, false, append([]string{"controller"}, tc.args...)...)
		assert.Equal(t, 2, code, "%q", tc.args)
		assert.Contains(t, out, tc.want, "%q", tc.args)
		assert.True(t, strings.HasPrefix(out, "coredns-mc controller: "), "%q: %s", tc.args, out)
		assert.Equal(t, 1, strings.Count(strings.TrimSpace(out), "\n")+1, "one line for %q: %s", tc.args, out)
	}
}

func TestControllerHelp(t *testing.T) {
	var code int
	out := stderrOf(t, func() { code = runController([]string{"-h"}) })
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "usage: coredns-mc controller")
	assert.Contains(t, out, "-allow-insecure-kubeconfig")
}

// leaseHolder returns the Lease's holder ("" when released).
func leaseHolder(t *testing.T, client *fake.Clientset) (string, time.Time) {
	t.Helper()
	l, err := client.CoordinationV1().Leases("kube-system").Get(context.Background(), "mcmirror-controller", metav1.GetOptions{})
	require.NoError(t, err)
	var renew time.Time
	if l.Spec.RenewTime != nil {
		renew = l.Spec.RenewTime.Time
	}
	return ptr.Deref(l.Spec.HolderIdentity, ""), renew
}

// leaderWait is how long a leader-election test waits for what the elector
// does every retry period (100 ms) before it fails: a machine at load 4
// meets it by far; only what never comes fails.
const leaderWait = 30 * time.Second

// testLeaderConfig renews every 100 ms, so that the tests see renewals at
// once, and gives a renewal 20 s before the Lease is given up (30 s
// lease): a starved machine that stalls a renewal for a second must not
// lose the Lease under a test that is not about losing it.
func testLeaderConfig(client *fake.Clientset, wd *leaderelection.HealthzAdaptor) leaderConfig {
	return leaderConfig{client: client, namespace: "kube-system", name: "mcmirror-controller", identity: "me",
		leaseDuration: 30 * time.Second, renewDeadline: 20 * time.Second, retryPeriod: 100 * time.Millisecond, watchdog: wd}
}

// On SIGTERM the Lease is held (and renewed) until the controller's
// workers have stopped, and released only then: another replica never
// writes while this one's syncs still run.
func TestLeaderReleasesAfterSyncsStop(t *testing.T) {
	client := fake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started, stopping, finish := make(chan struct{}), make(chan struct{}), make(chan struct{})
	run := func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		close(stopping)
		<-finish // a sync still writing
		return nil
	}
	done := make(chan int)
	go func() {
		code, err := runLeaderElected(ctx, testLeaderConfig(client, nil), run, klog.Background())
		assert.NoError(t, err)
		done <- code
	}()
	<-started
	holder, _ := leaseHolder(t, client)
	require.Equal(t, "me", holder)

	cancel() // SIGTERM
	<-stopping
	// Positive evidence the elector still runs: the Lease is renewed after
	// the signal; it is still ours.
	_, at := leaseHolder(t, client)
	require.Eventually(t, func() bool {
		h, renewed := leaseHolder(t, client)
		return h == "me" && renewed.After(at)
	}, leaderWait, 10*time.Millisecond, "renewed while the syncs run")
	holder, _ = leaseHolder(t, client)
	assert.Equal(t, "me", holder, "not released while a sync runs")

	close(finish)
	select {
	case code := <-done:
		assert.Equal(t, 0, code)
	case <-time.After(leaderWait):
		t.Fatal("leader election did not end")
	}
	holder, _ = leaseHolder(t, client)
	assert.Empty(t, holder, "released once the controller stopped")
}

// /healthz fails when the leader has not renewed its Lease for the
// documented staleness (not the lease duration later, as client-go's
// HealthzAdaptor alone would): a renewal that hangs is detected. The
// failure is seen at stale after the last renewal plus what the machine
// takes to run the elector and the test's poll (milliseconds; a second
// or two when starved), and told apart from stale plus the lease
// duration: the bound lies halfway between.
func TestLeaderWatchdogStaleness(t *testing.T) {
	const stale, lease = 6 * time.Second, 4 * time.Second
	client := fake.NewClientset()
	var mu sync.Mutex
	hang := false
	var lastRenewal time.Time
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		h := hang
		if !h {
			lastRenewal = time.Now()
		}
		mu.Unlock()
		if h {
			select {} // a renewal that never returns
		}
		return false, nil, nil
	})
	lc := testLeaderConfig(client, nil)
	lc.leaseDuration, lc.renewDeadline = lease, 3*time.Second
	lc.watchdog = newLeaderWatchdog(stale, lc.leaseDuration)
	started := make(chan struct{})
	go func() {
		_, _ = runLeaderElected(t.Context(), lc, func(ctx context.Context) error { close(started); <-ctx.Done(); return nil }, klog.Background())
	}()
	<-started
	// Renewed at least once (an update), then renewals hang.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		if lastRenewal.IsZero() {
			return false
		}
		hang = true
		return true
	}, leaderWait, 10*time.Millisecond)
	require.NoError(t, lc.watchdog.Check(nil), "healthy right after a renewal")
	var failedAt time.Time
	require.Eventually(t, func() bool {
		if lc.watchdog.Check(nil) != nil {
			failedAt = time.Now()
			return true
		}
		return false
	}, stale+lease+leaderWait, 10*time.Millisecond)
	mu.Lock()
	since := failedAt.Sub(lastRenewal)
	mu.Unlock()
	t.Logf("/healthz failed %v after the last renewal (stale %v, lease %v)", since.Round(time.Millisecond), stale, lease)
	assert.GreaterOrEqual(t, since, stale-50*time.Millisecond, "not before the documented staleness")
	assert.Less(t, since, stale+lease/2, "fails at the documented staleness, not the lease duration later")
}

// Renewals have their own client, rate limiter and user agent.
func TestLeaderElectionClient(t *testing.T) {
	cfg := &rest.Config{Host: "https://192.0.2.1:6443", QPS: 1, Burst: 1}
	sync, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	le, err := leaderElectionClient(cfg)
	require.NoError(t, err)
	assert.NotSame(t, sync.CoordinationV1().RESTClient().GetRateLimiter(), le.CoordinationV1().RESTClient().GetRateLimiter())
	// Exhaust the sync client's limiter: the Lease's is untouched.
	assert.True(t, sync.CoordinationV1().RESTClient().GetRateLimiter().TryAccept())
	assert.False(t, sync.CoordinationV1().RESTClient().GetRateLimiter().TryAccept())
	assert.True(t, le.CoordinationV1().RESTClient().GetRateLimiter().TryAccept())
	assert.Empty(t, cfg.UserAgent, "cfg is not changed")
}

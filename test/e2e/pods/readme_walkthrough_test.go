package pods

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/mcmirror/mcmirror/test/harness"
)

var (
	workloadsOnce sync.Once
	workloadsErr  error
)

// workloads installs mcmirror (installed), then runs nginx-set in west and
// east and the client pod in east, once per package.
func workloads(t *testing.T) {
	t.Helper()
	installed(t)
	workloadsOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		imgs, err := harness.LocalImages()
		if err != nil {
			workloadsErr = err
			return
		}
		for _, c := range []string{"west", "east"} {
			if workloadsErr = env.Cluster(c).Apply(ctx, harness.PeerSet(c, imgs.Busybox)); workloadsErr != nil {
				return
			}
		}
		if workloadsErr = env.Cluster("east").Apply(ctx, harness.BusyboxClient(imgs.Busybox)); workloadsErr != nil {
			return
		}
		for _, c := range []string{"west", "east"} {
			if _, workloadsErr = env.Cluster(c).Kubectl(ctx, "rollout", "status", "statefulset/nginx-set", "--timeout=3m"); workloadsErr != nil {
				return
			}
		}
		_, workloadsErr = env.Cluster("east").Kubectl(ctx, "wait", "--for=condition=Ready", "pod/client", "--timeout=3m")
	})
	if workloadsErr != nil {
		t.Fatal(workloadsErr)
	}
}

// inClient runs sh -c script in east's client pod and returns its output.
func inClient(ctx context.Context, script string) (string, error) {
	return env.Cluster("east").Kubectl(ctx, "exec", "client", "--", "sh", "-c", script)
}

// eventually runs script in the client pod until its output, trimmed, is
// want, or ctx ends.
func eventually(t *testing.T, ctx context.Context, script, want string) {
	t.Helper()
	var out string
	var err error
	if werr := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		out, err = inClient(ctx, script)
		return err == nil && strings.TrimSpace(out) == want, nil
	}); werr != nil {
		t.Fatalf("%s: want %q, last output %q, error %v", script, want, out, err)
	}
}

// TestWalkthroughOnPods is the README's walkthrough on real pods: from
// east's client pod, through east's cluster DNS pods (coredns-mc),
// kube-proxy and the gateway pods of both clusters, to StatefulSet pods of
// west that serve real HTTP and plain TCP.
func TestWalkthroughOnPods(t *testing.T) {
	env.LogOnFailure(t)
	workloads(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// One remote pod by its short name: the search path of the pod's
	// resolv.conf, as the kubelet wrote it.
	for i := range 3 {
		eventually(t, ctx, fmt.Sprintf("timeout 10 wget -qO- http://nginx-set-%d.nginx-svc-west/", i),
			fmt.Sprintf("hello from west/default/nginx-set-%d", i))
	}
	// A plain TCP port, through the same path.
	eventually(t, ctx, "echo ping-over-tcp | timeout 10 nc nginx-set-1.nginx-svc-west 7000", "ping-over-tcp")

	// SRV on the -global name: every peer, west's and east's own.
	var targets []string
	require.NoError(t, wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		out, err := inClient(ctx, "nslookup -type=SRV _http._tcp.nginx-svc-global.default.svc.cluster.local")
		if err != nil {
			return false, nil
		}
		targets = srvTargets(out)
		return len(targets) == 6, nil
	}), "SRV targets %v", targets)
	var want []string
	for _, c := range []string{"nginx-svc-west", "nginx-svc"} {
		for i := range 3 {
			want = append(want, fmt.Sprintf("nginx-set-%d.%s.default.svc.cluster.local", i, c))
		}
	}
	sort.Strings(want)
	require.Equal(t, want, targets)
}

// srvTargets returns the sorted targets of busybox nslookup's SRV answer
// lines ("name service = 0 16 80 target.").
func srvTargets(out string) []string {
	var ts []string
	for _, line := range strings.Split(out, "\n") {
		_, rr, ok := strings.Cut(line, "service = ")
		if !ok {
			continue
		}
		f := strings.Fields(rr)
		if len(f) == 4 {
			ts = append(ts, strings.TrimSuffix(f[3], "."))
		}
	}
	sort.Strings(ts)
	return ts
}

var errorLine = regexp.MustCompile(`(?m)^.*(\[ERROR\]|\] E\d{4} |^E\d{4} |panic:|level=error).*$`)

// TestLogsFreeOfErrors reads the logs of every gateway and cluster DNS pod
// of both clusters, after the tests before it (files sort it last: this
// file's name, and the test's place in it) and finds no error in them.
func TestLogsFreeOfErrors(t *testing.T) {
	env.LogOnFailure(t)
	workloads(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range env.Clusters() {
		for _, sel := range [][2]string{
			{"mcmirror", "app.kubernetes.io/name=mcmirror-gateway"},
			{"kube-system", "k8s-app=kube-dns"},
		} {
			out, err := c.Kubectl(ctx, "-n", sel[0], "logs", "-l", sel[1], "--all-containers", "--prefix", "--tail=-1")
			require.NoError(t, err)
			require.NotEmpty(t, strings.TrimSpace(out), "%s: no logs of %s", c.Name, sel[1])
			if bad := errorLine.FindAllString(out, -1); len(bad) > 0 {
				t.Errorf("%s: %s logged errors:\n%s", c.Name, sel[1], strings.Join(bad, "\n"))
			}
		}
	}
}

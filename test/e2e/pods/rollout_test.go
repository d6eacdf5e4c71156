package pods

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/mcmirror/mcmirror/test/harness"
)

// fetchLoop is a shell loop for east's client pod: it fetches URL until
// /tmp/stop-NAME exists, one connection (and one DNS lookup) each, and
// classifies every try: the whole answer (ok), a lookup that failed
// (lost: an answer the cluster DNS did not give), a connection that failed
// with an error (failed: seen by the client), or an answer that is not the
// expected one although the transfer reported success (bad: a stream cut
// or redirected silently). A try may take as long as the pod's resolver
// needs to give up (resolv.conf's defaults: 5 s, 2 attempts). Formatted
// with NAME, URL and the expected body.
const fetchLoop = `rm -f /tmp/stop-%[1]s; n=0; ok=0; lost=0; failed=0; bad=0; slow=0
while [ ! -e /tmp/stop-%[1]s ]; do
  n=$((n+1))
  out=$(timeout 25 wget -qO- %[2]s 2>&1); rc=$?
  if [ $rc -eq 0 ] && [ "$out" = %[3]q ]; then ok=$((ok+1))
  elif [ $rc -eq 0 ]; then bad=$((bad+1)); echo "bad: $out"
  else case $out in *"bad address"*) lost=$((lost+1)); echo "lost: $out";; *) failed=$((failed+1)); echo "failed: $out";; esac
  fi
done
echo "tries=$n ok=$ok lost=$lost failed=$failed bad=$bad slow=$slow"`

// lookupLoop is a shell loop for east's client pod that asks the cluster
// DNS for NAME until /tmp/stop-NAME exists, as a resolver does: one
// attempt of 5 s and, when it goes unanswered, a second. An answer that is
// the expected address is ok; one answered only by the second attempt is
// also counted slow (a UDP query lost on the way, which every client's
// resolver retries); an other answer is bad; no answer after both attempts
// is lost. A slow or lost lookup is printed with the time (UTC) and what
// nslookup said. Formatted with NAME, the name and the expected
// "Address: IP" line.
const lookupLoop = `rm -f /tmp/stop-%[1]s; n=0; ok=0; lost=0; bad=0; slow=0
while [ ! -e /tmp/stop-%[1]s ]; do
  n=$((n+1))
  o=$(timeout 5 nslookup %[2]s 2>&1); a=$(echo "$o" | grep '^Address: ' | head -1)
  if [ -z "$a" ]; then
    slow=$((slow+1)); t=$(date +%%T); o1=$(echo $o)
    o=$(timeout 5 nslookup %[2]s 2>&1); a=$(echo "$o" | grep '^Address: ' | head -1)
    echo "slow: first attempt from $t: $o1; second until $(date +%%T): $(echo $o)"
  fi
  if [ "$a" = %[3]q ]; then ok=$((ok+1))
  elif [ -n "$a" ]; then bad=$((bad+1)); echo "bad: $a"
  else lost=$((lost+1)); echo "lost"; fi
done
echo "tries=$n ok=$ok lost=$lost failed=0 bad=$bad slow=$slow"`

var tallyRE = regexp.MustCompile(`tries=(\d+) ok=(\d+) lost=(\d+) failed=(\d+) bad=(\d+) slow=(\d+)`)

// tally is what a client loop counted.
type tally struct{ tries, ok, lost, failed, bad, slow int }

// startLoop starts script, a fetchLoop or lookupLoop called name, in
// east's client pod and returns a function that stops it and returns its
// tally and output.
func startLoop(t *testing.T, name, script string) func() (tally, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := inClient(ctx, script)
		done <- result{out, err}
	}()
	return func() (tally, string) {
		defer cancel()
		_, err := inClient(ctx, "touch /tmp/stop-"+name)
		require.NoError(t, err)
		r := <-done
		require.NoError(t, r.err, r.out)
		m := tallyRE.FindStringSubmatch(r.out)
		require.NotNil(t, m, "no tally in %q", r.out)
		var tl tally
		fmt.Sscan(strings.Join(m[1:], " "), &tl.tries, &tl.ok, &tl.lost, &tl.failed, &tl.bad, &tl.slow)
		return tl, r.out
	}
}

// startLookups starts a lookupLoop of the name nginx-set-0 of west has in
// east, with the address it has now, and a timeline of east's cluster DNS
// (watchTimeline). The function it returns stops both and returns the
// tally, and the loop's output followed by the timeline.
func startLookups(t *testing.T, ctx context.Context, name string) func() (tally, string) {
	t.Helper()
	const host = "nginx-set-0.nginx-svc-west.default.svc.cluster.local"
	// The first test to run may come right after west's StatefulSet is
	// Ready, before east's controller and DNS have seen it: wait for the
	// name to resolve rather than read it once.
	var out, want string
	var err error
	if werr := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		out, err = inClient(ctx, "nslookup "+host+" | grep '^Address: ' | head -1")
		want = strings.TrimSpace(out)
		return err == nil && strings.HasPrefix(want, "Address: "), nil
	}); werr != nil {
		t.Fatalf("%s never resolved in east: last output %q, error %v", host, out, err)
	}
	timeline, err := watchTimeline(ctx, env.Cluster("east"))
	require.NoError(t, err)
	stop := startLoop(t, name, fmt.Sprintf(lookupLoop, name, host, want))
	return func() (tally, string) {
		tl, out := stop()
		return tl, out + "\neast's cluster DNS meanwhile (UTC):\n" + timeline()
	}
}

// requireLookups asserts what a DNS rollout promises on a lookup loop's
// tally: no lookup answered wrong or left unanswered by both attempts, at
// most 1 % of them needed the resolver's second attempt (a UDP query lost
// on a starved machine, which a retry answers), and the loop ran.
// Whenever a lookup needed a second attempt, the loop's lines and the
// timeline are logged. (Before the DNS patch probed readiness every
// second, a pod exited while its endpoint still served, and queries that
// followed a stale conntrack entry to it were refused: 3 or 4 per
// rollout, and 1 lookup in about 25,000 unanswered by both attempts. The
// refusals, "Connection refused" in the lines of retried lookups, are
// forbidden outright.)
func requireLookups(t *testing.T, what string, tl tally, out string) {
	t.Helper()
	t.Logf("lookups during %s: %+v", what, tl)
	if tl.slow > 0 || tl.lost > 0 {
		t.Logf("%s:\n%s", what, out)
	}
	require.Zero(t, tl.lost, "lookups no attempt answered:\n%s", out)
	// A refused query is a pod that has exited while traffic still goes to
	// it, not a starved machine: none, however the second attempt went.
	require.NotContains(t, out, "Connection refused", "queries refused by a DNS pod that had gone:\n%s", out)
	require.Zero(t, tl.bad, "lookups answered wrong:\n%s", out)
	require.Positive(t, tl.ok, out)
	require.LessOrEqual(t, tl.slow*100, tl.tries, "more than 1%% of lookups needed a second attempt:\n%s", out)
}

// TestRolloutsLoseNothing restarts east's and west's gateways while a
// client in east keeps fetching a pod of west by name, and then east's
// cluster DNS while it keeps looking the name up. A gateway rollout may
// refuse connections (errors the client sees; counted and logged) but
// ends no transfer short or wrong without an error, and the client is
// served through the new pods once the old ones are gone. The DNS rollout
// keeps a serving pod at every moment: no lookup goes unanswered.
func TestRolloutsLoseNothing(t *testing.T) {
	env.LogOnFailure(t)
	workloads(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	url, want := "http://nginx-set-0.nginx-svc-west/", "hello from west/default/nginx-set-0"
	eventually(t, ctx, "timeout 10 wget -qO- "+url, want)

	for _, cluster := range []string{"east", "west"} {
		name := cluster + "-gateway"
		stop := startLoop(t, name, fmt.Sprintf(fetchLoop, name, url, want))
		// Evidence that the loop runs before the rollout starts.
		eventually(t, ctx, "timeout 10 wget -qO- "+url, want)
		rollout(t, ctx, env.Cluster(cluster), "mcmirror", "mcmirror-gateway", "app.kubernetes.io/name=mcmirror-gateway")
		// Served again through the new pods before the loop stops.
		eventually(t, ctx, "timeout 10 wget -qO- "+url, want)
		tl, out := stop()
		t.Logf("rollout of %s's gateway: %+v", cluster, tl)
		require.Zero(t, tl.bad, "answers that were not %q although the transfer succeeded:\n%s", want, out)
		require.Zero(t, tl.lost, "DNS lookups that failed:\n%s", out)
		require.Positive(t, tl.ok, out)
	}

	stop := startLookups(t, ctx, "east-dns")
	rollout(t, ctx, env.Cluster("east"), "kube-system", "coredns", "k8s-app=kube-dns")
	tl, out := stop()
	requireLookups(t, "the rollout of east's cluster DNS", tl, out)
}

// rollout restarts Deployment ns/name of c and returns once the rollout
// is complete and its old pods are gone (kubectl rollout status returns
// while they still terminate).
func rollout(t *testing.T, ctx context.Context, c *harness.Cluster, ns, name, selector string) {
	t.Helper()
	_, err := c.Kubectl(ctx, "-n", ns, "rollout", "restart", "deployment/"+name)
	require.NoError(t, err)
	_, err = c.Kubectl(ctx, "-n", ns, "rollout", "status", "deployment/"+name, "--timeout=5m")
	require.NoError(t, err)
	d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	require.NoError(t, wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		return err == nil && len(pods.Items) == int(*d.Spec.Replicas), nil
	}), "old pods of %s/%s never went", ns, name)
}

// TestNotReadyPodLeavesTheAnswers makes one pod of west unready (its
// readiness probe fails) and sees it leave east's answers: its own name
// and the SRV of the -global name; ready again, it comes back.
func TestNotReadyPodLeavesTheAnswers(t *testing.T) {
	env.LogOnFailure(t)
	workloads(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	west := env.Cluster("west")
	srv := "nslookup -type=SRV _http._tcp.nginx-svc-global.default.svc.cluster.local | grep -c 'service ='"
	eventually(t, ctx, srv, "6")
	eventually(t, ctx, "timeout 10 wget -qO- http://nginx-set-2.nginx-svc-west/", "hello from west/default/nginx-set-2")

	_, err := west.Kubectl(ctx, "exec", "nginx-set-2", "--", "busybox", "mv", "/tmp/www/index.html", "/tmp/www/away.html")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = west.Kubectl(context.Background(), "exec", "nginx-set-2", "--", "busybox", "mv", "/tmp/www/away.html", "/tmp/www/index.html")
	})
	_, err = west.Kubectl(ctx, "wait", "--for=condition=Ready=false", "pod/nginx-set-2", "--timeout=2m")
	require.NoError(t, err)
	eventually(t, ctx, srv, "5")
	eventually(t, ctx, "nslookup nginx-set-2.nginx-svc-west.default.svc.cluster.local >/dev/null 2>&1 && echo found || echo gone", "gone")
	// The others still answer.
	eventually(t, ctx, "timeout 10 wget -qO- http://nginx-set-1.nginx-svc-west/", "hello from west/default/nginx-set-1")

	_, err = west.Kubectl(ctx, "exec", "nginx-set-2", "--", "busybox", "mv", "/tmp/www/away.html", "/tmp/www/index.html")
	require.NoError(t, err)
	eventually(t, ctx, srv, "6")
	eventually(t, ctx, "timeout 10 wget -qO- http://nginx-set-2.nginx-svc-west/", "hello from west/default/nginx-set-2")
}

// TestControllerLeaderFailover deletes the pod of east's controller that
// holds the Lease; the other replica takes over, and proves it by
// mirroring a Service that west exports afterwards.
func TestControllerLeaderFailover(t *testing.T) {
	env.LogOnFailure(t)
	workloads(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	east, west := env.Cluster("east"), env.Cluster("west")
	holder := func(ctx context.Context) string {
		l, err := east.Client.CoordinationV1().Leases("mcmirror").Get(ctx, "mcmirror-controller", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		pod, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
		return pod
	}
	var leader string
	require.NoError(t, wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		leader = holder(ctx)
		return leader != "", nil
	}))
	_, err := east.Kubectl(ctx, "-n", "mcmirror", "delete", "pod", leader, "--wait=false")
	require.NoError(t, err)
	var successor string
	require.NoError(t, wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		successor = holder(ctx)
		return successor != "" && successor != leader, nil
	}), "the Lease stayed with %s", leader)

	// West exports a new Service; only a working leader mirrors it.
	require.NoError(t, west.Apply(ctx, `
apiVersion: v1
kind: Service
metadata: {name: after-failover, namespace: default, labels: {mirror.linkerd.io/exported: "true"}}
spec:
  selector: {app: nginx}
  ports: [{name: http, port: 80}]
`))
	t.Cleanup(func() { _, _ = west.Kubectl(context.Background(), "delete", "service", "after-failover") })
	require.NoError(t, wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := east.Client.CoreV1().Services("default").Get(ctx, "after-failover-west", metav1.GetOptions{})
		return err == nil, nil
	}), "the successor %s did not mirror after-failover", successor)
	eventually(t, ctx, "timeout 10 wget -qO- http://after-failover-west/ | cut -c1-32", "hello from west/default/nginx-se")
}

// TestDNSRolloutWithLoopKeepsOldPods rolls east's cluster DNS to a
// Corefile that every new pod fails on (an unknown directive: the pod
// exits at start and restarts, again and again). The patch's rollout
// strategy (maxUnavailable 0) must keep both old pods serving: the
// client's lookups go on being answered, and the Deployment keeps its two
// available pods. Then the rollout is undone. (A real forwarding loop, the
// case that motivates minReadySeconds, makes each new pod forward its own
// queries to itself until it exits, which exhausted this machine's threads
// in a test: the crash here comes from the Corefile instead.)
func TestDNSRolloutWithLoopKeepsOldPods(t *testing.T) {
	env.LogOnFailure(t)
	workloads(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	east := env.Cluster("east")

	cm, err := east.Client.CoreV1().ConfigMaps("kube-system").Get(ctx, "coredns-mcmirror", metav1.GetOptions{})
	require.NoError(t, err)
	corefile := cm.Data["Corefile"]
	loopLine := regexp.MustCompile(`(?m)^(\s*)loop$`)
	require.Regexp(t, loopLine, corefile)
	broken := loopLine.ReplaceAllString(corefile, "${1}loop\n${1}no-such-plugin")
	cm.ObjectMeta = metav1.ObjectMeta{Name: "coredns-loop", Namespace: "kube-system"}
	cm.Data = map[string]string{"Corefile": broken}
	_, err = east.Client.CoreV1().ConfigMaps("kube-system").Create(ctx, cm, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = east.Client.CoreV1().ConfigMaps("kube-system").Delete(context.Background(), "coredns-loop", metav1.DeleteOptions{})
	})
	before, err := east.Client.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 2, before.Status.AvailableReplicas)

	stop := startLookups(t, ctx, "dns-loop")
	_, err = east.Kubectl(ctx, "-n", "kube-system", "patch", "deployment", "coredns", "--type=json", "-p",
		`[{"op":"replace","path":"/spec/template/spec/volumes/0/configMap/name","value":"coredns-loop"}]`)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = east.Kubectl(context.Background(), "-n", "kube-system", "rollout", "undo", "deployment/coredns")
		_, _ = east.Kubectl(context.Background(), "-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=5m")
	})
	// Positive evidence: a new pod of the broken Corefile has died at
	// least once, and the rollout has had longer than minReadySeconds
	// since.
	var crashed time.Time
	require.NoError(t, wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := east.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
		if err != nil {
			return false, nil
		}
		for _, p := range pods.Items {
			for _, v := range p.Spec.Volumes {
				if v.ConfigMap == nil || v.ConfigMap.Name != "coredns-loop" {
					continue
				}
				for _, cs := range p.Status.ContainerStatuses {
					if cs.RestartCount > 0 && crashed.IsZero() {
						crashed = time.Now()
					}
				}
			}
		}
		return !crashed.IsZero() && time.Since(crashed) > 40*time.Second, nil
	}), "no pod of the broken Corefile crashed")
	d, err := east.Client.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 2, d.Status.AvailableReplicas, "available DNS pods during the failed rollout: %+v", d.Status)
	tl, out := stop()
	requireLookups(t, "the failed rollout", tl, out)
}

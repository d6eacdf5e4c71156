package link_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/grant"
	"github.com/mcmirror/mcmirror/test/harness"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// An operator's fleet of three: one `coredns-mc link` makes the full mesh,
// each source with a token of its own in each target; `coredns-mc check`
// over the same list shows every pair linked and synced by each source's
// DNS; run again, link writes nothing and says so. A link Secret deleted,
// then an API server stopped: check fails, naming exactly the pairs that
// broke; link again restores the one pair and leaves the others
// unchanged. unlink over the list removes the mesh, and says there is
// nothing left to remove when run again.
func TestMeshLinkCheckUnlink(t *testing.T) {
	ctx := context.Background()
	mesh, list := newMesh(t, "east", "west", "tokyo")
	east, tokyo := mesh[0], mesh[2]
	host, err := env.HostAddress()
	require.NoError(t, err)
	for _, c := range mesh {
		startClusterDNS(t, c, host)
	}
	all := []string{"east->west", "east->tokyo", "west->east", "west->tokyo", "tokyo->east", "tokyo->west"}

	r := mustRun(t, append([]string{"link"}, list...)...)
	assert.Equal(t, results(all, "linked"), outcomes(t, r.stdout))
	assert.Contains(t, r.stdout, "6 pairs: 6 linked")
	for _, s := range mesh {
		for _, tg := range mesh {
			if s == tg {
				continue
			}
			link, err := s.Client.CoreV1().Secrets(grant.DefaultLinkNamespace).Get(ctx, "cluster-credentials-"+tg.Name, metav1.GetOptions{})
			require.NoError(t, err, "%s links %s", s.Name, tg.Name)
			_, err = tg.Client.CoreV1().Secrets(grant.DefaultNamespace).Get(ctx, grant.TokenPrefix+"-"+s.Name, metav1.GetOptions{})
			require.NoError(t, err, "%s has a token of its own in %s", s.Name, tg.Name)
			_, err = linkClient(t, link).CoreV1().Services("").List(ctx, metav1.ListOptions{Limit: 1})
			require.NoError(t, err, "the link Secret of %s for %s works", s.Name, tg.Name)
		}
	}

	allOK := func(code int, rep fleetReport) string {
		if code != 0 || rep.Summary.OK != 6 {
			return fmt.Sprintf("exit %d, %+v: %s", code, rep.Summary, rep.problems())
		}
		return ""
	}
	rep := untilCheck(t, list, "every pair linked and synced", allOK)
	for _, p := range rep.Pairs {
		assert.Equal(t, []string{"ok", "yes", "1/1", "-"}, []string{p.Status, p.Linked, p.Synced, p.Gateway}, "%s->%s", p.Source, p.Target)
		assert.True(t, strings.HasSuffix(p.LastChange, " ago"), "%s->%s heard from %q", p.Source, p.Target, p.LastChange)
	}
	code, text := checkText(t, list)
	assert.Equal(t, 0, code, text)
	assert.Contains(t, text, "mcmirror check of 3 clusters (east, west, tokyo), topology mesh: 6 pairs")
	assert.Contains(t, text, "6 ok, 0 warn, 0 fail")

	// Again: nothing written, and said so.
	before := linkVersions(t, mesh)
	r = mustRun(t, append([]string{"link"}, list...)...)
	assert.Equal(t, results(all, "unchanged"), outcomes(t, r.stdout))
	assert.Contains(t, r.stdout, "6 pairs: 6 unchanged")
	assert.Equal(t, before, linkVersions(t, mesh), "no link Secret or token rewritten")

	// East's link Secret for west deleted: that pair alone fails.
	require.NoError(t, east.Client.CoreV1().Secrets(grant.DefaultLinkNamespace).Delete(ctx, "cluster-credentials-west", metav1.DeleteOptions{}))
	untilCheck(t, list, "east->west failing, named", func(code int, rep fleetReport) string {
		p := rep.pair("east", "west")
		if code != 1 || rep.Summary.Fail != 1 || rep.Summary.OK != 5 || p.Linked != "no" || p.Synced != "0/1" {
			return fmt.Sprintf("exit %d, %+v, east->west %+v", code, rep.Summary, p)
		}
		return ""
	})
	code, text = checkText(t, list)
	assert.Equal(t, 1, code)
	assert.Contains(t, text, "fail  linked east->west: east has no link Secret for west in mcmirror-links")
	assert.Contains(t, text, "fix: coredns-mc link --context west --cluster west --source-context east --source-cluster east")
	assert.Contains(t, text, "does not link west")

	r = mustRun(t, append([]string{"link"}, list...)...)
	want := results(all, "unchanged")
	want["east->west"] = "linked"
	assert.Equal(t, want, outcomes(t, r.stdout))
	assert.Contains(t, r.stdout, "created Secret mcmirror-links/cluster-credentials-west in east")
	untilCheck(t, list, "every pair ok again", allOK)

	// Tokyo's API server stopped: the pairs of tokyo fail, the others not.
	restart := tokyo.APIServerOutage(t)
	rep = untilCheck(t, list, "tokyo's pairs failing, east's DNS seeing its link down", func(code int, rep fleetReport) string {
		for _, p := range rep.Pairs {
			if (p.Status == "fail") != (p.Source == "tokyo" || p.Target == "tokyo") {
				return fmt.Sprintf("%s->%s: %s: %s", p.Source, p.Target, p.Status, rep.problems())
			}
		}
		if code != 1 || rep.pair("east", "tokyo").Synced != "0/1" {
			return fmt.Sprintf("exit %d, east->tokyo %+v", code, rep.pair("east", "tokyo"))
		}
		return ""
	})
	assert.Equal(t, "api", rep.pair("tokyo", "east").Problems[0].ID)
	assert.Equal(t, "failing", rep.pair("west", "tokyo").Linked)
	assert.Contains(t, rep.problems(), "pod kube-system/coredns-e2e's link to tokyo is down, serving its last known state")
	restart()
	untilCheck(t, list, "every pair ok once tokyo is back", allOK)

	r = mustRun(t, append([]string{"unlink"}, list...)...)
	assert.Equal(t, results(all, "unlinked"), outcomes(t, r.stdout))
	for _, c := range mesh {
		secrets, err := c.Client.CoreV1().Secrets(grant.DefaultLinkNamespace).List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		assert.Empty(t, secrets.Items, "no link Secret left in %s", c.Name)
		assertGone(t, ctx, c)
	}
	r = mustRun(t, append([]string{"unlink"}, list...)...)
	assert.Equal(t, results(all, "unchanged"), outcomes(t, r.stdout))
	assert.Contains(t, r.stdout, "not linked: no link Secret for west in east/mcmirror-links")
}

// A pair that fails does not stop the others: paris grants no token (no
// token controller), so the pairs that link paris fail, after the token
// wait, and the rest are linked; one table says which; exit code 1.
func TestMeshContinuesPastFailedPairs(t *testing.T) {
	ctx := context.Background()
	fleet, list := newMesh(t, "east", "west", "paris")
	east, paris := fleet[0], fleet[2]

	r := coredns(t, append([]string{"link", "--token-timeout", "3s"}, list...)...)
	assert.Equal(t, 1, r.code)
	assert.Equal(t, map[string]string{"east->west": "linked", "east->paris": "failed", "west->east": "linked",
		"west->paris": "failed", "paris->east": "linked", "paris->west": "linked"}, outcomes(t, r.stdout))
	assert.Contains(t, r.stdout, "no token in Secret mcmirror/mcmirror-link-token-west after 3s")
	assert.Contains(t, r.stdout, "6 pairs: 4 linked, 2 failed")
	assert.Contains(t, r.stderr, "coredns-mc link: 2 of 6 pairs failed (the others are done)")
	for _, s := range []*harness.Cluster{paris, east} {
		_, err := s.Client.CoreV1().Secrets(grant.DefaultLinkNamespace).Get(ctx, "cluster-credentials-west", metav1.GetOptions{})
		assert.NoError(t, err, "%s links west", s.Name)
	}
	_, err := east.Client.CoreV1().Secrets(grant.DefaultLinkNamespace).Get(ctx, "cluster-credentials-paris", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "no link Secret for paris without a token: %v", err)

	r = mustRun(t, append([]string{"unlink"}, list...)...)
	assert.Equal(t, results([]string{"east->west", "east->paris", "west->east", "west->paris", "paris->east", "paris->west"}, "unlinked"), outcomes(t, r.stdout))
	for _, c := range fleet {
		assertGone(t, ctx, c)
	}
}

// ---- helpers of the mesh ----

// newMesh starts a test of the fleet of clusters names: each has the link
// namespace, and nothing links them when the test ends. It returns the
// clusters, and the arguments that name them to link, unlink and check:
// their contexts and a kubeconfig with one context per cluster, named as
// the cluster, as the operator of a fleet has it.
func newMesh(t *testing.T, names ...string) ([]*harness.Cluster, []string) {
	t.Helper()
	env.LogOnFailure(t)
	var cs []*harness.Cluster
	for _, n := range names {
		cs = append(cs, env.Cluster(n))
	}
	cleanMesh(t, cs...)
	env.CreateNamespace(t, grant.DefaultLinkNamespace, cs...)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, env.WriteKubeconfig(path))
	return cs, append(append([]string(nil), names...), "--kubeconfig", path)
}

// cleanMesh removes, when t ends, what a test left of links between cs.
func cleanMesh(t *testing.T, cs ...*harness.Cluster) {
	for _, c := range cs {
		cleanLinks(t, c)
	}
	t.Cleanup(func() {
		for _, c := range cs {
			_ = c.Client.CoreV1().Secrets(grant.DefaultLinkNamespace).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
		}
	})
}

// meshCorefile is a cluster DNS of the mesh: mcmirror following the link
// Secrets, its metrics on every address of this machine (the API server's
// proxy reaches them at the pod's address), before kubernetes.
func meshCorefile(c *harness.Cluster) string {
	return fmt.Sprintf(`
. {
    bind {HOST}
    errors
    ready {HOST}:{READY}
    prometheus :{METRICS}
    mcmirror cluster.local in-addr.arpa ip6.arpa {
        cluster %[1]s
        kubeconfig %[2]s
        link_secrets %[3]s
        fallthrough in-addr.arpa ip6.arpa
    }
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig %[2]s
        fallthrough in-addr.arpa ip6.arpa
    }
}
`, c.Name, c.Kubeconfig, grant.DefaultLinkNamespace)
}

// startClusterDNS runs c's cluster DNS for t, and installs it as check
// reads it: Deployment kube-system/coredns mounting the Corefile from
// ConfigMap kube-system/coredns, and a running pod of it at host, where the
// process serves its metrics. The Deployment asks for no replica: the pod,
// which nothing schedules, stands for its one.
func startClusterDNS(t *testing.T, c *harness.Cluster, host netip.Addr) {
	t.Helper()
	ctx := context.Background()
	cf := meshCorefile(c)
	dns := env.StartDNS(t, c.Name+"/coredns", cf)
	u, err := url.Parse(dns.MetricsURL)
	require.NoError(t, err)
	asRun := strings.NewReplacer("{HOST}", "127.0.0.1", "{READY}", "8181", "{METRICS}", u.Port()).Replace(cf)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: "kube-system"}, Data: map[string]string{"Corefile": asRun}}
	_, err = c.Client.CoreV1().ConfigMaps("kube-system").Create(ctx, cm, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, c.Apply(ctx, dnsDeployment))
	pod, err := c.Client.CoreV1().Pods("kube-system").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "coredns-e2e", Namespace: "kube-system", Labels: map[string]string{"k8s-app": "kube-dns"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "coredns", Image: "ghcr.io/mcmirror/coredns-mc:e2e"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: host.String(), PodIPs: []corev1.PodIP{{IP: host.String()}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	_, err = c.Client.CoreV1().Pods("kube-system").UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		zero := int64(0)
		_ = c.Client.CoreV1().Pods("kube-system").Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		_ = c.Client.AppsV1().Deployments("kube-system").Delete(ctx, "coredns", metav1.DeleteOptions{})
		_ = c.Client.CoreV1().ConfigMaps("kube-system").Delete(ctx, "coredns", metav1.DeleteOptions{})
	})
}

// dnsDeployment is the cluster DNS as kubeadm lays it out, where check
// finds it: the Corefile of ConfigMap coredns, as -conf.
const dnsDeployment = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: coredns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  replicas: 0
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec:
      containers:
      - name: coredns
        image: ghcr.io/mcmirror/coredns-mc:e2e
        args: [-conf, /etc/coredns/Corefile]
        volumeMounts: [{name: config-volume, mountPath: /etc/coredns, readOnly: true}]
      volumes:
      - name: config-volume
        configMap: {name: coredns, items: [{key: Corefile, path: Corefile}]}
`

// outcomes reads link's or unlink's table: the result of each pair.
func outcomes(t *testing.T, stdout string) map[string]string {
	t.Helper()
	t.Logf("the table:\n%s", stdout)
	lines := strings.Split(stdout, "\n")
	require.NotEmpty(t, lines)
	require.Equal(t, []string{"SOURCE", "TARGET", "RESULT", "DETAIL"}, strings.Fields(lines[0]), stdout)
	out := map[string]string{}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) == 0 {
			break
		}
		out[f[0]+"->"+f[1]] = f[2]
	}
	return out
}

// results is each pair with result r.
func results(pairs []string, r string) map[string]string {
	out := map[string]string{}
	for _, p := range pairs {
		out[p] = r
	}
	return out
}

// linkVersions are the resourceVersions of every link Secret and link
// token of cs, by cluster and name.
func linkVersions(t *testing.T, cs []*harness.Cluster) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, c := range cs {
		for _, ns := range []string{grant.DefaultLinkNamespace, grant.DefaultNamespace} {
			list, err := c.Client.CoreV1().Secrets(ns).List(context.Background(), metav1.ListOptions{})
			require.NoError(t, err)
			for _, s := range list.Items {
				out[c.Name+"/"+ns+"/"+s.Name] = s.ResourceVersion
			}
		}
	}
	return out
}

// fleetReport is `coredns-mc check -o json` over a list of contexts, as
// deploy/check.md documents it.
type fleetReport struct {
	Pairs   []pairRow
	Summary struct{ OK, Warn, Fail int }
}

// pairRow is one pair of a fleetReport.
type pairRow struct {
	Source, Target, Status, Linked, Synced, LastChange, Gateway string
	Problems                                                    []struct{ ID, Subject, Status, Message, Fix string }
}

// pair returns the row of source->target, or an empty one.
func (r fleetReport) pair(source, target string) pairRow {
	for _, p := range r.Pairs {
		if p.Source == source && p.Target == target {
			return p
		}
	}
	return pairRow{}
}

// problems lists every problem of the report, one a line.
func (r fleetReport) problems() string {
	var b strings.Builder
	for _, p := range r.Pairs {
		for _, x := range p.Problems {
			fmt.Fprintf(&b, "%s %s %s: %s\n", x.Status, x.ID, x.Subject, x.Message)
		}
	}
	return b.String()
}

// untilCheck runs check over the fleet of list (newMesh) until wrong says
// nothing is wrong with its exit code and report, and returns that report.
func untilCheck(t *testing.T, list []string, what string, wrong func(code int, rep fleetReport) string) fleetReport {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		r := coredns(t, append(append([]string{"check"}, list...), "--timeout", "5s", "-o", "json")...)
		var rep fleetReport
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), "the JSON report:\n%s", r.stdout)
		msg := wrong(r.code, rep)
		if msg == "" {
			return rep
		}
		if time.Now().After(deadline) {
			t.Fatalf("check: not %s within 90s: %s", what, msg)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// checkText runs check over the fleet of list, text output.
func checkText(t *testing.T, list []string) (int, string) {
	t.Helper()
	r := coredns(t, append(append([]string{"check"}, list...), "--timeout", "5s")...)
	t.Logf("check's report:\n%s", r.stdout)
	return r.code, r.stdout
}

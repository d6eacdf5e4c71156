package pods

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"
)

// checkReport is the part of `coredns-mc check -o json` the tests read
// (deploy/check.md, "JSON").
type checkReport struct {
	FormatVersion int `json:"formatVersion"`
	Results       []struct {
		ID      string `json:"id"`
		Subject string `json:"subject"`
		Status  string `json:"status"`
		Message string `json:"message"`
		Fix     string `json:"fix"`
	} `json:"results"`
}

// check runs `bin/coredns-mc check --context CLUSTER -o json` as a user
// does, from outside the clusters (the cluster DNS through a port-forward
// to one of its pods), and returns its report and exit status. check
// prints its report and nothing else: not a line of client-go's log.
func check(t *testing.T, ctx context.Context, cluster string) (checkReport, error, string) {
	t.Helper()
	out, err := env.InstallShell(ctx, "s=0; bin/coredns-mc check --context "+cluster+" -o json 2>check.err || s=$?\n"+
		"if [ -s check.err ]; then echo '--- stderr:'; cat check.err; fi; exit $s")
	// What the script printed, after InstallShell's copy of the script.
	printed := out[strings.LastIndex(out, "\n--- output"):]
	assert.NotContains(t, printed, "--- stderr:", "check writes only its report")
	// InstallShell returns the script, then the output.
	i := strings.Index(out, "\n{")
	require.GreaterOrEqual(t, i, 0, "no JSON report:\n%s", out)
	var r checkReport
	require.NoError(t, json.NewDecoder(strings.NewReader(out[i+1:])).Decode(&r), out)
	require.Equal(t, 1, r.FormatVersion)
	return r, err, out
}

// TestCheckOnPods runs `coredns-mc check` against east as installed on real
// nodes, once mirrors exist: every check is ok, the cluster DNS's among
// them, asked for a mirror's name through a port-forward to a DNS pod
// (but for the gateway's /readyz through the API server's service proxy,
// which cannot reach pods here: a warning, see allOK).
// Then west's gateway is stopped, and check fails, naming west's
// unreachable gateway; with west's gateway back, it is all ok again.
func TestCheckOnPods(t *testing.T) {
	env.LogOnFailure(t)
	workloads(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	eventually(t, ctx, "timeout 10 wget -qO- http://nginx-set-0.nginx-svc-west/", "hello from west/default/nginx-set-0")

	allOK := func() {
		t.Helper()
		var r checkReport
		var err error
		var out string
		// The gateways' probes and the DNS's view settle within seconds of
		// a change: wait for the report to settle, then require it clean.
		_ = wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
			r, err, out = check(t, ctx, "east")
			return err == nil, nil
		})
		require.NoError(t, err, out)
		ids := map[string]bool{}
		for _, res := range r.Results {
			ids[res.ID] = true
			if res.ID == "gateway" && res.Status == "warn" && strings.Contains(res.Message, "through the API server") {
				// The one thing this machine cannot give check: the API
				// servers here run outside the nodes' pod network, so the
				// API server's service proxy cannot reach a pod (a
				// cluster's usually can). check says so, with a fix, and
				// does not call it a failure; the gateway's state still
				// comes through peer-reachable (its /peers, by the
				// gateway pods' own probes).
				continue
			}
			assert.Equal(t, "ok", res.Status, "%s %s: %s (fix: %s)", res.ID, res.Subject, res.Message, res.Fix)
		}
		for _, id := range []string{"rbac-controller", "rbac-gateway", "rbac-dns", "dns", "link", "peer-reachable", "peer-certificate", "egress-ports", "controller-leader", "versions"} {
			assert.True(t, ids[id], "no %s in the report:\n%s", id, out)
		}
	}
	allOK()

	west := env.Cluster("west")
	_, err := west.Kubectl(ctx, "-n", "mcmirror", "scale", "deployment/mcmirror-gateway", "--replicas=0")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = west.Kubectl(context.Background(), "-n", "mcmirror", "scale", "deployment/mcmirror-gateway", "--replicas=2")
	})
	var r checkReport
	var out string
	require.NoError(t, wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		r, err, out = check(t, ctx, "east")
		for _, res := range r.Results {
			if res.ID == "peer-reachable" && res.Subject == "west" && res.Status == "fail" {
				return true, nil
			}
		}
		return false, nil
	}), "check never named west's stopped gateway:\n%s", out)
	require.Error(t, err, "check exits non-zero on a failure:\n%s", out)

	_, err = west.Kubectl(ctx, "-n", "mcmirror", "scale", "deployment/mcmirror-gateway", "--replicas=2")
	require.NoError(t, err)
	_, err = west.Kubectl(ctx, "-n", "mcmirror", "rollout", "status", "deployment/mcmirror-gateway", "--timeout=5m")
	require.NoError(t, err)
	eventually(t, ctx, "timeout 10 wget -qO- http://nginx-set-0.nginx-svc-west/", "hello from west/default/nginx-set-0")
	allOK()
}

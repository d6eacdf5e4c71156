package faults_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// localOutage is how long east's own API server stays down.
const localOutage = 20 * time.Second

// East's own API server goes away: DNS keeps answering from its cache
// (no wrong answer, no SERVFAIL, no query left unanswered; a query
// answered only by a retry is counted and bounded, see querier_test.go),
// the controller deletes nothing, and both resume when it returns (a new
// export is mirrored and answered).
func TestLocalAPIServerDown(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	east, west := env.Cluster("east"), env.Cluster("west")
	const ns = "local-down"
	env.CreateNamespace(t, ns)
	require.NoError(t, west.Apply(ctx, clusterIPExport(ns, "api", labels.ExportGateway)+"---\n"+
		headlessExport(ns, "peers", labels.ExportGateway, 3, 61, 1)+"---\n"+
		headlessExport(ns, "flat", labels.ExportFlat, 2, 61, 2)))
	ls := []harness.Link{{Name: "west", Kubeconfig: west.LinkFile(t)}}
	ctl := startController(t, "controller", "", ls)
	waitMirrors(t, ns, []string{"api-west", "peers-west", "peers-0-west", "peers-1-west", "peers-2-west", "flat-west"}, 60*time.Second)
	ips := mirrorIPs(t, ns)
	dnsServer := startDNS(t, ls)
	want := map[string][]string{
		"api-west." + ns + "." + zone:           {ips["api-west"]},
		"peers-2.peers-west." + ns + "." + zone: {ips["peers-2-west"]},
		"flat-west." + ns + "." + zone:          {"10.61.2.1", "10.61.2.2"},
	}
	waitAnswers(t, dnsServer, want)
	mirrorsBefore := mirrorSet(t, ns)
	slicesBefore := mirrorSlices(t, ns)
	q := query(dnsServer, want)
	defer q.stop()
	// Evidence it was seen: DNS counts and logs the failing local cluster.
	// (The controller's informers retry a refused connection without a
	// word; that it carried on is shown by what it does after.)
	down, restart := outage(t, dnsServer, east, "Local cluster east is down (unreachable)", "last known state")
	q.answeredSince(t, time.Now(), "once the outage is seen")
	time.Sleep(time.Until(down.Add(localOutage))) // the outage lasts
	env.RequireAlive(t, ctl.Process, dnsServer.Process)
	q.answeredSince(t, time.Now(), "at the end of the outage")
	restart()
	t.Logf("east's API server back after %.1fs", time.Since(down).Seconds())

	// The controller resumes: a new export is mirrored and answered.
	require.NoError(t, west.Apply(ctx, clusterIPExport(ns, "late", labels.ExportGateway)))
	start := time.Now()
	waitKept(t, ns, mirrorsBefore, slicesBefore, "late-west", 60*time.Second)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		answered(c, dnsServer, "late-west."+ns+"."+zone)
	}, 30*time.Second, 100*time.Millisecond)
	t.Logf("new export after east's return mirrored and answered in %.1fs", time.Since(start).Seconds())

	q.answeredSince(t, time.Now(), "after east's return")
	q.stop().requireRight(t, "during and after the outage")
	env.RequireAlive(t, ctl.Process, dnsServer.Process)
	requireKept(t, ns, mirrorsBefore, slicesBefore, "late-west")
}

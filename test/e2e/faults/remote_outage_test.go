package faults_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcmirror/mcmirror/internal/labels"
)

const (
	// remoteOutage is how long west's API server stays down.
	remoteOutage = 60 * time.Second
	// shortMaxAge is the stale bound of the second DNS server.
	shortMaxAge = 10 * time.Second
	// recoveryBound is the longest a change made in a cluster that came
	// back may take to be answered.
	recoveryBound = 5 * time.Second
)

// West's API server goes away for a minute while DNS is asked without
// pause: every name keeps its last answer, the link's metrics and log say
// it is unreachable, a server with a short stale bound drops west's names
// after it and answers them again on recovery, a change made right after
// west returns is answered within 5 s, and the controller keeps every
// mirror.
func TestRemoteAPIServerDown(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	west := env.Cluster("west")
	const ns = "remote-down"
	namespace(t, ns)
	require.NoError(t, west.Apply(ctx, clusterIPExport(ns, "web", labels.ExportGateway)+"---\n"+
		headlessExport(ns, "db", labels.ExportFlat, 3, 60, 1)+"---\n"+
		headlessExport(ns, "cache", labels.ExportGateway, 2, 60, 2)))
	ls := []link{{"west", linkFile(t, west)}}
	ctl := startController(t, "controller", "", ls)
	waitMirrors(t, ns, []string{"web-west", "db-west", "cache-west", "cache-0-west", "cache-1-west"}, 60*time.Second)
	ips := mirrorIPs(t, ns)
	slicesBefore := mirrorSlices(t, ns)

	full := startDNS(t, "coredns-mc", ls)
	bounded := startDNS(t, "coredns-mc-bounded", ls, fmt.Sprintf("%s %s", staleOption, shortMaxAge))
	want := map[string][]string{
		"web-west." + ns + "." + zone:           {ips["web-west"]},
		"cache-0.cache-west." + ns + "." + zone: {ips["cache-0-west"]},
		"db-1.db-west." + ns + "." + zone:       {"10.60.1.2"},
		"db-west." + ns + "." + zone:            {"10.60.1.1", "10.60.1.2", "10.60.1.3"},
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for name, addrs := range want {
			assert.Equal(c, addrs, answered(c, full, name), name)
			assert.Equal(c, addrs, answered(c, bounded, name), name)
		}
	}, 30*time.Second, 100*time.Millisecond, "both servers answer before the outage")
	q := query(full, want)
	defer q.stop()
	qb := query(bounded, want)
	defer qb.stop()
	mirrorsBefore := mirrorSet(t, ns)
	errorsBefore := metric(t, full.MetricsURL, `coredns_mcmirror_link_watch_errors_total{cluster="west"}`)

	down := time.Now()
	restart := west.APIServerOutage(t)
	t.Logf("west's API server stopped at %s", down.Format("15:04:05.000"))

	// Evidence the outage was seen: the link's error counter moved and
	// the log says west is served from its last known state.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Greater(c, metric(c, full.MetricsURL, `coredns_mcmirror_link_watch_errors_total{cluster="west"}`), errorsBefore)
		assert.True(c, logHas(full.Process, "Cluster west", "last known state"), "log says west is served stale")
	}, 30*time.Second, 200*time.Millisecond, "the outage is reported")

	// The bounded server drops west's names once they are older than its
	// bound, and not before it served them stale.
	var gone time.Duration
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		r, err := ask(bounded, "web-west."+ns+"."+zone, dns.TypeA)
		require.NoError(c, err)
		assert.Empty(c, addrs(r), "west's names go after %s", shortMaxAge)
		gone = time.Since(down)
	}, shortMaxAge+20*time.Second, 200*time.Millisecond, "the bounded server drops west after %s", shortMaxAge)
	t.Logf("bounded server (%s %s): west's names gone %.1fs into the outage", staleOption, shortMaxAge, gone.Seconds())
	qb.mu.Lock()
	servedStale := qb.lastOK["web-west."+ns+"."+zone].After(down)
	qb.mu.Unlock()
	assert.True(t, servedStale, "the bounded server answered west's names after the outage began, before its bound")

	// The rest of the outage.
	time.Sleep(time.Until(down.Add(remoteOutage)))
	env.RequireAlive(t, full.Process, bounded.Process, ctl.Process)
	asked, bad := q.stats()
	t.Logf("during the outage: %d queries to the unbounded server, %d wrong", asked, bad)
	assert.Equal(t, mirrorsBefore, mirrorSet(t, ns), "the controller keeps every mirror while west is down")

	restart()
	back := time.Now()
	t.Logf("west's API server ready again after %.1fs down", back.Sub(down).Seconds())
	// Changes right after the return: a new endpoint of the flat export
	// (DNS alone), and a new gateway export (controller and DNS).
	require.NoError(t, west.Apply(ctx, headlessExport(ns, "db", labels.ExportFlat, 4, 60, 1)))
	require.NoError(t, west.Apply(ctx, clusterIPExport(ns, "fresh", labels.ExportGateway)))
	changed := time.Now()
	var flatAfter, exportAfter, boundedAfter time.Duration
	deadline := changed.Add(recoveryBound)
	for time.Now().Before(deadline) && (flatAfter == 0 || exportAfter == 0 || boundedAfter == 0) {
		if flatAfter == 0 {
			if r, err := ask(full, "db-3.db-west."+ns+"."+zone, dns.TypeA); err == nil && slices.Equal(addrs(r), []string{"10.60.1.4"}) {
				flatAfter = time.Since(changed)
			}
		}
		if exportAfter == 0 {
			if r, err := ask(full, "fresh-west."+ns+"."+zone, dns.TypeA); err == nil && len(addrs(r)) == 1 {
				exportAfter = time.Since(changed)
			}
		}
		if boundedAfter == 0 {
			if r, err := ask(bounded, "web-west."+ns+"."+zone, dns.TypeA); err == nil && slices.Equal(addrs(r), want["web-west."+ns+"."+zone]) {
				boundedAfter = time.Since(back)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("after the return: new flat endpoint answered in %v, new export in %v, bounded server answers west again in %v (0: not within %v)",
		flatAfter.Round(time.Millisecond), exportAfter.Round(time.Millisecond), boundedAfter.Round(time.Millisecond), recoveryBound)
	assert.NotZero(t, flatAfter, "a new endpoint in west is answered within %v of its return", recoveryBound)
	assert.NotZero(t, exportAfter, "a new export in west is mirrored and answered within %v of its return", recoveryBound)
	assert.NotZero(t, boundedAfter, "the bounded server answers west's names again within %v of its return", recoveryBound)
	assert.Eventually(t, func() bool { return logHas(full.Process, "Cluster west is reachable again") }, 30*time.Second, 200*time.Millisecond)

	asked, bad, samples := q.stop()
	t.Logf("unbounded server: %d queries in all, %d wrong", asked, bad)
	assert.Greater(t, asked, 1000, "the querier kept asking")
	assert.Zero(t, bad, "every name kept its last answer throughout: %v", samples)

	// The controller kept every mirror and EndpointSlice (same UIDs), and
	// added the new one.
	env.RequireAlive(t, ctl.Process)
	waitMirrors(t, ns, append(slices.Collect(maps.Keys(mirrorsBefore)), "fresh-west"), 30*time.Second)
	after := mirrorSet(t, ns)
	delete(after, "fresh-west")
	assert.Equal(t, mirrorsBefore, after, "no mirror was deleted or recreated")
	sl := mirrorSlices(t, ns)
	for name, uid := range slicesBefore {
		assert.Equal(t, uid, sl[name], "EndpointSlice %s kept", name)
	}
}

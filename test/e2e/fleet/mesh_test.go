package fleet_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// linkNS holds each cluster's link Secrets.
const linkNS = "mcmirror-links"

// meshNS holds each cluster's exported Service web.
const meshNS = "mesh"

// webAddr is the address of the one pod of cluster i's web.
func webAddr(i int) string { return fmt.Sprintf("10.210.%d.1", i) }

// The fleet: ten clusters, each exporting web (flat) and running a
// coredns-mc linked to the nine others by link Secrets. Every cluster
// answers every other's web; a link Secret deleted takes that cluster's
// names out of one cluster only, and put back brings them back; one API
// server restarted is watched again by every other cluster, whose answers
// stay right throughout.
func TestFullMesh(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	clusters := env.Clusters()
	require.Len(t, clusters, fleetSize)
	for i, c := range clusters {
		require.NoError(t, c.Apply(ctx, harness.Namespace(meshNS)+"---\n"+harness.Namespace(linkNS)))
		exportWeb(t, c, webAddr(i))
	}
	servers := make([]*harness.DNSServer, len(clusters))
	for i, c := range clusters {
		for _, r := range clusters {
			if r != c {
				c.CreateLinkSecret(t, linkNS, r.Name, r.LinkData(t))
			}
		}
		servers[i] = env.StartFleet(t, harness.FleetOptions{Local: c.Name, Parts: harness.FleetDNS, LinkSecrets: linkNS}).DNS
	}

	// Every cluster answers every other's web: 90 names.
	every := func(what string, skip func(from, to int) bool) {
		t.Helper()
		for i, s := range servers {
			for j, r := range clusters {
				if i == j || skip(i, j) {
					continue
				}
				waitA(t, s, webName(r), []string{webAddr(j)}, "%s: %s in %s", what, webName(r), clusters[i].Name)
			}
		}
	}
	every("the mesh", func(int, int) bool { return false })

	// Unlink: c4 deletes its link Secret of c7; only c4 loses c7's names.
	from, to := clusters[4], clusters[7]
	require.NoError(t, from.Client.CoreV1().Secrets(linkNS).Delete(ctx, labels.LinkSecretNamePrefix+to.Name, metav1.DeleteOptions{}))
	waitA(t, servers[4], webName(to), nil, "c4 no longer answers c7's web")
	every("after the unlink", func(i, j int) bool { return i == 4 && j == 7 })
	// Relink: back.
	from.CreateLinkSecret(t, linkNS, to.Name, to.LinkData(t))
	waitA(t, servers[4], webName(to), []string{webAddr(7)}, "c4 answers c7's web again")

	// c3's API server restarts: every other cluster's link to it goes
	// down and comes back, and its web is answered, as it was, throughout.
	restarted := clusters[3]
	wrong := watchAnswers(t, servers, clusters, 3)
	restart := restarted.APIServerOutage(t)
	others := func(do func(s *harness.DNSServer, in string)) {
		for i, s := range servers {
			if i != 3 {
				do(s, clusters[i].Name)
			}
		}
	}
	up := fmt.Sprintf(`coredns_mcmirror_link_up{cluster=%q}`, restarted.Name)
	others(func(s *harness.DNSServer, in string) { waitMetric(t, s, up, 0, "%s sees c3 down", in) })
	restart()
	others(func(s *harness.DNSServer, in string) { waitMetric(t, s, up, 1, "%s sees c3 up again", in) })
	// A change in c3 after its restart reaches every cluster.
	exportWeb(t, restarted, "10.210.3.2")
	others(func(s *harness.DNSServer, in string) {
		waitA(t, s, webName(restarted), []string{"10.210.3.2"}, "%s answers c3's change", in)
	})
	asked, bad := wrong()
	t.Logf("%d answers of c3's web during its restart, %d wrong", asked, len(bad))
	assert.Positive(t, asked)
	assert.Empty(t, bad, "answers during c3's restart that were neither its old address nor its new one")
}

func webName(c *harness.Cluster) string {
	return "web-" + c.Name + "." + meshNS + ".svc.cluster.local."
}

// exportWeb makes web in c a flat-exported selector-less Service with one
// hand-made slice (carrying the export label itself) of address addr.
func exportWeb(t *testing.T, c *harness.Cluster, addr string) {
	t.Helper()
	require.NoError(t, c.Apply(context.Background(), fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata: {name: web, namespace: %[1]s, labels: {%[2]s: %[3]s}}
spec: {clusterIP: None, ports: [{name: http, port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-manual
  namespace: %[1]s
  labels: {%[4]s: web, %[5]s: e2e, %[2]s: %[3]s}
addressType: IPv4
ports: [{name: http, port: 80}]
endpoints: [{addresses: [%[6]q], conditions: {ready: true}}]
`, meshNS, labels.Exported, labels.ExportFlat, discoveryv1.LabelServiceName, discoveryv1.LabelManagedBy, addr)))
}

// waitA waits until s answers name with exactly want (NXDOMAIN or no
// record for none).
func waitA(t *testing.T, s *harness.DNSServer, name string, want []string, msg string, args ...any) {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Equal(ct, want, harness.Answers(s.Ask(ct, "udp", name, dns.TypeA)))
	}, time.Minute, 50*time.Millisecond, append([]any{msg}, args...)...)
}

// waitMetric waits until s exports series with value want.
func waitMetric(t *testing.T, s *harness.DNSServer, series string, want float64, msg string, args ...any) {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Equal(ct, want, harness.RequireSeries(ct, s.MetricsURL, series))
	}, time.Minute, 50*time.Millisecond, append([]any{msg}, args...)...)
}

// watchAnswers asks every other cluster for cluster k's web until the
// returned function is called, which returns how many answers came and
// those that were neither k's old address nor its new one.
func watchAnswers(t *testing.T, servers []*harness.DNSServer, clusters []*harness.Cluster, k int) func() (int, []string) {
	stop := make(chan struct{})
	var mu sync.Mutex
	asked := 0
	var bad []string
	ok := map[string]bool{fmt.Sprint([]string{webAddr(k)}): true, fmt.Sprint([]string{"10.210.3.2"}): true}
	var wg sync.WaitGroup
	for i, s := range servers {
		if i == k {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				m := new(dns.Msg)
				m.SetQuestion(webName(clusters[k]), dns.TypeA)
				r, _, err := (&dns.Client{Timeout: 5 * time.Second}).Exchange(m, s.Addr)
				var got []string
				if err == nil {
					got = harness.Answers(r)
				}
				mu.Lock()
				asked++
				if err != nil || !ok[fmt.Sprint(got)] {
					bad = append(bad, fmt.Sprintf("%s: %v %v", clusters[i].Name, got, err))
				}
				mu.Unlock()
			}
		}()
	}
	var once sync.Once
	done := func() (int, []string) {
		once.Do(func() { close(stop); wg.Wait() })
		mu.Lock()
		defer mu.Unlock()
		return asked, bad
	}
	t.Cleanup(func() { done() })
	return done
}

package dns_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// startDNSWithFile is env.StartDNS with the Corefile at path, which the
// test may rewrite: {READY} and {METRICS} are replaced by free ports once,
// {HOST} by 127.0.0.1, and the returned function writes a new body with the
// same ports.
func startDNSWithFile(t *testing.T, name, path, corefile string) (*harness.DNSServer, func(string)) {
	t.Helper()
	bin, err := harness.CorednsMC()
	require.NoError(t, err)
	port, readyPort, metricsPort := harness.FreePort(t), harness.FreePort(t), harness.FreePort(t)
	fill := strings.NewReplacer("{READY}", strconv.Itoa(readyPort), "{METRICS}", strconv.Itoa(metricsPort), "{HOST}", "127.0.0.1").Replace
	write := func(body string) {
		// Rename, so that a reload never reads half a file.
		tmp := path + ".new"
		require.NoError(t, os.WriteFile(tmp, []byte(fill(body)), 0o644))
		require.NoError(t, os.Rename(tmp, path))
	}
	write(corefile)
	s := &harness.DNSServer{
		Addr:       net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		MetricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort),
	}
	s.Process = env.StartProcess(t, name, nil, bin, "-conf", path, "-dns.port", strconv.Itoa(port))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		done, err := s.Process.Exited()
		require.False(c, done, "coredns-mc exited: %v\n%s", err, s.Process.Tail(20))
		r := s.Ask(c, "udp", "kubernetes.default.svc.cluster.local.", dns.TypeA)
		assert.Equal(c, dns.RcodeSuccess, r.Rcode)
	}, 60*time.Second, 50*time.Millisecond, "coredns-mc ready")
	return s, write
}

// ttlOf asks name and returns the answers and the TTL of the first record.
func ttlOf(t require.TestingT, s *harness.DNSServer, name string) ([]string, uint32) {
	r := s.Ask(t, "udp", name, dns.TypeA)
	if len(r.Answer) == 0 {
		return nil, 0
	}
	return harness.Answers(r), r.Answer[0].Header().Ttl
}

// A reload with a Corefile mistake keeps the running configuration
// serving, and says where the mistake is; a good one is then taken.
func TestReloadWithBadCorefileKeepsServing(t *testing.T) {
	env.LogOnFailure(t)
	ctx := context.Background()
	east, west := env.Cluster("east"), env.Cluster("west")
	const ns = "reload"
	require.NoError(t, west.Apply(ctx, statefulSet(ns, 1, labels.ExportFlat)))
	eps := waitEndpoints(t, west, ns, "nginx-svc", 1)

	// reload's shortest interval is 2s.
	withTTL := func(ttl string) string {
		cf := harness.MirrorCorefile(east, harness.LinkLines(t, west)+"        ttl "+ttl+"\n")
		return strings.Replace(cf, "    errors\n", "    errors\n    reload 2s\n", 1)
	}
	path := filepath.Join(t.TempDir(), "Corefile")
	s, write := startDNSWithFile(t, "east/coredns-mc", path, withTTL("11"))
	name := "nginx-svc-west." + ns + "." + zone
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, ttl := ttlOf(c, s, name)
		assert.Equal(c, values(eps), got)
		assert.EqualValues(c, 11, ttl)
	}, 30*time.Second, 50*time.Millisecond, "first configuration")

	const failed = "coredns_reload_failed_total"
	before := s.Value(t, failed)
	bad := withTTL("99999")
	write(bad)
	badLine := 1 + strings.Count(bad[:strings.Index(bad, "ttl 99999")], "\n")

	// Positive evidence: the reload was tried, failed, and said where.
	waitMetricAbove(t, s, failed, before)
	waitLogLine(t, s.Process, fmt.Sprintf("plugin/mcmirror: %s:%d - Error during parsing: ttl must be in range [0, 3600]: 99999", path, badLine))
	env.RequireAlive(t, s.Process)
	got, ttl := ttlOf(t, s, name)
	assert.Equal(t, values(eps), got, "the old configuration answers")
	assert.EqualValues(t, 11, ttl, "the old configuration answers")

	// A good Corefile is taken: the test would see a change.
	write(withTTL("7"))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, ttl := ttlOf(c, s, name)
		assert.Equal(c, values(eps), got)
		assert.EqualValues(c, 7, ttl)
	}, 30*time.Second, 50*time.Millisecond, "the good Corefile after the bad one")
	env.RequireAlive(t, s.Process)
}

// A reload that drops a link drops that link's series with it; a link
// both configurations have keeps its series.
func TestReloadDroppingALinkDropsItsSeries(t *testing.T) {
	env.LogOnFailure(t)
	east, west, paris := env.Cluster("east"), env.Cluster("west"), env.Cluster("paris")
	withLinks := func(remotes ...*harness.Cluster) string {
		return strings.Replace(harness.MirrorCorefile(east, harness.LinkLines(t, remotes...)), "    errors\n", "    errors\n    reload 2s\n", 1)
	}
	path := filepath.Join(t.TempDir(), "Corefile")
	s, write := startDNSWithFile(t, "east/coredns-mc", path, withLinks(west, paris))
	const synced = "coredns_mcmirror_link_synced"
	linkSynced := func(c require.TestingT, cluster string) (float64, bool) {
		v, found, err := harness.ScrapeMetric(s.MetricsURL, synced, map[string]string{"cluster": cluster})
		require.NoError(c, err)
		return v, found
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, cl := range []string{"west", "paris"} {
			v, found := linkSynced(c, cl)
			assert.True(c, found && v == 1, "%s synced", cl)
		}
	}, 30*time.Second, 50*time.Millisecond, "both links synced")

	write(withLinks(west))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, found := linkSynced(c, "paris")
		assert.False(c, found, "paris's link_synced after the reload that unlinked it")
	}, 30*time.Second, 50*time.Millisecond, "paris's series gone")
	env.RequireAlive(t, s.Process)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		v, found := linkSynced(c, "west")
		assert.True(c, found && v == 1, "west's link_synced")
	}, 30*time.Second, 50*time.Millisecond, "west, linked before and after the reload, keeps its series")
}

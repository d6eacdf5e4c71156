package dns_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// hasTTL checks that name answers want, the first record with TTL ttl.
func hasTTL(t require.TestingT, s *harness.DNSServer, name string, want []string, ttl uint32, msg ...any) {
	r := s.Ask(t, "udp", name, dns.TypeA)
	assert.Equal(t, want, harness.Answers(r), msg...)
	if assert.NotEmpty(t, r.Answer, msg...) {
		assert.EqualValues(t, ttl, r.Answer[0].Header().Ttl, msg...)
	}
}

// A reload with a Corefile mistake keeps the running configuration
// serving, and says where the mistake is; a good one is then taken.
func TestReloadWithBadCorefileKeepsServing(t *testing.T) {
	ctx, _, west, _ := setUp(t)
	const ns = "reload"
	require.NoError(t, west.Apply(ctx, statefulSet(ns, 1, labels.ExportFlat)))
	eps := west.WaitEndpoints(t, ns, "nginx-svc", 1)

	// reload's shortest interval is 2s.
	s := env.StartFleet(t, harness.FleetOptions{Local: "east", Remotes: []string{"west"}, Parts: harness.FleetDNS,
		Plugins: []string{"reload 2s"}, Block: []string{"ttl 11"}}).DNS
	withTTL := func(ttl string) string {
		return s.EditCorefile(t, func(cf string) string { return regexp.MustCompile(`ttl \d+`).ReplaceAllString(cf, "ttl "+ttl) })
	}
	name := "nginx-svc-west." + ns + "." + zone
	require.EventuallyWithT(t, func(c *assert.CollectT) { hasTTL(c, s, name, values(eps), 11) },
		30*time.Second, 50*time.Millisecond, "first configuration")

	const failed = "coredns_reload_failed_total"
	before := s.Value(t, failed)
	bad := withTTL("99999")
	badLine := 1 + strings.Count(bad[:strings.Index(bad, "ttl 99999")], "\n")

	// Positive evidence: the reload was tried, failed, and said where.
	waitMetricAbove(t, s.MetricsURL, failed, before)
	waitLogLine(t, s.Process, fmt.Sprintf("plugin/mcmirror: %s:%d - Error during parsing: ttl must be in range [0, 3600]: 99999", s.Corefile, badLine))
	env.RequireAlive(t, s.Process)
	hasTTL(t, s, name, values(eps), 11, "the old configuration answers")

	// A good Corefile is taken: the test would see a change.
	withTTL("7")
	require.EventuallyWithT(t, func(c *assert.CollectT) { hasTTL(c, s, name, values(eps), 7) },
		30*time.Second, 50*time.Millisecond, "the good Corefile after the bad one")
	env.RequireAlive(t, s.Process)
}

// A reload that drops a link drops that link's series with it; a link
// both configurations have keeps its series.
func TestReloadDroppingALinkDropsItsSeries(t *testing.T) {
	env.LogOnFailure(t)
	s := env.StartFleet(t, harness.FleetOptions{Local: "east", Remotes: []string{"west", "paris"}, Parts: harness.FleetDNS,
		Plugins: []string{"reload 2s"}}).DNS
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

	s.EditCorefile(t, func(cf string) string { return regexp.MustCompile(`(?m)^ *link paris .*\n`).ReplaceAllString(cf, "") })
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

package dns_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcmirror/mcmirror/test/harness"
)

// With the cache plugin in front of mcmirror, as in CoreDNS's default
// Corefile, a -global SRV reply too big for a UDP client is kept whole by
// the cache: the server cuts it for each UDP client (TC set), gives it whole
// over TCP, and neither query after the first reaches mcmirror.
func TestCacheInFrontKeepsBigReplies(t *testing.T) {
	env.LogOnFailure(t)
	west := env.Cluster("west")
	const ns, pods = "cached", 20
	exportHeadless(t, west, ns, "peers", 1, pods, func(n int) string { return fmt.Sprintf("10.202.0.%d", n+1) })

	s := env.StartFleet(t, harness.FleetOptions{Local: "east", Remotes: []string{"west"}, Parts: harness.FleetDNS, Plugins: []string{"cache 30"}}).DNS

	// The slice is indexed whole once its last pod answers (a name the
	// SRV queries below do not share a cache entry with).
	last := fmt.Sprintf("peers-%d.peers-west.%s.%s", pods-1, ns, zone)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, []string{"10.202.0.20"}, harness.Answers(s.Ask(c, "udp", last, dns.TypeA)))
	}, 20*time.Second, 50*time.Millisecond, last)

	const srvAnswers = `coredns_mcmirror_answers_total{kind="srv",rcode="NOERROR"}`
	before := s.Value(t, srvAnswers)
	hitsBefore := harness.MetricValue(t, s.MetricsURL, "coredns_cache_hits_total", nil)
	name := "_http._tcp.peers-global." + ns + "." + zone
	for i := range 2 {
		r := s.Ask(t, "udp", name, dns.TypeSRV)
		assert.True(t, r.Truncated, "UDP query %d: TC set", i+1)
		assert.NotEmpty(t, r.Answer, "UDP query %d: some records", i+1)
		assert.Less(t, len(r.Answer), pods, "UDP query %d", i+1)
	}
	r := s.Ask(t, "tcp", name, dns.TypeSRV)
	assert.False(t, r.Truncated, "TCP: TC clear")
	assert.Len(t, r.Answer, pods, "TCP: every SRV record")
	assert.Len(t, glue(r), pods, "TCP: every glue record")

	// Three replies came from the live server; the cache gave two of them.
	assert.Equal(t, 2.0, harness.MetricValue(t, s.MetricsURL, "coredns_cache_hits_total", nil)-hitsBefore, "cache hits")
	assert.Equal(t, 1.0, s.Value(t, srvAnswers)-before, "queries mcmirror answered")
}

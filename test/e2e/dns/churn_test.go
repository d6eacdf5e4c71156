package dns_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// SERVFAIL belongs before the first sync only. Once the server is ready, a
// name that does not exist under a claimed one is NXDOMAIN, and the server
// stays ready, while endpoints churn in a linked cluster (every change
// rebuilds the group the name is in) and while a link added by a Secret
// cannot sync (its API server is not there).
func TestNoServfailDuringChurn(t *testing.T) {
	ctx, east, west, _ := setUp(t)
	const ns = "churn"
	require.NoError(t, west.Apply(ctx, selectorless(ns, "web")))
	require.NoError(t, west.Apply(ctx, sliceOf(t, ns, "web", map[string]string{"web-0": "10.201.2.1"})))
	require.NoError(t, east.Apply(ctx, harness.Namespace("linkerd-multicluster")))

	s := startDNS(t, []string{"west"}, "link_secrets linkerd-multicluster")
	name := "web-west." + ns + "." + zone
	eventuallyAnswers(t, s, name, []string{"10.201.2.1"})
	missing := "web-9." + name

	// Churn: west rewrites the slice as fast as its API server takes it,
	// one to three endpoints, until the test is done.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writes atomic.Int64
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			eps := map[string]string{}
			for j := range 1 + i%3 {
				eps[fmt.Sprintf("web-%d", j)] = fmt.Sprintf("10.201.2.%d", 1+(i+j)%200)
			}
			if west.Apply(ctx, sliceOf(t, ns, "web", eps)) == nil {
				writes.Add(1)
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()

	// A link Secret for a cluster whose API server is not there: the link
	// is added, and never syncs.
	dead := strings.Replace(string(west.LinkData(t)), west.Server, fmt.Sprintf("https://127.0.0.1:%d", harness.FreePort(t)), 1)
	east.CreateLinkSecret(t, "linkerd-multicluster", "moon", []byte(dead))

	// Query for longer than the default startup_timeout (5 s), which a
	// link added late used to hold the answers and readiness up for.
	rcodes := map[string]int{}
	seen := map[string]bool{} // distinct answers of the Service: the churn is seen
	var notReady []string
	for deadline := time.Now().Add(7 * time.Second); time.Now().Before(deadline); {
		rcodes[dns.RcodeToString[s.Ask(t, "udp", missing, dns.TypeA).Rcode]]++
		rcodes[dns.RcodeToString[s.Ask(t, "udp", "_http._tcp."+missing, dns.TypeSRV).Rcode]]++
		seen[strings.Join(harness.Answers(s.Ask(t, "udp", name, dns.TypeA)), ",")] = true
		if err := s.Ready(); err != nil {
			notReady = append(notReady, err.Error())
		}
	}
	// The work was seen: west's changes were answered, and the moon link
	// was added and is failing.
	assert.Greater(t, writes.Load(), int64(20), "slice writes in west")
	assert.Greater(t, len(seen), 5, "distinct answers while west churned: %v", seen)
	v, ok := s.Metric(t, `coredns_mcmirror_link_synced{cluster="moon"}`)
	assert.True(t, ok && v == "0", "the moon link is added and not synced: %q", v)
	v, ok = s.Metric(t, `coredns_mcmirror_link_up{cluster="moon"}`)
	assert.True(t, ok && v == "0", "the moon link is down: %q", v)
	env.RequireAlive(t, s.Process)

	t.Logf("rcodes of %s: %v", missing, rcodes)
	assert.Zero(t, rcodes["SERVFAIL"], "SERVFAIL for a name that does not exist, after the first sync: %v", rcodes)
	assert.Greater(t, rcodes["NXDOMAIN"], 100, "NXDOMAIN answers: %v", rcodes)
	assert.Empty(t, notReady, "/ready answers while west churned and moon failed")
}

// Only the slices of exported Services are sent: west's API server
// selects them by their export label, so the five unexported Services'
// fifteen slices never reach east. Exported (the Service and, written by
// hand, its slices labelled), a Service's three slices are sent and
// answered; unexported again, they go.
func TestOnlyExportedSlicesSent(t *testing.T) {
	ctx, _, west, _ := setUp(t)
	const ns = "held"
	require.NoError(t, west.Apply(ctx, selectorless(ns, "web")))
	require.NoError(t, west.Apply(ctx, sliceOf(t, ns, "web", map[string]string{"web-0": "10.201.3.1"})))
	// Five Services that are not exported, with three slices of six
	// endpoints each.
	var want []string
	for i := range 5 {
		svc := fmt.Sprintf("quiet-%d", i)
		require.NoError(t, west.Apply(ctx, strings.Replace(selectorless(ns, svc), labels.Exported+": "+labels.ExportFlat, "app: quiet", 1)))
		for j := range 3 {
			var eps []discoveryv1.Endpoint
			for k := range 6 {
				ip := fmt.Sprintf("10.201.%d.%d", 10+i, 1+j*6+k)
				eps = append(eps, endpoint(ip, fmt.Sprintf("q-%d-%d", j, k), true))
				if i == 0 {
					want = append(want, ip)
				}
			}
			require.NoError(t, west.Apply(ctx, endpointSlice(t, ns, svc, fmt.Sprintf("%s-%d", svc, j), nil, eps...)))
		}
	}
	s := startDNS(t, []string{"west"})
	eventuallyAnswers(t, s, "web-west."+ns+"."+zone, []string{"10.201.3.1"})

	const held = `coredns_mcmirror_link_objects{cluster="west",kind="endpointslice"}`
	const received = `coredns_mcmirror_remote_events_received_total{cluster="west",kind="endpointslice"}`
	exportedSlices, all := countSlices(t, west)
	require.GreaterOrEqual(t, all, exportedSlices+15, "west has slices of Services that are not exported")
	v, ok := s.Metric(t, held)
	require.True(t, ok, "%s exported", held)
	assert.Equal(t, strconv.Itoa(exportedSlices), v, "slices held: those of exported Services (%d of %d)", exportedSlices, all)
	v, ok = s.Metric(t, received)
	require.True(t, ok, "%s exported", received)
	assert.Equal(t, strconv.Itoa(exportedSlices), v, "slices sent: those of exported Services (%d of %d)", exportedSlices, all)

	// Exported: the Service and its slices labelled, every endpoint of its
	// three slices answered.
	exportQuiet := func(value string) {
		t.Helper()
		require.NoError(t, west.LabelService(ctx, ns, "quiet-0", labels.Exported, value))
		for j := range 3 {
			labelSlice(t, west, ns, fmt.Sprintf("quiet-0-%d", j), labels.Exported, value)
		}
	}
	exportQuiet(labels.ExportFlat)
	eventuallyAnswers(t, s, "quiet-0-west."+ns+"."+zone, slices.Compact(slices.Sorted(slices.Values(want))))
	v, _ = s.Metric(t, held)
	assert.Equal(t, strconv.Itoa(exportedSlices+3), v, "its three slices are held")

	// Unexported: dropped.
	exportQuiet("")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		v, _ := s.Metric(t, held)
		assert.Equal(c, strconv.Itoa(exportedSlices), v)
	}, 15*time.Second, 20*time.Millisecond, "its slices dropped")
	assert.Equal(t, dns.RcodeNameError, s.Ask(t, "udp", "quiet-0-west."+ns+"."+zone, dns.TypeA).Rcode)
	env.RequireAlive(t, s.Process)
}

// labelSlice sets label key of EndpointSlice ns/name to value, or removes
// it when value is empty, as one who writes a selector-less Service's
// slices by hand must when exporting it.
func labelSlice(t *testing.T, c *harness.Cluster, ns, name, key, value string) {
	t.Helper()
	v := "null"
	if value != "" {
		v = strconv.Quote(value)
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%s:%s}}}`, strconv.Quote(key), v)
	_, err := c.Client.DiscoveryV1().EndpointSlices(ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
}

// countSlices returns how many EndpointSlices c holds for exported
// Services, and in all.
func countSlices(t *testing.T, c *harness.Cluster) (exported, all int) {
	t.Helper()
	ctx := context.Background()
	svcs, err := c.Client.CoreV1().Services("").List(ctx, metav1.ListOptions{LabelSelector: labels.DefaultExportSelector})
	require.NoError(t, err)
	isExported := map[string]bool{}
	for _, s := range svcs.Items {
		if s.Labels[labels.MirroredService] == "" {
			isExported[s.Namespace+"/"+s.Name] = true
		}
	}
	list, err := c.Client.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName})
	require.NoError(t, err)
	for _, s := range list.Items {
		all++
		if isExported[s.Namespace+"/"+s.Labels[discoveryv1.LabelServiceName]] {
			exported++
		}
	}
	return exported, all
}

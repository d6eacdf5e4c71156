package mcmirror

import (
	"slices"
	"testing"
	"time"

	"github.com/mcmirror/mcmirror/internal/link"
	"github.com/mcmirror/mcmirror/internal/remote/remotetest"
	"github.com/mcmirror/mcmirror/plugin/mcmirror/watch/watchtest"
	"github.com/stretchr/testify/require"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// These tests run the plugin as setup makes it, over its real watches of
// client-go's fake clientsets: the handler, the index and the watches
// together. Package watch tests the watches themselves.

// startPlugin starts a plugin of cluster east over local, with links
// (name, client pairs) added in order and the settings o (TTL 5, zones
// cluster.local and in-addr.arpa). It fails t when Start, which returns
// once every cluster has synced or startup_timeout has passed, has not
// returned within startup_timeout and watchtest.EventBound: a Start that
// waited for a link that never syncs would never return, and that is what
// the bound tells apart from a slow machine.
func startPlugin(t *testing.T, local kubernetes.Interface, o Options, links ...any) *MCMirror {
	t.Helper()
	o.Zones, o.Cluster, o.TTL = []string{"cluster.local.", "in-addr.arpa."}, "east", 5
	m, err := New(local, o)
	require.NoError(t, err)
	for i := 0; i < len(links); i += 2 {
		require.NoError(t, m.watch.AddLink(links[i].(string), links[i+1].(kubernetes.Interface)))
	}
	t.Cleanup(func() { m.Stop() })
	done := make(chan error, 1)
	go func() { done <- m.Start() }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(o.StartupTimeout + watchtest.EventBound):
		t.Fatalf("Start has not returned %s after startup_timeout %s", watchtest.EventBound, o.StartupTimeout)
	}
	m.Next = fromNext
	return m
}

// askA answers an A query through ServeDNS: the rcode and the addresses.
func askA(t *testing.T, m *MCMirror, name string) (int, []string) {
	t.Helper()
	msg := query(t, m, name, dns.TypeA)
	var out []string
	for _, rr := range msg.Answer {
		if a, ok := rr.(*dns.A); ok {
			out = append(out, a.A.String())
		}
	}
	slices.Sort(out)
	return msg.Rcode, out
}

// answersA reports whether name is answered with the addresses want.
func answersA(t *testing.T, m *MCMirror, name string, want ...string) func() bool {
	return func() bool {
		rc, got := askA(t, m, name)
		return rc == dns.RcodeSuccess && slices.Equal(got, want)
	}
}

// metricValue returns the value of the counter or gauge name (less its
// coredns_mcmirror_ prefix) of the series with the label values labels
// (name, value pairs), as the process's registry has it: 0 without one.
func metricValue(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "coredns_mcmirror_"+name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for i := 0; i < len(labels); i += 2 {
				if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
					return l.GetName() == labels[i] && l.GetValue() == labels[i+1]
				}) {
					continue series
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

// TestControllerServeDNS answers a query end to end through the informers.
func TestControllerServeDNS(t *testing.T) {
	west := remotetest.NewClientset(watchtest.Service("web", watchtest.ExportedGateway, "10.100.0.1", corev1.ServicePort{Name: "http", Port: 80}))
	local := remotetest.NewClientset(watchtest.MirrorService("web-west", "west", "", "10.96.0.20"))
	m := startPlugin(t, local, Options{StartupTimeout: watchtest.EventBound}, "west", west)
	runCase(t, m, testCase("web-west"+z, dns.TypeA, a("web-west"+z, "10.96.0.20")), false)
	runCase(t, m, testCase("20.0.96.10.in-addr.arpa.", dns.TypePTR, ptrRR("20.0.96.10.in-addr.arpa.", "web-west"+z)), false)
	runCase(t, m, next("web-paris"+z), false)
}

func TestLinkHandler(t *testing.T) {
	m := startPlugin(t, remotetest.NewClientset(), Options{StartupTimeout: 100 * time.Millisecond})
	h := m.LinkHandler()
	h.Add("west", &rest.Config{Host: "http://127.0.0.1:1"}, link.Namespaces{})
	require.Equal(t, []string{"west"}, m.watch.Links(), "links after Add")
	h.Add("West", &rest.Config{Host: "http://127.0.0.1:1"}, link.Namespaces{}) // not a cluster name: logged, ignored
	h.Remove("west")
	require.Empty(t, m.watch.Links(), "links after Remove")
}

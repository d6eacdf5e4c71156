// Package dns_test proves plugin mcmirror end to end: a real coredns-mc
// process answers real DNS queries (Go client and dig) from real API servers.
// Cluster east is the local one; west and paris are linked.
package dns_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

var env = harness.New(harness.Options{Clusters: []harness.ClusterOptions{
	{Name: "east", Workloads: true},
	{Name: "west", Workloads: true},
	{Name: "paris", Workloads: true},
}})

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

const zone = "svc.cluster.local."

// The seed walkthrough in gateway mode: a StatefulSet exported by west and by
// paris, and by east itself, is reached per pod through the mirror ClusterIPs
// in east, and its peers in every cluster are found by one SRV query; with
// either source.
func TestGatewayWalkthrough(t *testing.T) { eachSource(t, "walk", gatewayWalkthrough) }

func gatewayWalkthrough(t *testing.T, src source, ns string) {
	ctx := context.Background()
	east, west, paris := env.Cluster("east"), env.Cluster("west"), env.Cluster("paris")
	for _, c := range []*harness.Cluster{east, west, paris} {
		require.NoError(t, c.Apply(ctx, statefulSet(ns, 3, labels.ExportGateway)))
	}
	src.startController(t, "west", "paris")
	mirrors := map[string]map[string]string{}
	for _, c := range []*harness.Cluster{west, paris} {
		c.WaitEndpoints(t, ns, "nginx-svc", 3)
		mirrors[c.Name] = waitMirrors(t, east, c, ns, "nginx-svc", 3)
	}
	local := east.WaitEndpoints(t, ns, "nginx-svc", 3)

	// A local Service whose name merely ends in a linked cluster's name.
	require.NoError(t, east.Apply(ctx, `{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "foo-west", "namespace": "`+ns+`"},
		"spec": {"ports": [{"name": "http", "port": 80}]}}`))
	fooIP := clusterIP(t, east, ns, "foo-west")

	s := src.startDNS(t, []string{"west", "paris"})

	// Every pod's name: west's and paris's, at their mirror ClusterIPs,
	// and east's own, under its local name.
	want := map[string]string{}
	for _, c := range []*harness.Cluster{west, paris} {
		for host, ip := range mirrors[c.Name] {
			want[fmt.Sprintf("%s.nginx-svc-%s.%s.%s", host, c.Name, ns, zone)] = ip
			assert.True(t, east.ServiceCIDR.Contains(mustAddr(t, ip)), "a mirror ClusterIP is local")
		}
		// The headless mirror name: every per-pod mirror ClusterIP.
		name := fmt.Sprintf("nginx-svc-%s.%s.%s", c.Name, ns, zone)
		assert.Equal(t, values(mirrors[c.Name]), harness.Answers(s.Ask(t, "udp", name, dns.TypeA)), name)
	}
	for host, ip := range local {
		want[fmt.Sprintf("%s.nginx-svc.%s.%s", host, ns, zone)] = ip
	}

	// The seed's dig line, with the real dig.
	name := "nginx-set-0.nginx-svc-west." + ns + "." + zone
	assert.Equal(t, []string{mirrors["west"]["nginx-set-0"]}, s.Dig(t, name))

	// SRV on -global: every pod of every exporting cluster, each target
	// (port 80) with its glue.
	r := s.Ask(t, "tcp", "_http._tcp.nginx-svc-global."+ns+"."+zone, dns.TypeSRV)
	require.Equal(t, dns.RcodeSuccess, r.Rcode)
	var srvs []string
	for target := range want {
		srvs = append(srvs, "80 "+target)
	}
	assert.ElementsMatch(t, srvs, harness.Answers(r))
	assert.Equal(t, want, glue(r), "glue A records for every target")
	assert.Len(t, s.Dig(t, "SRV", "_http._tcp.nginx-svc-global."+ns+"."+zone), 9, "dig sees 9 peers")

	// Each pod's name, each SRV target, resolves on its own.
	for target, ip := range want {
		assert.Equal(t, []string{ip}, harness.Answers(s.Ask(t, "udp", target, dns.TypeA)), target)
	}

	// PTR of a mirror ClusterIP names the pod.
	rev, err := dns.ReverseAddr(mirrors["paris"]["nginx-set-1"])
	require.NoError(t, err)
	assert.Equal(t, []string{"nginx-set-1.nginx-svc-paris." + ns + "." + zone}, harness.Answers(s.Ask(t, "udp", rev, dns.TypePTR)))

	// AAAA on a name with only A records: NODATA with the SOA, not NXDOMAIN.
	r = s.Ask(t, "udp", name, dns.TypeAAAA)
	assert.Equal(t, dns.RcodeSuccess, r.Rcode)
	assert.Empty(t, r.Answer)
	require.Len(t, r.Ns, 1)
	assert.Equal(t, dns.TypeSOA, r.Ns[0].Header().Rrtype)

	// A pod that does not exist in a claimed service: NXDOMAIN with the SOA.
	r = s.Ask(t, "udp", "nginx-set-7.nginx-svc-west."+ns+"."+zone, dns.TypeA)
	assert.Equal(t, dns.RcodeNameError, r.Rcode)

	// The local foo-west is not hidden: the kubernetes plugin answers it.
	assert.Equal(t, []string{fooIP}, harness.Answers(s.Ask(t, "udp", "foo-west."+ns+"."+zone, dns.TypeA)))
	// What an operator sees: every link synced (in import mode, east
	// alone: no other cluster is watched), answers counted by kind, the
	// programming latency of remote changes observed.
	for _, c := range []string{"east", "west", "paris"} {
		v, ok := s.Metric(t, `coredns_mcmirror_link_synced{cluster="`+c+`"}`)
		if src.imports && c != "east" {
			assert.False(t, ok, "%s is not watched in import mode: %q", c, v)
			continue
		}
		assert.True(t, ok && v == "1", "%s synced: %q", c, v)
	}
	// A counter that moved, not one that exists: one more pod answer, one
	// more NXDOMAIN, each counted once.
	const podOK, podNX = `coredns_mcmirror_answers_total{kind="pod",rcode="NOERROR"}`, `coredns_mcmirror_answers_total{kind="pod",rcode="NXDOMAIN"}`
	okBefore, nxBefore := s.Value(t, podOK), s.Value(t, podNX)
	require.Equal(t, dns.RcodeSuccess, s.Ask(t, "udp", name, dns.TypeA).Rcode)
	require.Equal(t, dns.RcodeNameError, s.Ask(t, "udp", "nginx-set-7.nginx-svc-west."+ns+"."+zone, dns.TypeA).Rcode)
	assert.Equal(t, okBefore+1, s.Value(t, podOK), "pod answers counted")
	assert.Equal(t, nxBefore+1, s.Value(t, podNX), "pod NXDOMAIN counted")

	// Names are case-insensitive.
	assert.Equal(t, []string{mirrors["west"]["nginx-set-0"]},
		harness.Answers(s.Ask(t, "udp", strings.ToUpper(name), dns.TypeA)))
}

// Changes in a remote cluster show in the answers: scaling, unexporting,
// deleting the namespace; with either source.
func TestRemoteChanges(t *testing.T) { eachSource(t, "changes", remoteChanges) }

func remoteChanges(t *testing.T, src source, ns string) {
	ctx := context.Background()
	east, west, paris := env.Cluster("east"), env.Cluster("west"), env.Cluster("paris")
	// Mirrors go only to namespaces that exist locally.
	require.NoError(t, east.Apply(ctx, harness.Namespace(ns)))
	src.startController(t, "west", "paris")
	for _, c := range []*harness.Cluster{west, paris} {
		require.NoError(t, c.Apply(ctx, statefulSet(ns, 3, labels.ExportGateway)))
		c.WaitEndpoints(t, ns, "nginx-svc", 3)
		waitMirrors(t, east, c, ns, "nginx-svc", 3)
	}
	s := src.startDNS(t, []string{"west", "paris"})
	global := "nginx-svc-global." + ns + "." + zone
	require.Len(t, harness.Answers(s.Ask(t, "udp", global, dns.TypeA)), 6)

	// Scale west 3 → 5: two more pods, once the controller has mirrored
	// them.
	require.NoError(t, west.Scale(ctx, ns, "nginx-set", 5))
	west.WaitEndpoints(t, ns, "nginx-svc", 5)
	ips := waitMirrors(t, east, west, ns, "nginx-svc", 5)
	eventuallyAnswers(t, s, "nginx-svc-west."+ns+"."+zone, values(ips))
	eventuallyCount(t, s, global, 8)

	// Scale west 5 → 2: the answers follow the remote endpoints at once,
	// although the controller keeps the per-pod mirrors for a grace period.
	require.NoError(t, west.Scale(ctx, ns, "nginx-set", 2))
	west.WaitEndpoints(t, ns, "nginx-svc", 2)
	eventuallyCount(t, s, "nginx-svc-west."+ns+"."+zone, 2)
	eventuallyCount(t, s, global, 5)

	// Unexport in paris: its names go, the global name keeps west's pods.
	require.NoError(t, paris.LabelService(ctx, ns, "nginx-svc", labels.Exported, ""))
	eventuallyRcode(t, s, "nginx-set-0.nginx-svc-paris."+ns+"."+zone, dns.RcodeNameError)
	eventuallyCount(t, s, global, 2)

	// Deleting the namespace in west takes its names away; with no cluster
	// exporting, the global name is no longer claimed.
	require.NoError(t, west.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}))
	// The namespace controller takes seconds to delete what the namespace
	// holds; the plugin's part starts when the Service is gone.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := west.Client.CoreV1().Services(ns).Get(ctx, "nginx-svc", metav1.GetOptions{})
		assert.True(c, apierrors.IsNotFound(err), "service deleted: %v", err)
	}, 60*time.Second, 20*time.Millisecond)
	eventuallyRcode(t, s, "nginx-svc-west."+ns+"."+zone, dns.RcodeNameError)
	eventuallyRcode(t, s, global, dns.RcodeNameError)
}

// Flat mode answers the remote pod IPs: read from paris itself (direct,
// no mirror at all), or from the copies of paris's endpoints that east's
// controller writes (import).
func TestFlatMode(t *testing.T) { eachSource(t, "flat", flatMode) }

func flatMode(t *testing.T, src source, ns string) {
	ctx := context.Background()
	paris := env.Cluster("paris")
	require.NoError(t, paris.Apply(ctx, statefulSet(ns, 3, labels.ExportFlat)))
	eps := paris.WaitEndpoints(t, ns, "nginx-svc", 3)
	if src.imports {
		require.NoError(t, env.Cluster("east").Apply(ctx, harness.Namespace(ns)))
		src.startController(t, "paris")
	}
	s := src.startDNS(t, []string{"paris"})

	for host, ip := range eps {
		assert.True(t, paris.PodCIDR.Contains(mustAddr(t, ip)))
		eventuallyAnswers(t, s, host+".nginx-svc-paris."+ns+"."+zone, []string{ip})
	}
	assert.Equal(t, values(eps), harness.Answers(s.Ask(t, "udp", "nginx-svc-paris."+ns+"."+zone, dns.TypeA)))

	require.NoError(t, paris.Scale(ctx, ns, "nginx-set", 4))
	eps = paris.WaitEndpoints(t, ns, "nginx-svc", 4)
	eventuallyAnswers(t, s, "nginx-svc-global."+ns+"."+zone, values(eps))
	noPodPTR(t, s, src, ns, eps["nginx-set-0"])
}

// noPodPTR checks that the address ip of a linked cluster's flat-mode pod
// has no PTR record, in either mode: mcmirror names none, and in import
// mode the kubernetes plugin does not hold the controller's copies of the
// pod's EndpointSlice (its labels !mcmirror.dev/flat-endpoints), which
// would name it under the mirror, and hold every mirrored endpoint a
// second time. First the evidence that the kubernetes plugin would have
// seen the copies: it names a local slice written after them (one watch
// of every EndpointSlice, in order).
func noPodPTR(t *testing.T, s *harness.DNSServer, src source, ns, ip string) {
	t.Helper()
	probe := "10.250.0.9"
	if src.imports {
		probe = "10.250.0.10"
	}
	exportHeadless(t, env.Cluster("east"), ns, "probe", 1, 1, func(int) string { return probe })
	rev, err := dns.ReverseAddr(probe)
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, []string{"probe-0.probe." + ns + "." + zone}, harness.Answers(s.Ask(c, "udp", rev, dns.TypePTR)))
	}, 15*time.Second, 20*time.Millisecond, "the kubernetes plugin names the local slice written last")
	env.RequireAlive(t, s.Process)
	rev, err = dns.ReverseAddr(ip)
	require.NoError(t, err)
	assert.Empty(t, harness.Answers(s.Ask(t, "udp", rev, dns.TypePTR)), "PTR of paris's pod %s", ip)
}

// Links come and go with Linkerd-format kubeconfig Secrets in the local
// cluster.
func TestLinkSecrets(t *testing.T) {
	ctx, east, west, _ := setUp(t)
	const ns = "secrets"
	require.NoError(t, west.Apply(ctx, statefulSet(ns, 2, labels.ExportFlat)))
	eps := west.WaitEndpoints(t, ns, "nginx-svc", 2)

	require.NoError(t, east.Apply(ctx, `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"linkerd-multicluster"}}`))
	s := startDNS(t, nil, "link_secrets linkerd-multicluster")
	name := "nginx-svc-west." + ns + "." + zone
	assert.NotEqual(t, dns.RcodeSuccess, s.Ask(t, "udp", name, dns.TypeA).Rcode, "no link yet")

	secret := east.CreateLinkSecret(t, "linkerd-multicluster", "west", west.LinkData(t))
	eventuallyAnswers(t, s, name, values(eps))

	require.NoError(t, east.Client.CoreV1().Secrets("linkerd-multicluster").Delete(ctx, secret.Name, metav1.DeleteOptions{}))
	eventuallyRcode(t, s, name, dns.RcodeNameError)
}

// A link whose API server cannot be reached does not keep the server from
// becoming ready and answering for the other links.
func TestUnreachableLink(t *testing.T) {
	ctx, _, _, paris := setUp(t)
	const ns = "dead"
	require.NoError(t, paris.Apply(ctx, statefulSet(ns, 1, labels.ExportFlat)))
	eps := paris.WaitEndpoints(t, ns, "nginx-svc", 1)

	// A kubeconfig for an API server that is not there.
	dead := strings.Replace(string(paris.LinkData(t)), paris.Server, fmt.Sprintf("https://127.0.0.1:%d", harness.FreePort(t)), 1)
	deadPath := harness.TempFile(t, "dead.kubeconfig", []byte(dead))

	s := startDNS(t, []string{"paris"}, "link moon "+deadPath, "startup_timeout 2s")
	assert.Equal(t, values(eps), harness.Answers(s.Ask(t, "udp", "nginx-svc-paris."+ns+"."+zone, dns.TypeA)))
	// The dead link is visible to an operator.
	env.RequireAlive(t, s.Process)
	v, _ := s.Metric(t, `coredns_mcmirror_link_synced{cluster="moon"}`)
	assert.Equal(t, "0", v, "moon is not synced")
	v, _ = s.Metric(t, `coredns_mcmirror_link_synced{cluster="paris"}`)
	assert.Equal(t, "1", v, "paris is synced")
}

// A -global SRV answer with 300 pods does not fit in UDP: it is truncated
// there and served whole over TCP.
func TestLargeAnswerOverTCP(t *testing.T) {
	env.LogOnFailure(t)
	west := env.Cluster("west")
	const ns = "large"
	// Three slices of 100 endpoints, as the EndpointSlice controller would
	// split them.
	exportHeadless(t, west, ns, "big", 3, 100, func(n int) string { return fmt.Sprintf("10.201.%d.%d", 10+n/250, 1+n%250) })
	s := startDNS(t, []string{"west"})
	name := "_http._tcp.big-global." + ns + "." + zone

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		r := s.Ask(c, "tcp", name, dns.TypeSRV)
		assert.Len(c, r.Answer, 300)
		assert.Len(c, glue(r), 300)
	}, 20*time.Second, 50*time.Millisecond, "300 SRV records over TCP")
	r := s.Ask(t, "udp", name, dns.TypeSRV)
	assert.True(t, r.Truncated, "UDP answer has TC set")
	assert.Less(t, len(r.Answer), 300)
	assert.Len(t, s.Dig(t, "+tcp", "SRV", name), 300, "dig over TCP sees all 300")
}

// eventuallyAnswers waits until name's A answer is want, and logs how long
// that took.
func eventuallyAnswers(t *testing.T, s *harness.DNSServer, name string, want []string) {
	t.Helper()
	start := time.Now()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, want, harness.Answers(s.Ask(c, "udp", name, dns.TypeA)))
	}, 15*time.Second, 20*time.Millisecond, name)
	t.Logf("%s answered %d addresses after %v", name, len(want), time.Since(start).Round(time.Millisecond))
}

// eventuallyCount waits until name has n A records.
func eventuallyCount(t *testing.T, s *harness.DNSServer, name string, n int) {
	t.Helper()
	start := time.Now()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Len(c, harness.Answers(s.Ask(c, "udp", name, dns.TypeA)), n)
	}, 15*time.Second, 20*time.Millisecond, "%s with %d records", name, n)
	t.Logf("%s had %d records after %v", name, n, time.Since(start).Round(time.Millisecond))
}

// eventuallyRcode waits until an A query for name answers rcode.
func eventuallyRcode(t *testing.T, s *harness.DNSServer, name string, rcode int) {
	t.Helper()
	start := time.Now()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, dns.RcodeToString[rcode], dns.RcodeToString[s.Ask(c, "udp", name, dns.TypeA).Rcode])
	}, 15*time.Second, 20*time.Millisecond, "%s answers %s", name, dns.RcodeToString[rcode])
	t.Logf("%s answered %s after %v", name, dns.RcodeToString[rcode], time.Since(start).Round(time.Millisecond))
}

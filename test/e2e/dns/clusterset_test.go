package dns_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcmirror/mcmirror/controller"
	"github.com/mcmirror/mcmirror/internal/labels"
	"github.com/mcmirror/mcmirror/test/harness"
)

// The clusterset.local names of the Multi-Cluster Services DNS
// specification, answered by coredns-mc in east from real API servers. The
// derived Services are made here by hand, as east's controller makes them
// (name, labels, a ClusterIP or none); west exports, by the ServiceExport
// stamp in flat mode, a headless db (pods db-0, db-1) and a ClusterIP web,
// and east exports its own db (pod db-0).

const csZone = "svc.clusterset.local."

// derivedService is the derived Service of import ns/svc as the controller
// writes it: headless, or with a ClusterIP (the ClusterSetIP) allocated.
func derivedService(ns, svc string, headless bool) string {
	ip := ""
	if headless {
		ip = "\n  clusterIP: None"
	}
	return fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata:
  name: %s
  namespace: %s
  labels: {%s: %s, %s: %s, %s: %s}
spec:%s
  ports: [{name: http, port: 80}]
`, controller.DerivedName(ns, svc), ns, labels.ManagedBy, labels.ManagedByValue, labels.ServiceImport, svc,
		mcsv1beta1.LabelServiceName, svc, ip)
}

// clustersetCorefile is a cluster DNS Corefile for local in replace mode:
// mcmirror answers cluster.local as ever and clusterset.local as the
// specification has it, before kubernetes.
func clustersetCorefile(local *harness.Cluster, block string) string {
	return fmt.Sprintf(`
. {
    bind 127.0.0.1
    errors
    ready 127.0.0.1:{READY}
    prometheus 127.0.0.1:{METRICS}
    mcmirror cluster.local clusterset.local in-addr.arpa ip6.arpa {
        cluster %[1]s
        kubeconfig %[2]s
%[3]s
        clusterset
        fallthrough in-addr.arpa ip6.arpa
    }
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig %[2]s
        fallthrough in-addr.arpa ip6.arpa
    }
}
`, local.Name, local.Kubeconfig, block)
}

// applyClusterset exports db and web from west, db from east, and makes
// their derived Services in east; it returns web's ClusterSetIP.
func applyClusterset(t *testing.T, ns string) string {
	t.Helper()
	ctx := context.Background()
	east, west := env.Cluster("east"), env.Cluster("west")
	require.NoError(t, west.Apply(ctx, harness.Namespace(ns)+stampedService(ns, "db", labels.ModeFlat, "None")+
		"---\n"+stampedService(ns, "web", labels.ModeFlat, "")))
	require.NoError(t, west.Apply(ctx, sliceOf(t, ns, "db", map[string]string{"db-0": "10.204.0.1", "db-1": "10.204.0.2"})))
	require.NoError(t, west.Apply(ctx, sliceOf(t, ns, "web", map[string]string{"web-x": "10.204.0.9"})))
	require.NoError(t, east.Apply(ctx, harness.Namespace(ns)+stampedService(ns, "db", labels.ModeFlat, "None")))
	require.NoError(t, east.Apply(ctx, sliceOf(t, ns, "db", map[string]string{"db-0": "10.204.1.1"})))
	require.NoError(t, east.Apply(ctx, derivedService(ns, "db", true)+"---\n"+derivedService(ns, "web", false)))
	return clusterIP(t, east, ns, controller.DerivedName(ns, "web"))
}

// eventuallyNegative waits until name answers rcode for qtype with no
// record and the zone's SOA in the authority section (NODATA when rcode
// is NOERROR).
func eventuallyNegative(t *testing.T, s *harness.DNSServer, name string, qtype uint16, rcode int, zone string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		r := s.Ask(c, "udp", name, qtype)
		assert.Equal(c, dns.RcodeToString[rcode], dns.RcodeToString[r.Rcode])
		assert.Empty(c, r.Answer)
		assert.True(c, r.Authoritative, "authoritative")
		if assert.Len(c, r.Ns, 1) {
			assert.Equal(c, "SOA "+zone, dns.TypeToString[r.Ns[0].Header().Rrtype]+" "+r.Ns[0].Header().Name)
		}
	}, 15*time.Second, 20*time.Millisecond, "%s %s answers %s", dns.TypeToString[qtype], name, dns.RcodeToString[rcode])
}

func TestClusterSetNames(t *testing.T) {
	ctx, east, west, _ := setUp(t)
	const ns = "clusterset"
	webIP := applyClusterset(t, ns)
	s := env.StartDNS(t, "east/coredns-mc", clustersetCorefile(east, harness.LinkLines(t, west)))
	name := func(n string) string { return n + "." + ns + "." + csZone }

	// ClusterSetIP: the derived Service's ClusterIP; SRV on the bare name
	// is exactly {port, the name}, as the conformance suite has it.
	eventuallyAnswers(t, s, name("web"), []string{webIP})
	assert.Equal(t, []string{"80 " + name("web")}, harness.Answers(s.Ask(t, "udp", name("web"), dns.TypeSRV)))
	r := s.Ask(t, "udp", "_http._tcp."+name("web"), dns.TypeSRV)
	assert.Equal(t, []string{"80 " + name("web")}, harness.Answers(r))
	assert.Equal(t, map[string]string{name("web"): webIP}, glue(r))
	assert.Equal(t, []string{webIP}, s.Dig(t, name("web")), "dig")
	rev, err := dns.ReverseAddr(webIP)
	require.NoError(t, err)
	assert.Equal(t, []string{name("web")}, harness.Answers(s.Ask(t, "udp", rev, dns.TypePTR)), "PTR of the ClusterSetIP")
	// No name of one cluster's backends for a ClusterSetIP import.
	eventuallyNegative(t, s, name("west.web"), dns.TypeA, dns.RcodeNameError, "clusterset.local.")

	// Headless: every cluster's ready addresses, east's own first.
	eventuallyAnswers(t, s, name("db"), []string{"10.204.0.1", "10.204.0.2", "10.204.1.1"})
	assert.Equal(t, []string{"10.204.0.2"}, harness.Answers(s.Ask(t, "udp", name("db-1.west.db"), dns.TypeA)))
	assert.Equal(t, []string{"10.204.1.1"}, harness.Answers(s.Ask(t, "udp", name("db-0.east.db"), dns.TypeA)))
	assert.Equal(t, []string{"10.204.0.1"}, s.Dig(t, name("db-0.west.db")), "dig")
	r = s.Ask(t, "tcp", "_http._tcp."+name("db"), dns.TypeSRV)
	assert.Equal(t, []string{"80 " + name("db-0.east.db"), "80 " + name("db-0.west.db"), "80 " + name("db-1.west.db")}, harness.Answers(r))
	assert.Equal(t, map[string]string{name("db-0.east.db"): "10.204.1.1", name("db-0.west.db"): "10.204.0.1", name("db-1.west.db"): "10.204.0.2"}, glue(r))
	// PTR of a ready pod of west's flat-mode export: its clusterset name
	// (2.4.3).
	rev, err = dns.ReverseAddr("10.204.0.2")
	require.NoError(t, err)
	assert.Equal(t, []string{name("db-1.west.db")}, harness.Answers(s.Ask(t, "udp", rev, dns.TypePTR)), "PTR of west's flat-mode pod")

	// NODATA for the empty non-terminals and a type without records;
	// NXDOMAIN, authoritative, for what does not exist, mcmirror's own
	// names included: nothing goes on to the kubernetes plugin.
	for _, n := range []string{name("west.db"), ns + "." + csZone, csZone} {
		eventuallyNegative(t, s, n, dns.TypeA, dns.RcodeSuccess, "clusterset.local.")
	}
	eventuallyNegative(t, s, name("db"), dns.TypeAAAA, dns.RcodeSuccess, "clusterset.local.")
	nx := []string{name("db-7.west.db"), name("nope"), name("db-west"), name("db-global"), "nope." + csZone}
	for _, n := range nx {
		eventuallyNegative(t, s, n, dns.TypeA, dns.RcodeNameError, "clusterset.local.")
	}

	// The schema version.
	r = s.Ask(t, "udp", "dns-version.clusterset.local.", dns.TypeTXT)
	require.Len(t, r.Answer, 1)
	assert.Equal(t, []string{"1.0.0"}, r.Answer[0].(*dns.TXT).Txt)
	assert.Equal(t, []string{`"1.0.0"`}, s.Dig(t, "TXT", "dns-version.clusterset.local."), "dig")
	eventuallyNegative(t, s, "dns-version.clusterset.local.", dns.TypeA, dns.RcodeSuccess, "clusterset.local.")

	// cluster.local is unchanged: mcmirror's names, the kubernetes
	// plugin's for the rest.
	assert.Equal(t, []string{"10.204.0.1", "10.204.0.2"}, harness.Answers(s.Ask(t, "udp", "db-west."+ns+"."+zone, dns.TypeA)))
	assert.Equal(t, []string{"10.204.0.9"}, harness.Answers(s.Ask(t, "udp", "web-west."+ns+"."+zone, dns.TypeA)))
	assert.Equal(t, []string{webIP}, harness.Answers(s.Ask(t, "udp", controller.DerivedName(ns, "web")+"."+ns+"."+zone, dns.TypeA)))

	// Counted by kind.
	const csOK = `coredns_mcmirror_answers_total{kind="clusterset",rcode="NOERROR"}`
	before := s.Value(t, csOK)
	require.Equal(t, []string{webIP}, harness.Answers(s.Ask(t, "udp", name("web"), dns.TypeA)))
	assert.Equal(t, before+1, s.Value(t, csOK))

	// The derived Service goes: so does the name; db's stay.
	require.NoError(t, east.Client.CoreV1().Services(ns).Delete(ctx, controller.DerivedName(ns, "web"), metav1.DeleteOptions{}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := east.Client.CoreV1().Services(ns).Get(ctx, controller.DerivedName(ns, "web"), metav1.GetOptions{})
		assert.True(c, apierrors.IsNotFound(err), "derived Service deleted: %v", err)
	}, 30*time.Second, 20*time.Millisecond)
	eventuallyNegative(t, s, name("web"), dns.TypeA, dns.RcodeNameError, "clusterset.local.")
	assert.Equal(t, []string{"10.204.0.1", "10.204.0.2", "10.204.1.1"}, harness.Answers(s.Ask(t, "udp", name("db"), dns.TypeA)))
	assert.Equal(t, []string{"10.204.0.9"}, harness.Answers(s.Ask(t, "udp", "web-west."+ns+"."+zone, dns.TypeA)), "web is still exported")
	env.RequireAlive(t, s.Process)
}

// Forward mode: a server block of clusterset.local alone, the mcmirror
// stanza with clusterset, nothing after it; cluster.local is the
// kubernetes plugin's, in a block of its own without mcmirror.
func TestClusterSetForwardMode(t *testing.T) {
	env.LogOnFailure(t)
	east, west := env.Cluster("east"), env.Cluster("west")
	const ns = "clusterset-fwd"
	webIP := applyClusterset(t, ns)
	path := west.LinkFile(t)
	s := env.StartDNS(t, "east/coredns-mc", fmt.Sprintf(`
cluster.local {
    bind 127.0.0.1
    kubernetes {
        kubeconfig %[1]s
    }
}
clusterset.local {
    bind 127.0.0.1
    errors
    ready 127.0.0.1:{READY}
    prometheus 127.0.0.1:{METRICS}
    mcmirror {
        cluster east
        kubeconfig %[1]s
        link west %[2]s
        clusterset
    }
}
`, east.Kubeconfig, path))
	name := func(n string) string { return n + "." + ns + "." + csZone }
	eventuallyAnswers(t, s, name("web"), []string{webIP})
	eventuallyAnswers(t, s, name("db"), []string{"10.204.0.1", "10.204.0.2", "10.204.1.1"})
	assert.Equal(t, []string{"10.204.0.2"}, harness.Answers(s.Ask(t, "udp", name("db-1.west.db"), dns.TypeA)))
	assert.Equal(t, []string{`"1.0.0"`}, s.Dig(t, "TXT", "dns-version.clusterset.local."))
	eventuallyNegative(t, s, name("nope"), dns.TypeA, dns.RcodeNameError, "clusterset.local.")
	r := s.Ask(t, "udp", "clusterset.local.", dns.TypeSOA)
	require.Len(t, r.Answer, 1)
	assert.Equal(t, dns.TypeSOA, r.Answer[0].Header().Rrtype)
	// No mcmirror in cluster.local: its names are the kubernetes plugin's.
	assert.Equal(t, dns.RcodeNameError, s.Ask(t, "udp", "db-west."+ns+"."+zone, dns.TypeA).Rcode)
	env.RequireAlive(t, s.Process)
}
